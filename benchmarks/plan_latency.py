"""`trl-grpo-ext plan` against `python -c "from trl import GRPOConfig"`: wall time of each, interleaved, median of N runs.

    python benchmarks/plan_latency.py [--runs 15] [--config tiny_cpu]

Prints one line per command (median, min, max in seconds) and the ratio plan / import. `plan` reads the config with
the recipe's own dataclasses (issue 23: one source of truth for fields), so its bar is what importing them costs.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def wall(command: list[str]) -> float:
    """Seconds one run of ``command`` takes (output discarded; raises on a non-zero exit)."""
    start = time.perf_counter()
    subprocess.run(command, check=True, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    return time.perf_counter() - start


def measure(runs: int, config: str) -> dict[str, list[float]]:
    """Interleaved timings: {"import": [...], "plan": [...]}, ``runs`` each, after one warm-up of each."""
    commands = {"import": [sys.executable, "-c", "from trl import GRPOConfig"],
                "plan": [sys.executable, "-m", "trl_grpo_ext.cli.main", "plan", "--config", config]}
    for command in commands.values():
        wall(command)
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, command in commands.items():
            times[name].append(wall(command))
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--config", default="tiny_cpu")
    args = parser.parse_args()
    times = measure(args.runs, args.config)
    for name, values in times.items():
        print(f"{name:10s} median {statistics.median(values):.3f} s  min {min(values):.3f}  max {max(values):.3f}"
              f"  ({len(values)} runs)")
    ratio = statistics.median(times["plan"]) / statistics.median(times["import"])
    print(f"plan / import = {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
