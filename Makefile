# make sft   : create .venv if missing, install, train the embedded default (tiny model, sample corpora, CPU)
# make test  : create .venv if missing, install, run the whole test suite (CI's .ci/run calls this)
# make learn : the learning run (recipes/learn.py): teacher trajectories -> SFT from scratch -> held-out pass rate by step
# make learn-pivot : pivot GRPO from the learning run (recipes/learn_pivot.py): held-out decision-point reward and pass rate by step
# make learn-chain : SFT -> pivot -> agentic GRPO vs each stage alone (recipes/learn_chain.py): held-out pass rate by arm
# make grpo-agentic : agentic GRPO (recipes/grpo_agentic.py): episodes in the local sandbox, the task's tests as reward
# make test-fast : the suite minus the tests marked slow (multi-process runs, Harbor jobs): for the edit-test loop
# make bench : the benchmarks in bench/, each against its baseline, side by side
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
ACCELERATE_CONFIG ?= configs/accelerate/cpu.yaml
ARGS ?=
PYTEST_ARGS ?=
# the suite in 2 worker processes (pytest-xdist), a test module per worker at a time (its module fixtures run once),
# in collection order (tests/conftest.py puts the modules with slow tests first): 42.5 -> 23 min on 2 cores
PYTEST_WORKERS ?= -n 2 --dist loadscope --no-loadscope-reorder
# torch==2.13.0 is the CPU build where there is no GPU, so pip never resolves a multi-GB CUDA build here.
HAS_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1)
TORCH   := $(if $(HAS_GPU),torch>=2.6$(comma)<2.15,torch==2.13.0)
comma := ,

.PHONY: setup harbor sft learn learn-pivot learn-chain grpo-agentic test test-fast bench clean
# setup also builds the sandbox's compiled way in (sandbox/enter.c; gcc comes with `make harbor`); without a compiler
# it says why and commands enter through sandbox/enter.py
setup: $(VENV)/.installed harbor
	$(PY) -m sandbox.build_enter || true

# Harbor (evals) lives in its own Python >= 3.12 venv, .venv-harbor: its pins differ from the training stack's
harbor:
	bash eval/setup_harbor.sh

$(VENV)/.installed: pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python >= 3.11 is needed; set PYTHON=python3.11"'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[test]"
	touch $@

sft: setup
	DS_ACCELERATOR=$(if $(HAS_GPU),cuda,cpu) $(VENV)/bin/accelerate launch --config_file $(ACCELERATE_CONFIG) recipes/sft.py $(ARGS)

learn: setup
	DS_ACCELERATOR=$(if $(HAS_GPU),cuda,cpu) $(PY) recipes/learn.py $(ARGS)

learn-pivot: setup
	DS_ACCELERATOR=$(if $(HAS_GPU),cuda,cpu) $(PY) recipes/learn_pivot.py $(ARGS)

learn-chain: setup
	DS_ACCELERATOR=$(if $(HAS_GPU),cuda,cpu) $(PY) recipes/learn_chain.py $(ARGS)

grpo-agentic: setup
	DS_ACCELERATOR=$(if $(HAS_GPU),cuda,cpu) $(VENV)/bin/accelerate launch --config_file $(ACCELERATE_CONFIG) recipes/grpo_agentic.py $(ARGS)

test: setup
	$(PY) -m pytest $(PYTEST_WORKERS) $(PYTEST_ARGS)

test-fast: setup
	$(PY) -m pytest $(PYTEST_WORKERS) -m "not slow" $(PYTEST_ARGS)

bench: setup
	$(PY) bench/sft_throughput.py
	$(PY) bench/corpus_prepare.py
	$(PY) bench/grpo_reward_overhead.py
	$(PY) bench/reward_server.py
	$(PY) bench/eval_throughput.py
	$(PY) bench/deep_tasks.py

clean:
	rm -rf outputs wandb bench/results
