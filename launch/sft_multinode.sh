#!/bin/bash
# Multi-node SFT without SLURM: run this once on every node, with the same settings and a different NODE_RANK.
#
#   # node 0 (its address is MASTER_ADDR)             # node 1
#   NODE_RANK=0 NNODES=2 MASTER_ADDR=10.0.0.1 \        NODE_RANK=1 NNODES=2 MASTER_ADDR=10.0.0.1 \
#   CONFIG=configs/sft/qwen3-8b-lora.yaml \            CONFIG=configs/sft/qwen3-8b-lora.yaml \
#   bash launch/sft_multinode.sh --max_steps 3         bash launch/sft_multinode.sh --max_steps 3
#
# Environment:
#   NODE_RANK          this node's rank, 0..NNODES-1 (required)
#   NNODES             number of nodes (required)
#   MASTER_ADDR        address of node 0, reachable from every node (required)
#   MASTER_PORT        default 29500
#   GPUS_PER_NODE      default: the number of GPUs nvidia-smi lists, else 8
#   CONFIG             the SFT YAML (required)
#   ACCELERATE_CONFIG  default configs/accelerate/multi_node_zero3.yaml (machine settings overridden here)
#   ACCELERATE_ARGS    extra `accelerate launch` flags
# Arguments go to recipes/sft.py. A restarted run resumes from the last complete checkpoint in output_dir.
set -euo pipefail

: "${NODE_RANK:?set NODE_RANK (0 on the node at MASTER_ADDR)}"
: "${NNODES:?set NNODES, the number of nodes}"
: "${MASTER_ADDR:?set MASTER_ADDR, the address of node 0}"
: "${CONFIG:?set CONFIG to the SFT YAML}"
MASTER_PORT=${MASTER_PORT:-29500}
ACCELERATE_CONFIG=${ACCELERATE_CONFIG:-configs/accelerate/multi_node_zero3.yaml}
ACCELERATE_ARGS=${ACCELERATE_ARGS:-}
if [[ -z ${GPUS_PER_NODE:-} ]]; then
    GPUS_PER_NODE=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
    [[ $GPUS_PER_NODE -gt 0 ]] || GPUS_PER_NODE=8
fi
NUM_PROCESSES=$((NNODES * GPUS_PER_NODE))

cd "$(dirname "${BASH_SOURCE[0]}")/.."
for file in "$CONFIG" "$ACCELERATE_CONFIG" recipes/sft.py .venv/bin/activate; do
    [[ -f $file ]] || { echo "error: $PWD/$file: no such file" >&2; exit 2; }
done
# shellcheck disable=SC1091
source .venv/bin/activate

export TORCH_NCCL_ASYNC_ERROR_HANDLING=${TORCH_NCCL_ASYNC_ERROR_HANDLING:-1}
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export DS_ACCELERATOR=${DS_ACCELERATOR:-cuda}

echo "node $NODE_RANK/$NNODES: $NNODES nodes x $GPUS_PER_NODE GPUs = $NUM_PROCESSES ranks, master $MASTER_ADDR:$MASTER_PORT"
start=$(date +%s)
status=0
# shellcheck disable=SC2086  # ACCELERATE_ARGS is a list of flags
accelerate launch \
    --config_file "$ACCELERATE_CONFIG" \
    --num_machines "$NNODES" \
    --num_processes "$NUM_PROCESSES" \
    --machine_rank "$NODE_RANK" \
    --main_process_ip "$MASTER_ADDR" \
    --main_process_port "$MASTER_PORT" \
    --rdzv_backend c10d \
    $ACCELERATE_ARGS \
    recipes/sft.py --config "$CONFIG" "$@" || status=$?
elapsed=$(( $(date +%s) - start ))
printf 'total time: %dh %02dm %02ds (exit %d)\n' $((elapsed / 3600)) $((elapsed % 3600 / 60)) $((elapsed % 60)) "$status"
exit "$status"
