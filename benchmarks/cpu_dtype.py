"""bf16 on a CPU against float32, on the real-model recipe (`make demo-real`'s config).

Runs the shipped SmolLM2 config for ``--steps`` optimizer steps, no final evaluation and no checkpoints, once per arm
and repeat, in turn (the order reverses on odd repeats); the LoRA adapter stays float32 in every arm:
- ``float32``: ``--dtype float32 --bf16 false``, everything in float32;
- ``autocast``: ``--dtype float32 --bf16 true``, float32 weights, matrix products in bf16 under `torch.autocast`
  (mixed precision, as transformers' Trainer runs ``bf16: true``);
- ``bfloat16``: ``--dtype bfloat16 --bf16 false``, the frozen base's weights stored in bf16.

The arms sample different completions (other numbers), so besides `train_runtime` the script prints the time per
thousand completion tokens generated (from trainer_state.json's ``completions/mean_length``), and each arm's ratio to
``float32``. On a CPU with bf16 instructions (AVX512-BF16, AMX: Intel Sapphire Rapids and later) oneDNN runs bf16
matrix products several times faster; without them torch emulates bf16 and the ratio turns against it.

    python benchmarks/cpu_dtype.py                  # 8 steps, 1 repeat: about 9 minutes on 2 cores
    python benchmarks/cpu_dtype.py --steps 4 --repeats 2
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
#: arm -> the recipe's command-line settings
ARMS = {"float32": ["--dtype", "float32", "--bf16", "false"], "autocast": ["--dtype", "float32", "--bf16", "true"],
        "bfloat16": ["--dtype", "bfloat16", "--bf16", "false"]}


def run_arm(arm: str, steps: int, output_dir: Path) -> dict:
    """One recipe launch with ``arm``'s settings; returns its figures."""
    command = [sys.executable, "-m", "accelerate.commands.launch", "--quiet", "--config_file",
               str(ROOT / "recipes" / "accelerate_configs" / "cpu.yaml"), str(ROOT / "recipes" / "grpo_qlora.py"),
               "--config", str(CONFIG), *ARMS[arm], "--total_training_steps", str(steps), "--final_eval", "none",
               "--save_strategy", "no", "--output_dir", str(output_dir)]
    with open(output_dir.with_suffix(".log"), "w") as log:
        process = subprocess.Popen(command, env=dict(os.environ, HF_HUB_OFFLINE="1"), stdout=log,
                                   stderr=subprocess.STDOUT, cwd=ROOT)
        _, status, usage = os.wait4(process.pid, 0)
    if status != 0:
        raise SystemExit(f"{arm}: the recipe failed (see {output_dir.with_suffix('.log')})")
    history = json.loads((output_dir / "trainer_state.json").read_text())["log_history"]
    steps_logged = [h for h in history if "completions/mean_length" in h]
    completions_per_step = len(steps_logged) and json.loads(
        (output_dir / "run_plan.json").read_text())["completions_per_step"]
    tokens = sum(h["completions/mean_length"] for h in steps_logged) * completions_per_step
    runtime = history[-1]["train_runtime"]
    return {"train_runtime": runtime, "s_per_step": runtime / len(steps_logged), "completion_tokens": tokens,
            "s_per_1k_tokens": 1000 * runtime / tokens, "cpu_s": usage.ru_utime + usage.ru_stime,
            "peak_rss_gb": usage.ru_maxrss / 2**20}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8, help="optimizer steps per arm")
    parser.add_argument("--repeats", type=int, default=1, help="pairs of arms (alternating order)")
    args = parser.parse_args()
    results: dict[str, list[dict]] = {arm: [] for arm in ARMS}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for arm in list(ARMS) if repeat % 2 == 0 else list(reversed(ARMS)):
                results[arm].append(run_arm(arm, args.steps, Path(tmp) / f"{arm}-{repeat}"))
                print(f"{arm} (repeat {repeat}): " + ", ".join(f"{k} {v:.2f}" for k, v in results[arm][-1].items()),
                      flush=True)
    mean = {arm: {k: sum(r[k] for r in rows) / len(rows) for k in rows[0]} for arm, rows in results.items()}
    print(f"{'':18}" + "".join(f"{arm:>10}{'ratio':>7}" for arm in ARMS))
    for key in mean["float32"]:
        print(f"{key:18}" + "".join(f"{mean[arm][key]:10.2f}{mean[arm][key] / mean['float32'][key]:7.2f}"
                                    for arm in ARMS))


if __name__ == "__main__":
    main()
