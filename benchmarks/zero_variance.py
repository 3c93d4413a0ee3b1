"""Zero-variance filter: off / mask / resample on the embedded task, in one run, at a fixed budget of completions.

The reward is binary: 1 when the completion contains the prompt's target character at least k times, with k cycling
over `--min-counts` (default 1 2 4 8) across prompts: easy, medium and, for the untrained model, almost impossible
prompts. With the untrained embedded model and 24-token completions, 36% / 9% / 0.2% of completions reach k = 1 / 2 /
4, which leaves 5% / 48% / ~100% / 100% of the groups uniform at G = 8 (64 prompts × 8 samples), about half over a
run. Each mode trains the same model (same seed) until `--budget` completions have been generated, the extra rounds of
resample included, then the policy is scored on held-out prompts of the same mix. Printed per mode:

- uniform groups before filtering (fraction, averaged over steps);
- informative groups per step: groups with non-uniform rewards that reach the loss (of `--prompts-per-step`);
- completions generated per optimizer step (resample generates extra rounds);
- uniform fraction p: uniform groups among every group generated (all rounds), counted in the reward function;
- completions generated per informative group that reached the loss, and its ratio to the lower bound G / (1 − p)
  (the cost if every informative group generated were used; 1.00 for off and mask by construction);
- seconds per optimizer step, wall clock and CPU time of this process, as a ratio to off (other jobs on the machine
  disturb both);
- skipped optimizer updates (every group uniform);
- reward after the budget: mean binary reward of `--eval-generations` samples on each of `--eval-prompts` held-out
  prompts, and the mean count of the target character.

    python benchmarks/zero_variance.py                          # about 30 s on 2 idle CPU cores
    python benchmarks/zero_variance.py --seed 1 --budget 3200 --modes off resample
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def rows(num_prompts: int, min_counts: list[int], seed: int) -> list[dict]:
    """count-char prompts with a `min_count` column cycling through `min_counts` (the prompt's difficulty)."""
    from trl_grpo_ext.models.embedded import tiny

    out = tiny.count_char_rows(num_prompts, seed=seed)
    for i, row in enumerate(out):
        row["min_count"] = min_counts[i % len(min_counts)]
    return out


def contains_target(counter: dict, num_generations: int):
    """Binary reward: 1.0 if the completion holds `target` at least `min_count` times; counts what it scores (and its
    groups of `num_generations` consecutive completions, uniform when all their rewards are equal)."""

    def contains_target_k(completions, target, min_count, **kwargs):
        rewards = [float(c[0]["content"].count(t) >= k) for c, t, k in zip(completions, target, min_count)]
        counter["completions"] += len(completions)
        groups = [rewards[i : i + num_generations] for i in range(0, len(rewards), num_generations)]
        counter["groups"] += len(groups)
        counter["uniform_groups"] += sum(len(set(group)) == 1 for group in groups)
        return rewards

    return contains_target_k


def train(mode: str, args, tmp: str) -> dict:
    import logging

    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback

    from trl_grpo_ext import GRPOExtConfig, GRPOExtTrainer
    from trl_grpo_ext.models.embedded import tiny

    logging.getLogger("trl_grpo_ext.trainer").setLevel(logging.ERROR)
    counter = {"completions": 0, "groups": 0, "uniform_groups": 0}
    per_step = args.prompts_per_step * args.num_generations

    class StopAtBudget(TrainerCallback):
        def on_step_end(self, targs, state, control, **kwargs):
            if counter["completions"] >= args.budget:
                control.should_training_stop = True

    path = tiny.ensure_tiny_model()
    config = GRPOExtConfig(
        output_dir=os.path.join(tmp, mode),
        use_cpu=True,
        prompts_per_step=args.prompts_per_step,
        num_generations=args.num_generations,
        micro_batch_size=per_step,
        total_training_steps=args.budget // per_step,  # the budget stops resample earlier
        max_completion_length=args.max_completion_length,
        learning_rate=args.learning_rate,
        lr_scheduler_type="constant",
        zero_variance_filter=mode,
        **({"max_resample_rounds": args.max_resample_rounds} if mode == "resample" else {}),  # resample's alone
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        seed=args.seed,
    )
    trainer = GRPOExtTrainer(
        str(path),
        reward_funcs=contains_target(counter, args.num_generations),
        args=config,
        train_dataset=Dataset.from_list(rows(args.train_prompts, args.min_counts, args.seed)),
        processing_class=tiny.load_tokenizer(path),
        callbacks=[StopAtBudget()],
    )
    trainer.remove_callback(PrinterCallback)  # the per-step log dicts; the table below is the output
    start, cpu_start = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(io.StringIO()):  # the plan table of each run
        trainer.train()
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    if mode == "off":  # uniform groups are not filtered: all of them reach the loss
        uniform_before = [entry["frac_reward_zero_std"] for entry in logs]
        uniform_after = uniform_before
    else:
        uniform_before = [entry["zero_variance/frac_uniform_before"] for entry in logs]
        uniform_after = [entry["zero_variance/frac_uniform_after"] for entry in logs]
    steps = trainer.state.global_step
    informative_trained = sum(args.prompts_per_step * (1 - after) for after in uniform_after)
    p = counter["uniform_groups"] / counter["groups"]
    per_informative = counter["completions"] / informative_trained
    reward, count = evaluate(trainer.model, trainer.processing_class, args)
    return {
        "mode": mode,
        "steps": steps,
        "informative": args.prompts_per_step * (1 - sum(uniform_after) / len(uniform_after)),
        "generated_per_step": counter["completions"] / steps,
        "seconds_per_step": seconds / steps,
        "cpu_seconds_per_step": cpu_seconds / steps,
        "uniform_before": sum(uniform_before) / len(uniform_before),
        "skipped": max((entry.get("zero_variance/skipped_updates", 0) for entry in logs), default=0),
        "generated": counter["completions"],
        "uniform_fraction": p,
        "per_informative": per_informative,
        "bound_ratio": per_informative / (args.num_generations / (1 - p)),
        "reward": reward,
        "count": count,
    }


def evaluate(model, tokenizer, args) -> tuple[float, float]:
    """Mean binary reward and mean target count of sampled completions on held-out prompts (fixed sampling seed)."""
    import torch

    model.eval()
    torch.manual_seed(1234)
    rewards, counts = [], []
    for row in rows(args.eval_prompts, args.min_counts, args.seed + 10_000):
        ids = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, return_tensors="pt")
        ids = ids if isinstance(ids, torch.Tensor) else ids["input_ids"]
        with torch.no_grad():
            out = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                do_sample=True,
                max_new_tokens=args.max_completion_length,
                num_return_sequences=args.eval_generations,
                pad_token_id=tokenizer.pad_token_id,
            )
        for text in tokenizer.batch_decode(out[:, ids.shape[1] :], skip_special_tokens=True):
            counts.append(text.count(row["target"]))
            rewards.append(float(counts[-1] >= row["min_count"]))
    return sum(rewards) / len(rewards), sum(counts) / len(counts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", nargs="+", default=["off", "mask", "resample"], choices=["off", "mask", "resample"])
    parser.add_argument("--budget", type=int, default=1280, help="generated completions per mode (all rounds)")
    parser.add_argument("--prompts-per-step", type=int, default=4)
    parser.add_argument("--num-generations", type=int, default=8, help="G")
    parser.add_argument("--max-completion-length", type=int, default=24, help="tokens")
    parser.add_argument(
        "--min-counts",
        type=int,
        nargs="+",
        default=[1, 2, 4, 8],
        help="k per prompt, cycled: reward 1 at >= k targets",
    )
    parser.add_argument("--max-resample-rounds", type=int, default=3)
    parser.add_argument("--learning-rate", type=float, default=3e-4)
    parser.add_argument("--train-prompts", type=int, default=512)
    parser.add_argument("--eval-prompts", type=int, default=32)
    parser.add_argument("--eval-generations", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import torch

    load = os.getloadavg()
    print(
        f"machine load (1/5/15 min) at start: {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} on {os.cpu_count()} cores; "
        f"budget={args.budget} completions, P={args.prompts_per_step} prompts/step, G={args.num_generations}, "
        f"L={args.max_completion_length} tokens, k in {args.min_counts}, max_resample_rounds={args.max_resample_rounds}, "
        f"lr={args.learning_rate}, torch threads={torch.get_num_threads()}",
        flush=True,
    )
    with tempfile.TemporaryDirectory() as tmp:
        results = []
        for mode in args.modes:
            results.append(train(mode, args, tmp))
            print(f"  {mode}: done ({results[-1]['steps']} steps)", flush=True)
    load = os.getloadavg()
    print(f"machine load (1/5/15 min) at the end: {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}")
    base = next((r for r in results if r["mode"] == "off"), None)
    print(
        "\n| mode | optimizer steps | uniform groups before filter | informative groups / step "
        f"(of {args.prompts_per_step}) | completions generated / step | uniform fraction p (all rounds) | "
        "completions / informative group (× bound G/(1−p)) | wall s / step (× off) | CPU s / step (× off) "
        f"| skipped updates | reward after {args.budget} completions | mean target count |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        wall = f"{r['seconds_per_step']:.3f}" + (
            f" ({r['seconds_per_step'] / base['seconds_per_step']:.2f}×)" if base else ""
        )
        cpu = f"{r['cpu_seconds_per_step']:.3f}" + (
            f" ({r['cpu_seconds_per_step'] / base['cpu_seconds_per_step']:.2f}×)" if base else ""
        )
        print(
            f"| {r['mode']} | {r['steps']} | {r['uniform_before']:.2f} | {r['informative']:.2f} | "
            f"{r['generated_per_step']:.1f} | {r['uniform_fraction']:.3f} | {r['per_informative']:.2f} "
            f"({r['bound_ratio']:.3f}×) | {wall} | {cpu} | {int(r['skipped'])} | {r['reward']:.3f} | "
            f"{r['count']:.2f} |"
        )


if __name__ == "__main__":
    main()
