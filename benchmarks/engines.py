"""Engines on 2 CPU processes: seconds per optimizer step (ratio to DDP) and peak memory per process.

Runs tests/engines_worker.py (LoRA r 8 on the float32 tiny model, 16 completions of 8 tokens per step, 2 micro-batches
per process, zero_variance_filter mask) under DDP (torchrun), DeepSpeed ZeRO-2 / ZeRO-3 (`accelerate launch` with
recipes/accelerate_configs/zero{2,3}_cpu.yaml) and FSDP2 (fsdp2_cpu.yaml, with the test-only patch that lets accelerate
take its FSDP path on a CPU, tests/fsdp_cpu.py), `--repeats` times each, interleaved, and prints a Markdown table:
the median over repeats of the training time per step (the slower process; ``trainer.train()`` only, so launch,
imports and model loading are excluded) and its ratio to DDP, and the peak resident memory of a process (ru_maxrss,
the larger of the two). Other jobs on the machine disturb the times; the load average is printed with them.

    python benchmarks/engines.py                       # about 4 minutes on 2 CPU cores
    python benchmarks/engines.py --steps 20 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from factories import run_worker_on_2_processes, run_worker_under_accelerate  # noqa: E402

ENGINES = {"DDP (torchrun, gloo)": None, "DeepSpeed ZeRO-2": "zero2_cpu.yaml", "DeepSpeed ZeRO-3": "zero3_cpu.yaml",
           "FSDP2 (gloo, test-only patch)": "fsdp2_cpu.yaml"}


def run_once(config: str | None, steps: int) -> tuple[float, float]:
    """(seconds per step of the slower process, peak RSS MiB of the larger process) of one run."""
    with tempfile.TemporaryDirectory() as out:
        if config is None:
            result = run_worker_on_2_processes("engines_worker.py", out, "mask", str(steps), timeout=900)
        else:
            result = run_worker_under_accelerate(config, "engines_worker.py", out, "mask", str(steps), timeout=900)
        if result.returncode != 0:
            raise SystemExit(result.stderr[-3000:])
        ranks = [json.loads((Path(out) / f"rank{r}.json").read_text()) for r in (0, 1)]
    return max(r["train_seconds"] for r in ranks) / steps, max(r["peak_rss_mib"] for r in ranks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    times = {name: [] for name in ENGINES}
    memory = {name: [] for name in ENGINES}
    for _ in range(args.repeats):
        for name, config in ENGINES.items():
            seconds, rss = run_once(config, args.steps)
            times[name].append(seconds)
            memory[name].append(rss)
    ddp = statistics.median(times["DDP (torchrun, gloo)"])
    print(f"{args.steps} steps, {args.repeats} repeats, load average {os.getloadavg()[0]:.1f} at the end")
    print("| engine | processes | precision | s / step (median) | ratio to DDP | peak RSS per process (MiB) |")
    print("|---|---|---|---|---|---|")
    for name in ENGINES:
        median = statistics.median(times[name])
        print(f"| {name} | 2 | float32, LoRA r 8 | {median:.3f} | {median / ddp:.2f} | {max(memory[name]):.0f} |")


if __name__ == "__main__":
    main()
