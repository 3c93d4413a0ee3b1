#!/usr/bin/env bash
# Issue 16's GPU measurement in one call, for a lent single-GPU machine with no network (see docs/benchmarks.md):
# default generation vs continuous batching vs a static cache on a Qwen2.5-1.5B-shaped NF4 + LoRA model, G 8,
# 256 tokens; a few minutes (estimated, not yet run). Wheels missing on the machine travel in .whl/ (as for benchmarks/gpu_checks.sh).
# Usage there: OUT=<dir> bash benchmarks/gpu_generation.sh [extra benchmarks/generation.py arguments]
set -u
source benchmarks/gpu_env.sh /tmp/gpu_generation
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 580 python3 benchmarks/generation.py --device cuda --json "$OUT/generation.json" "$@" 2>&1 \
  | tee "$OUT/generation.txt" | grep -v -i warning
