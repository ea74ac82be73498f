#!/usr/bin/env bash
# The SFT benchmark on a GPU machine with no network (docs/benchmarks.md's H200 figures): installs the carried wheels
# (.whl: trl, transformers, datasets, dill, multiprocess, fsspec), then runs bench/sft_throughput.py on a model of
# Qwen3-0.6B's shape (or SHAPE's) with random weights (no checkpoint can be downloaded there). Results under $OUT.
set -uo pipefail
OUT=${OUT:-bench/results}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1 TERMINAL_RECIPES_CACHE=/tmp/trcache PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
python3 -c "import torch, transformers, trl, datasets, pyarrow; print('torch', torch.__version__, 'transformers', \
transformers.__version__, 'trl', trl.__version__, 'datasets', datasets.__version__, 'pyarrow', pyarrow.__version__)" \
    | tee -a "$OUT/gpu.txt" || exit 1
# SHAPE=qwen3-1.7b|qwen3-4b MAX_LENGTH=32768 for the shapes; EXTRA=--use_liger_kernel where liger-kernel is carried
python3 bench/sft_throughput.py --random_model "${SHAPE:-qwen3-0.6b}" --records "${RECORDS:-48}" \
    --max_length "${MAX_LENGTH:-16384}" --batch_size 2 --gradient_checkpointing ${EXTRA:-} \
    --out "$OUT/sft_throughput_h200.json" > "$OUT/sft_gpu.log" 2>&1
status=$?
grep -v -i warn "$OUT/sft_gpu.log" | tail -30
exit $status
