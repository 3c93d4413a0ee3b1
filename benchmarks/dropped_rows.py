"""Dropped rows against mask: step time with half the groups uniform, on the tiny model and on SmolLM2, in one run.

Both arms are `zero_variance_filter: mask` with the same seed, data and reward; "mask (rows weighted 0)" is the
filter as it was before rows were dropped (``ZeroVarianceFilter.drop_masked_rows`` replaced by the identity, so TRL's
loss forward and backward still run on every row), "dropped" is the filter as shipped. The reward makes exactly half
the groups of every step uniform: prompts at even dataset positions get a constant reward, the others the
completion's position in its group. Arms alternate (A B A B ...) so that load on the machine falls on both alike.
Printed per model: CPU seconds of the process per optimizer step (generation, scoring, loss forward and backward and
the update; the first step left out; the phases in wall seconds), rows the loss saw per step, and the ratio dropped / mask.

    python benchmarks/dropped_rows.py                      # tiny model: about 1 minute on 2 cores
    python benchmarks/dropped_rows.py --model tiny-shipped --prompts-per-step 2   # the tiny demo's step (4-bit, LoRA)
    python benchmarks/dropped_rows.py --model smollm2 --steps 3 --repeats 1   # SmolLM2-135M: about 10 minutes
    python benchmarks/dropped_rows.py --model smollm2 --prompt-format chat --prompts-per-step 3 --max-completion-length 64
                                                       # the shipped SmolLM2 run's step: its prompts, 3 x G 8, 64 tokens
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from transformers import TrainerCallback  # noqa: E402

GROUP_SIZE = [8]  # G of the run (set by main)


def half_uniform_reward(completions, uniform_row, **kwargs):
    """1.0 for every completion of a prompt flagged ``uniform_row`` (a uniform group), else the position in its group."""
    return [1.0 if flag else float(i % GROUP_SIZE[0]) for i, flag in enumerate(uniform_row)]


def _dataset(model: str, num_prompts: int, prompt_format: str = "text"):
    """``prompt_format`` ``"chat"``: the shipped SmolLM2 run's prompts (its system prompt, then the question, as chat
    messages, so the chat template applies); ``"text"``: the bare question (no template)."""
    from datasets import Dataset

    from trl_grpo_ext.data import arithmetic
    from trl_grpo_ext.data.load import to_chat_prompt
    from trl_grpo_ext.models.embedded import tiny

    rows = (tiny.count_char_rows(num_prompts) if model.startswith("tiny")
            else arithmetic.arithmetic_rows("train", num_problems=num_prompts))
    prompts = [row.get("prompt", row.get("question")) for row in rows]
    if prompt_format == "chat":
        import yaml

        system = yaml.safe_load((ROOT / "recipes/configs/smollm2_arithmetic_cpu.yaml").read_text())["system_prompt"]
        prompts = [to_chat_prompt(prompt, system) for prompt in prompts]
    return Dataset.from_list([{"prompt": prompt, "uniform_row": i % 2 == 0} for i, prompt in enumerate(prompts)])


def _trainer(model: str, out_dir: str, args, seed: int):
    import torch
    from peft import LoraConfig

    from trl_grpo_ext import GRPOExtConfig, GRPOExtTrainer
    from trl_grpo_ext.models.embedded import smollm2, tiny

    quantization, extra = None, {}
    if model == "tiny":
        path = tiny.ensure_tiny_model()
        tokenizer = tiny.load_tokenizer(path)
        peft = None
    elif model == "tiny-shipped":  # the embedded demo's model as tiny_cpu.yaml loads it: 4-bit NF4, LoRA, float32 adapter
        from trl_grpo_ext.config.frontdoor import read_run_args
        from trl_grpo_ext.models.loading import lora_config, quantization_config

        _, shipped, model_args, _ = read_run_args(["--config", "tiny_cpu"], announce=False)  # as the recipe reads it
        path = tiny.ensure_tiny_model()
        tokenizer = tiny.load_tokenizer(path)
        peft, quantization = lora_config(model_args), quantization_config(model_args, shipped)
        extra = {"adapter_dtype": shipped.adapter_dtype}
    else:
        path = smollm2.ensure_smollm2()
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(path)
        peft = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, task_type="CAUSAL_LM",
                          target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    config = GRPOExtConfig(
        output_dir=out_dir, use_cpu=True, bf16=False, report_to=[], save_strategy="no", logging_steps=1,
        disable_tqdm=True, prompts_per_step=args.prompts_per_step, num_generations=args.num_generations,
        micro_batch_size=args.micro_batch_size, total_training_steps=args.steps,
        max_completion_length=args.max_completion_length, learning_rate=1e-4, temperature=0.7, beta=0.0, seed=seed,
        zero_variance_filter="mask", gradient_checkpointing=False, model_init_kwargs={"dtype": torch.float32}, **extra,
    )
    GROUP_SIZE[0] = args.num_generations
    return GRPOExtTrainer(str(path), reward_funcs=[half_uniform_reward], args=config,
                          train_dataset=_dataset(model, args.prompts_per_step * args.steps, args.prompt_format),
                          processing_class=tokenizer, peft_config=peft, quantization_config=quantization)


class _StepClock(TrainerCallback):
    """CPU seconds of this process for every optimizer step (between consecutive ``on_step_end`` calls, from
    ``on_step_begin``): other jobs on the machine slow the wall clock of both arms, not their CPU time."""

    def __init__(self):
        self.seconds, self.wall, self._start = [], [], None

    def on_step_begin(self, args, state, control, **kwargs):
        if self._start is None:
            self._start = (time.process_time(), time.perf_counter())

    def on_step_end(self, args, state, control, **kwargs):
        now = (time.process_time(), time.perf_counter())
        self.seconds.append(now[0] - self._start[0])
        self.wall.append(now[1] - self._start[1])
        self._start = now


def _arm(model: str, drop: bool, args, seed: int) -> dict:
    with tempfile.TemporaryDirectory() as out:
        trainer = _trainer(model, out, args, seed)
        rows = []
        select = trainer.zero_variance.drop_masked_rows if drop else (lambda inputs: inputs)

        def recorded_rows(inputs):  # the rows TRL's loss forward gets (one call per micro-batch, as the trainer makes)
            kept = select(inputs)
            rows.append(int(kept["completion_ids"].size(0)))
            return kept

        trainer.zero_variance.drop_masked_rows = recorded_rows
        ours, step, generate = trainer._compute_loss, trainer.training_step, trainer._generate_and_score_completions
        phases = {"generation": 0.0, "loss forward": 0.0, "step": 0.0}

        def counting(model_, inputs):
            start = time.perf_counter()
            loss = ours(model_, inputs)
            phases["loss forward"] += time.perf_counter() - start
            return loss

        def timed_generate(inputs):
            start = time.perf_counter()
            output = generate(inputs)
            phases["generation"] += time.perf_counter() - start
            return output

        def timed_step(*a, **k):
            start = time.perf_counter()
            loss = step(*a, **k)
            phases["step"] += time.perf_counter() - start
            return loss

        trainer._compute_loss, trainer.training_step = counting, timed_step
        trainer._generate_and_score_completions = timed_generate
        clock = _StepClock()
        trainer.add_callback(clock)
        trainer.train()
        logs = [h for h in trainer.state.log_history if "reward" in h]
        times = clock.seconds[1:]  # the first step pays one-off costs
        shares = [h["zero_variance/frac_uniform_before"] for h in logs]
    phases["backward"] = phases.pop("step") - phases["generation"] - phases["loss forward"]
    return {"step_time": statistics.mean(times), "wall_step_time": statistics.mean(clock.wall[1:]), "rows_per_step": sum(rows) / args.steps,
            "uniform_share": statistics.mean(shares),
            **{f"{name} s/step": value / args.steps for name, value in phases.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("tiny", "tiny-shipped", "smollm2"), default="tiny",
                        help="tiny-shipped: the tiny model as tiny_cpu.yaml trains it (4-bit NF4, LoRA r 8, lm_head)")
    parser.add_argument("--steps", type=int, default=6, help="optimizer steps per arm (the first is not timed)")
    parser.add_argument("--repeats", type=int, default=2, help="A B pairs per model")
    parser.add_argument("--prompts-per-step", type=int, default=4)
    parser.add_argument("--num-generations", type=int, default=8)
    parser.add_argument("--micro-batch-size", type=int, default=None, help="default: the whole step (no accumulation)")
    parser.add_argument("--max-completion-length", type=int, default=None, help="default: 24 tiny, 48 smollm2")
    parser.add_argument("--prompt-format", choices=("text", "chat"), default="text",
                        help="chat: the shipped SmolLM2 config's system prompt and chat template (smollm2 only)")
    args = parser.parse_args(argv)
    if args.prompt_format == "chat" and args.model != "smollm2":
        parser.error("--prompt-format chat is for --model smollm2 (the tiny model has no chat template)")
    args.micro_batch_size = args.micro_batch_size or args.prompts_per_step * args.num_generations
    args.max_completion_length = args.max_completion_length or (24 if args.model.startswith("tiny") else 48)

    results = {"mask (rows weighted 0)": [], "dropped": []}
    for repeat in range(args.repeats):
        for name, drop in (("mask (rows weighted 0)", False), ("dropped", True)):
            results[name].append(_arm(args.model, drop, args, seed=repeat))
            print(f"{name:24s} repeat {repeat}: {results[name][-1]}", flush=True)
    mask = statistics.mean(r["step_time"] for r in results["mask (rows weighted 0)"])
    dropped = statistics.mean(r["step_time"] for r in results["dropped"])
    print(f"\nmodel {args.model}: {args.prompts_per_step} prompts x G {args.num_generations}, "
          f"{args.max_completion_length} new tokens, micro-batch {args.micro_batch_size}, {args.prompt_format} prompts")
    for name, runs in results.items():
        print(f"  {name:24s} {statistics.mean(r['step_time'] for r in runs):6.2f} CPU s/step  "
              f"{statistics.mean(r['wall_step_time'] for r in runs):6.2f} wall s/step  "
              f"{statistics.mean(r['rows_per_step'] for r in runs):5.1f} rows in the loss per step  "
              f"uniform share {statistics.mean(r['uniform_share'] for r in runs):.2f}  " + "  ".join(
                  f"{phase} {statistics.mean(r[phase + ' s/step'] for r in runs):.2f}"
                  for phase in ("generation", "loss forward", "backward")))
    wall_ratio = (statistics.mean(r["wall_step_time"] for r in results["dropped"])
                  / statistics.mean(r["wall_step_time"] for r in results["mask (rows weighted 0)"]))
    print(f"  step time ratio dropped / mask: {dropped / mask:.2f} (CPU time), {wall_ratio:.2f} (wall)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
