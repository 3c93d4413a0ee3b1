"""Freed host memory kept in the process (`training.host_memory`) against glibc's defaults, on the real-model recipe.

Runs the shipped SmolLM2 config (`make demo-real`'s) for ``--steps`` optimizer steps, no final evaluation and no
checkpoints, twice per repeat: ``default`` (``TRL_GRPO_EXT_RETAIN_MEMORY=0``: glibc as it comes) and ``retained``
(the recipe's default on a CPU), alternately. Both arms train the same steps on the same numbers (malloc changes no
arithmetic: the per-step rewards must match, and the script checks it). Printed per arm: `train_runtime`, user and
system CPU seconds and minor page faults of the whole launch (`/usr/bin/time`-style, from `os.wait4`), peak RSS, and
the ratios retained / default.

    python benchmarks/host_memory.py                    # 10 steps, 1 repeat: about 15 minutes on 2 cores
    OMP_NUM_THREADS=1 taskset -c 0 python benchmarks/host_memory.py --steps 6
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "recipes" / "configs" / "smollm2_arithmetic_cpu.yaml"


def run_arm(arm: str, steps: int, output_dir: Path) -> dict:
    """One recipe launch; returns its figures."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRL_GRPO_EXT_RETAIN_MEMORY="0" if arm == "default" else "1")
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
               str(ROOT / "recipes" / "accelerate_configs" / "cpu.yaml"), str(ROOT / "recipes" / "grpo_qlora.py"),
               "--config", str(CONFIG),
               "--total_training_steps", str(steps), "--final_eval", "none", "--save_strategy", "no",
               "--output_dir", str(output_dir)]
    with open(output_dir.with_suffix(".log"), "w") as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        _, status, usage = os.wait4(process.pid, 0)
    if status != 0:
        raise SystemExit(f"{arm}: the recipe failed (see {output_dir.with_suffix('.log')})")
    history = json.loads((output_dir / "trainer_state.json").read_text())["log_history"]
    return {"train_runtime": history[-1]["train_runtime"], "user": usage.ru_utime, "system": usage.ru_stime,
            "faults": usage.ru_minflt, "peak_rss_gb": usage.ru_maxrss / 2**20,
            "rewards": [round(h["reward"], 6) for h in history if "reward" in h]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10, help="optimizer steps per arm")
    parser.add_argument("--repeats", type=int, default=1, help="pairs of arms (alternating order)")
    args = parser.parse_args()
    results: dict[str, list[dict]] = {"default": [], "retained": []}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            order = ("default", "retained") if repeat % 2 == 0 else ("retained", "default")
            for arm in order:
                results[arm].append(run_arm(arm, args.steps, Path(tmp) / f"{arm}-{repeat}"))
                print(f"{arm} (repeat {repeat}): " + ", ".join(f"{k} {v:.1f}" for k, v in results[arm][-1].items()
                                                               if k != "rewards"), flush=True)
    for a, b in zip(results["default"], results["retained"]):
        if a["rewards"] != b["rewards"]:
            raise SystemExit(f"the arms trained different steps: rewards {a['rewards']} against {b['rewards']}")

    def mean(arm, key):
        return sum(r[key] for r in results[arm]) / len(results[arm])

    print(f"\n{'':16s}{'default':>12s}{'retained':>12s}{'ratio':>8s}")
    for key in ("train_runtime", "user", "system", "faults", "peak_rss_gb"):
        d, r = mean("default", key), mean("retained", key)
        print(f"{key:16s}{d:12.1f}{r:12.1f}{r / d if d else float('nan'):8.2f}")
    print(f"per-step rewards identical in both arms ({args.steps} steps × {args.repeats} repeat(s))")


if __name__ == "__main__":
    main()
