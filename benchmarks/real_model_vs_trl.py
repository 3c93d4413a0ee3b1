"""The add-on against plain TRL on a real model: SmolLM2-135M-Instruct, arithmetic, equal CPU time per arm.

    python benchmarks/real_model_vs_trl.py --arms trl mask budget signal both --seeds 0   # one arm at a time
    python benchmarks/real_model_vs_trl.py --combine --arms trl mask budget signal both --seeds 0 1   # the table
    python benchmarks/real_model_vs_trl.py --seeds 0 --cpu-minutes 4 --train-prompts 12   # a quicker look

Each arm runs in its own process and writes ``--output-dir``/<arm>-seed<seed>.json; an arm whose file exists is read
back instead of run again (``--rerun`` runs it anyway), so arms can run at different times on the same commit, and
``--combine`` prints the table of those present.

Arms, each trained from the same base for the same budget of CPU time (this process's user + system time, so load
from other jobs on the machine costs neither arm), run alternately (the order flips with the seed):

- ``trl``: plain ``trl.GRPOTrainer`` + ``trl.GRPOConfig`` set up the way TRL's docs show: ``per_device_train_batch_size``
  counts completions (prompts per step × G), ``gradient_accumulation_steps`` 1, ``max_steps`` as the stop;
- ``mask``: this add-on's recipe settings with ``zero_variance_filter: mask`` (uniform groups out of the loss, their
  rows dropped before the loss forward);
- ``skip``: ``zero_variance_filter: skip`` (prompts predicted uniform skipped before rollout, then mask);
- ``budget``: ``mask`` + ``rollout_budget: adaptive`` (each step's completions split by estimated pass rate);
- ``signal``: ``mask`` + ``zero_variance_signal: entropy`` (all-right / all-wrong groups teach, RL-ZVP-style);
- ``both``: ``mask`` + both;
- ``budget-nm``, ``signal-nm``, ``both-nm``: the same with ``zero_variance_reward: numeric_match``, so that groups are
  judged on correctness alone (on the weighted total, a group all wrong but partly formatted is *tied*, neither all
  right nor all wrong, and stays masked); their uniform shares count groups uniform on correctness.

All arms share the shipped CPU config's model settings (LoRA r 16 on every linear layer of the base, loaded in
``--dtype``: the config's own by default), learning
rate, temperature, G and rewards (`recipes/configs/smollm2_arithmetic_cpu.yaml`), with ``--prompts-per-step`` and
``--max-completion-length`` (defaults 3 and 48; the config has 3 × 64), on the first ``--train-prompts``
training problems (default 24: 8 steps an epoch, 2.5 to 4 epochs in the default budget, so a prompt's history can act). Every arm's
reward functions are wrapped by the same recorder, which counts uniform groups from the rewards themselves (TRL's
own ``frac_reward_zero_std`` misses float32 noise). After training, each adapter answers the same 200 held-out
problems greedily (the product's `evaluation.evaluate_model`). Every arm runs on glibc's malloc defaults (the
recipe's host-memory setting is left out, so that the arms differ only in how they treat uniform groups).

Printed per arm (means over seeds, and each seed): optimizer steps, completions generated, share of completions in
uniform groups, share of completions whose every advantage was 0 (all steps, and after the first epoch; the signal
arms keep all-right / all-wrong groups' gradient), informative groups (with variance) per CPU minute, held-out greedy
accuracy with its Wilson interval, and the paired difference against the ``trl`` and ``mask`` arms of the same seed
(Newcombe's interval); the uniform groups' causes; ratios are between arms of the same run. Then GRESO's premise, measured in each arm: of
the groups of a prompt rolled out before, the share that came out uniform after a uniform and after an informative
group, and whether the uniform ones were all solved or all failed. With ``--curve-at M1 M2 ...`` each arm is also
evaluated at those CPU minutes on the first ``--curve-prompts`` held-out problems (their time left out of the
budget): a learning curve, since on 24 problems an arm that runs more epochs can pass its best and collapse before
the budget ends. Writes ``--output-dir``/results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
# Idle OpenMP threads sleep instead of spinning: a spinning thread bills CPU time while other jobs hold the cores,
# which would charge the arm's CPU-time budget for load it did not cause. The same for every arm.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CONFIG = ROOT / "recipes" / "configs" / "smollm2_arithmetic_cpu.yaml"
ARMS = ("trl", "mask", "skip", "budget", "signal", "both", "budget-nm", "signal-nm", "both-nm")
#: Each arm of this add-on: its settings on top of the shipped config (the plain-TRL arm builds TRL's own classes).
ARM_SETTINGS = {
    "mask": ["--zero_variance_filter", "mask"],
    "skip": ["--zero_variance_filter", "skip"],
    "budget": ["--zero_variance_filter", "mask", "--rollout_budget", "adaptive"],
    "signal": ["--zero_variance_filter", "mask", "--zero_variance_signal", "entropy"],
    "both": ["--zero_variance_filter", "mask", "--rollout_budget", "adaptive", "--zero_variance_signal", "entropy"],
}
# The same with groups judged on the correctness reward alone (numeric_match) instead of the weighted total.
ARM_SETTINGS.update({f"{arm}-nm": [*ARM_SETTINGS[arm], "--zero_variance_reward", "numeric_match"]
                     for arm in ("budget", "signal", "both")})


# -- one arm (run in its own process) -----------------------------------------------------------------------------------
class Recorder:
    """Wraps the run's reward functions: keeps every call's rewards, to count uniform groups independently of the
    trainer. ``calls[i]`` is one generation batch: the per-function reward lists (None kept)."""

    def __init__(self, funcs, weights, num_generations):
        self.funcs, self.weights, self.g = funcs, weights, num_generations
        self.calls: list[list[list]] = []
        self.prompts: list[list] = []  # per call: the prompt of each group

    def wrap(self):
        wrapped = []
        for index, func in enumerate(self.funcs):
            def recorded(*args, __func=func, __index=index, **kwargs):
                values = __func(*args, **kwargs)
                if __index == 0:
                    self.calls.append([])
                    self.prompts.append(list(kwargs.get("prompts") or [])[::self.g])
                self.calls[-1].append(list(values))
                return values
            recorded.__name__ = getattr(func, "__name__", f"reward_{index}")
            wrapped.append(recorded)
        return wrapped

    def groups(self) -> list[list[bool]]:
        """Per generation batch: one flag per group, True when the G weighted totals are all equal (all-None
        counts as uniform)."""
        out = []
        for call in self.calls:
            totals = []
            for row in zip(*call):
                present = [w * v for w, v in zip(self.weights, row) if v is not None]
                totals.append(sum(present) if present else None)
            flags = []
            for start in range(0, len(totals), self.g):
                group = [t for t in totals[start:start + self.g] if t is not None]
                flags.append(len(group) < 2 or max(group) == min(group))
            out.append(flags)
        return out


    def rollouts(self) -> list[list]:
        """Every group in generation order, for analysis offline (e.g. of other skip predictors): ``[call, prompt id,
        weighted totals of its G completions (None kept), first reward function's values]``; the prompt id is the
        first 12 hex digits of the SHA-1 of its JSON text."""
        import hashlib

        rows = []
        for index, (call, prompts) in enumerate(zip(self.calls, self.prompts)):
            totals = [sum(w * v for w, v in zip(self.weights, row) if v is not None)
                      if any(v is not None for v in row) else None for row in zip(*call)]
            for group, prompt in enumerate(prompts):
                key = hashlib.sha1(json.dumps(prompt, sort_keys=True, default=str).encode()).hexdigest()[:12]
                span = slice(group * self.g, (group + 1) * self.g)
                rows.append([index, key, totals[span], call[0][span]])
        return rows

    def transitions(self) -> dict:
        """GRESO's premise measured (arXiv 2506.02177, "temporal consistency"): for every group after a prompt's first
        rollout, whether it came out uniform, split by how the prompt's previous group came out; and of the uniform
        groups, how many the first reward function scored 1 (all solved) or 0 (all failed) on every completion.

        Returns:
            `dict`: ``after_uniform`` / ``after_informative``: [uniform now, groups]; ``uniform_solved`` /
            ``uniform_failed``: groups (after a first rollout)."""
        last: dict[str, bool] = {}
        counts = {"after_uniform": [0, 0], "after_informative": [0, 0], "uniform_solved": 0, "uniform_failed": 0}
        for call, prompts, flags in zip(self.calls, self.prompts, self.groups()):
            for index, (prompt, uniform) in enumerate(zip(prompts, flags)):
                key = json.dumps(prompt, sort_keys=True, default=str)
                if key in last:
                    bucket = counts["after_uniform" if last[key] else "after_informative"]
                    bucket[0] += uniform
                    bucket[1] += 1
                    first = call[0][index * self.g:(index + 1) * self.g]
                    if uniform and first and all(v == 1 for v in first):
                        counts["uniform_solved"] += 1
                    elif uniform and first and all(v == 0 for v in first):
                        counts["uniform_failed"] += 1
                last[key] = uniform
        return counts


def _budget_callback(cpu_seconds: float, marks: list[float] = (), evaluate=None):
    from transformers import TrainerCallback

    class Budget(TrainerCallback):
        """Stops training once this process has used ``cpu_seconds`` of CPU time since training began. At each of
        ``marks`` [CPU seconds] it records ``evaluate(model)`` with the step (the learning curve); the evaluation's own
        CPU and wall time are left out of the budget."""

        def on_train_begin(self, args, state, control, **kwargs):
            self.start, self.wall, self.curve, self.pending = time.process_time(), time.perf_counter(), [], sorted(marks)

        def on_step_end(self, args, state, control, model=None, **kwargs):
            self.used = time.process_time() - self.start
            self.wall_used = time.perf_counter() - self.wall
            while self.pending and self.used >= self.pending[0] and evaluate is not None:
                self.pending.pop(0)
                cpu, wall = time.process_time(), time.perf_counter()
                accuracy = evaluate(model)
                model.train()
                self.curve.append({"cpu_minutes": self.used / 60, "step": state.global_step, "accuracy": accuracy})
                self.start += time.process_time() - cpu
                self.wall += time.perf_counter() - wall
            if self.used >= cpu_seconds:
                control.should_training_stop = True

    return Budget()


def run_arm(arm: str, seed: int, args) -> dict:
    import torch

    from trl_grpo_ext.config.recipe_parse import parse_recipe_args
    from trl_grpo_ext.data.load import load_eval_dataset, load_prompt_dataset
    from trl_grpo_ext.evaluation.evaluate import evaluate_model
    from trl_grpo_ext.models.embedded import tiny
    from trl_grpo_ext.models.loading import lora_config, run_tokenizer
    from trl_grpo_ext.models.settings import load_dtype
    from trl_grpo_ext.rewards.spec import build_reward_funcs, with_run_defaults

    filter_args = ARM_SETTINGS.get(arm, [])
    script_args, training_args, model_args, _ = parse_recipe_args([
        "--config", str(CONFIG), "--embedded_num_prompts", str(args.train_prompts), "--seed", str(seed),
        "--output_dir", str(Path(args.output_dir) / f"{arm}-seed{seed}"), "--overwrite_output_dir", "true",
        "--total_training_steps", "100000", "--total_epochs", "1000", "--save_strategy", "no", "--final_eval", "none",
        "--prompts_per_step", str(args.prompts_per_step), "--micro_batch_size", str(args.prompts_per_step * 8),
        "--max_completion_length", str(args.max_completion_length), *filter_args,
        *(["--learning_rate", str(args.learning_rate)] if args.learning_rate else []),
    ])
    dtype = getattr(torch, args.dtype or load_dtype(model_args, training_args))  # the recipe's rule: float32 here
    train_dataset = load_prompt_dataset(script_args, seed=0)  # the same problems for every arm and seed
    eval_dataset = load_eval_dataset(script_args, 0, "test", args.eval_prompts)  # the same 200 as make demo-real
    tokenizer = run_tokenizer(model_args, script_args.chat_template)
    model_path = str(tiny.resolve_model_path(model_args.model_name_or_path))
    specs = with_run_defaults(list(training_args.resolved.rewards), training_args.max_completion_length)
    funcs, weights = build_reward_funcs(specs, on_error="raise")
    g = training_args.num_generations
    recorder = Recorder(funcs, [float(w) for w in weights], g)
    curve_set = eval_dataset.select(range(min(args.curve_prompts, len(eval_dataset))))

    def curve_accuracy(model) -> float:  # greedy, on the first --curve-prompts held-out problems
        return evaluate_model(model, tokenizer, curve_set, funcs, max_new_tokens=training_args.max_completion_length,
                              batch_size=50).accuracy

    budget = _budget_callback(args.cpu_minutes * 60, [m * 60 for m in args.curve_at if m < args.cpu_minutes],
                              curve_accuracy)

    if arm == "trl":
        from trl import GRPOConfig, GRPOTrainer

        config = GRPOConfig(
            output_dir=training_args.output_dir, per_device_train_batch_size=training_args.prompts_per_step * g,
            gradient_accumulation_steps=1, num_generations=g, max_steps=100000, learning_rate=training_args.learning_rate,
            lr_scheduler_type="constant", beta=training_args.beta, temperature=training_args.temperature,
            max_completion_length=training_args.max_completion_length, reward_weights=[float(w) for w in weights],
            use_cpu=True, bf16=False, logging_steps=1, report_to=[], save_strategy="no", seed=seed,
            gradient_checkpointing=False, model_init_kwargs={"dtype": dtype},
        )
        trainer = GRPOTrainer(model_path, reward_funcs=recorder.wrap(), args=config, train_dataset=train_dataset,
                              processing_class=tokenizer, peft_config=lora_config(model_args))
    else:
        from trl_grpo_ext import GRPOExtTrainer

        training_args.model_init_kwargs = {"dtype": dtype}
        trainer = GRPOExtTrainer(model_path, args=training_args, train_dataset=train_dataset,
                                 processing_class=tokenizer, peft_config=lora_config(model_args))
        trainer.reward_funcs = recorder.wrap()  # the guarded registry rewards, recorded (names unchanged)
    trainer.add_callback(budget)
    trainer.train()

    steps = trainer.state.global_step
    prompts_per_step = training_args.prompts_per_step
    steps_per_epoch = len(train_dataset) // prompts_per_step
    shares = _group_shares(arm, recorder, _metrics_rows(Path(training_args.output_dir)), prompts_per_step, g,
                           steps_per_epoch)
    model = trainer.accelerator.unwrap_model(trainer.model)
    eval_start = time.perf_counter()
    result = evaluate_model(model, tokenizer, eval_dataset, funcs, max_new_tokens=training_args.max_completion_length,
                            batch_size=50)
    return {
        "arm": arm, "seed": seed, "dtype": str(dtype).removeprefix("torch."), "learning_rate": training_args.learning_rate,
        "optimizer_steps": steps,
        "steps_per_epoch": steps_per_epoch,
        "epochs": steps / steps_per_epoch, **shares,
        "transitions": recorder.transitions() if arm in ("trl", "mask", "skip") else None,
        "cpu_minutes": budget.used / 60, "wall_minutes": budget.wall_used / 60,
        "informative_groups_per_cpu_minute": shares["informative_groups"] / (budget.used / 60),
        "accuracy": result.accuracy, "accuracy_ci": result.accuracy_ci, "correct": result.correct,
        "eval_minutes": (time.perf_counter() - eval_start) / 60,
        "skipped_prompt_share": _mean([row.get("zero_variance/frac_prompts_skipped")
                                       for row in _metrics_rows(Path(training_args.output_dir))]),
        "rollouts": recorder.rollouts(),
        "curve": budget.curve + [{"cpu_minutes": budget.used / 60, "step": steps, "accuracy": _first_accuracy(
            result.correct, args.curve_prompts)}] if args.curve_at else [],
    }


def _group_shares(arm: str, recorder: Recorder, rows: list[dict], prompts_per_step: int, g: int,
                  steps_per_epoch: int) -> dict:
    """The arm's uniform groups: ``completions``, ``uniform_share`` (completions in uniform groups),
    ``no_gradient_share`` (completions whose every advantage was 0) overall and ``_after_epoch_1``,
    ``informative_groups`` (groups with variance) and ``causes`` (mean share of groups per cause). The plain-TRL arm
    counts from the recorded rewards (no uniform group gets a gradient there); the add-on's arms read the trainer's
    per-step metrics (metrics.jsonl), which judge groups of unequal size (rollout_budget) by the same rule."""
    from trl_grpo_ext.zero_variance.report import CAUSE_KEYS

    if arm == "trl":
        groups = recorder.groups()
        completions = sum(len(flags) for flags in groups) * g
        uniform = [sum(flags) / len(flags) for flags in groups]
        later = uniform[steps_per_epoch:]
        return {"completions": completions, "uniform_share": sum(uniform) / len(uniform),
                "no_gradient_share": sum(uniform) / len(uniform),
                "no_gradient_share_after_epoch_1": sum(later) / len(later) if later else None,
                "informative_groups": sum(len(flags) - sum(flags) for flags in groups), "causes": None}
    steps = [row for row in rows if "zero_variance/frac_completions_no_gradient" in row]
    no_gradient = [row["zero_variance/frac_completions_no_gradient"] for row in steps]
    later = no_gradient[steps_per_epoch:]
    return {"completions": len(steps) * prompts_per_step * g,
            "uniform_share": _mean([row["zero_variance/frac_completions_uniform"] for row in steps]),
            "no_gradient_share": _mean(no_gradient), "no_gradient_share_after_epoch_1": _mean(later),
            "informative_groups": round(sum((1 - row["zero_variance/frac_uniform_before"]) * prompts_per_step
                                            for row in steps)),
            "causes": {cause: _mean([row[key] for row in steps]) for cause, key in CAUSE_KEYS.items()},
            "completions_per_prompt": [min((row.get("zero_variance/completions_per_prompt_min", g) for row in steps),
                                           default=g),
                                       max((row.get("zero_variance/completions_per_prompt_max", g) for row in steps),
                                           default=g)]}


def _first_accuracy(correct: list[int], n: int) -> float:
    """Accuracy on the first ``n`` problems of the held-out set (the curve's subset) from the final evaluation."""
    return sum(correct[:n]) / max(1, len(correct[:n]))


def _metrics_rows(output_dir: Path) -> list[dict]:
    """The rows of the run's ``metrics.jsonl`` (empty for the plain-TRL arm, which writes none)."""
    path = output_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def _mean(values: list) -> float | None:
    """Mean of the numbers in ``values`` (None when there are none)."""
    numbers = [v for v in values if isinstance(v, (int, float))]
    return sum(numbers) / len(numbers) if numbers else None


# -- the comparison -----------------------------------------------------------------------------------------------------
def _format(results: list[dict], arms: list[str]) -> str:
    from trl_grpo_ext.evaluation.stats import paired_difference_interval

    lines = []
    by = {(r["arm"], r["seed"]): r for r in results}
    seeds = sorted({r["seed"] for r in results})
    header = f"{'arm':9s} {'seed':>4s} {'steps':>5s} {'epochs':>6s} {'compl.':>6s} {'unif.':>5s} {'no-grad':>7s} " \
             f"{'ng>e1':>5s} {'inf/cpu-min':>11s} {'cpu-min':>7s} {'accuracy [95% CI]':>22s} " \
             f"{'vs trl (paired) [95% CI]':>26s} {'vs mask (paired) [95% CI]':>26s}"
    lines.append(header)
    for seed in seeds:
        for arm in arms:
            r = by.get((arm, seed))
            if r is None:
                continue
            versus = []
            for base in ("trl", "mask"):
                reference = by.get((base, seed))
                if reference is None or base == arm:
                    versus.append("")
                    continue
                diff, (low, high) = paired_difference_interval(reference["correct"], r["correct"])
                versus.append(f"{diff:+.3f} [{low:+.3f}, {high:+.3f}]")
            later = r.get("no_gradient_share_after_epoch_1")
            later = "-" if later is None else f"{later:.2f}"
            lines.append(
                f"{arm:9s} {seed:4d} {r['optimizer_steps']:5d} {r['epochs']:6.2f} {r['completions']:6d} "
                f"{r['uniform_share']:5.2f} {r['no_gradient_share']:7.2f} {later:>5s} "
                f"{r['informative_groups_per_cpu_minute']:11.2f} {r['cpu_minutes']:7.1f} "
                f"{r['accuracy']:.3f} [{r['accuracy_ci'][0]:.3f}, {r['accuracy_ci'][1]:.3f}]"
                f"{versus[0]:>27s}{versus[1]:>27s}")
    lines.append("")
    lines.append("why groups were uniform (mean share of a step's groups: wrong / right / cut / tied), completions per "
                 "prompt (fewest-most)")
    for r in results:
        if r.get("causes"):
            c = r["causes"]
            lines.append(f"{r['arm']:9s} {r['seed']:4d}  {c['wrong']:.2f} / {c['right']:.2f} / {c['cut']:.2f} / "
                         f"{c['tied']:.2f}   {r['completions_per_prompt'][0]}-{r['completions_per_prompt'][1]}")
    if any(r.get("curve") for r in results):
        lines.append("")
        lines.append("learning curve: held-out greedy accuracy on the first --curve-prompts problems at CPU minutes "
                     "(step)")
        for r in results:
            points = [f"{p['cpu_minutes']:.1f} ({p['step']}): {p['accuracy']:.3f}"
                      for p in r.get("curve") or []]
            lines.append(f"{r['arm']:9s} {r['seed']:4d}  " + "   ".join(points))
    lines.append("")
    lines.append("GRESO's premise: a revisited prompt's group uniform, after a uniform / after an informative group; "
                 "the uniform revisits all solved / all failed")
    for seed in seeds:
        for arm in arms:
            t = (by.get((arm, seed)) or {}).get("transitions")
            if t:
                (uu, un), (iu, inn) = t["after_uniform"], t["after_informative"]
                lines.append(f"{arm:9s} {seed:4d}  after uniform {uu}/{un} = {uu / max(un, 1):.2f}   after informative "
                             f"{iu}/{inn} = {iu / max(inn, 1):.2f}   solved {t['uniform_solved']}, failed "
                             f"{t['uniform_failed']}")
    lines.append("")
    for arm in arms:
        runs = [by[(arm, s)] for s in seeds if (arm, s) in by]
        trl = [by[("trl", s)] for s in seeds if ("trl", s) in by and (arm, s) in by]
        if not runs:
            continue
        rate = sum(r["informative_groups_per_cpu_minute"] for r in runs) / len(runs)
        text = f"{arm:9s} mean over {len(runs)} seed(s): accuracy {sum(r['accuracy'] for r in runs) / len(runs):.3f}, " \
               f"informative groups per CPU minute {rate:.2f}"
        if arm != "trl" and trl:
            trl_rate = sum(r["informative_groups_per_cpu_minute"] for r in trl) / len(trl)
            text += f" ({rate / trl_rate:.2f}x trl's)" if trl_rate else " (trl's: 0)"
        lines.append(text)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
    parser.add_argument("--cpu-minutes", type=float, default=12.0, help="training budget per arm [CPU minutes]")
    parser.add_argument("--train-prompts", type=int, default=24, help="training problems (several epochs fit)")
    parser.add_argument("--eval-prompts", type=int, default=200, help="held-out problems")
    parser.add_argument("--prompts-per-step", type=int, default=3, help="prompts per optimizer step (G is 8)")
    parser.add_argument("--max-completion-length", type=int, default=48, help="new tokens per completion")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"),
                        help="the base's dtype in every arm (default: the shipped config's)")
    parser.add_argument("--curve-at", type=float, nargs="*", default=[], metavar="CPU_MINUTES",
                        help="also evaluate each arm at these CPU minutes of training (a learning curve; the "
                             "evaluations' time is left out of the budget), e.g. --curve-at 3 6 9")
    parser.add_argument("--curve-prompts", type=int, default=100, help="held-out problems of each curve point")
    parser.add_argument("--learning-rate", type=float, help="every arm's (constant) learning rate (default: the "
                        "config's 4e-4, which the config decays to 0 over its 40 steps and the arms here do not)")
    parser.add_argument("--output-dir", default="outputs/bench-vs-trl")
    parser.add_argument("--combine", action="store_true", help="print the table of the arms already in --output-dir "
                        "(each arm's <arm>-seed<seed>.json) without running any")
    parser.add_argument("--rerun", action="store_true", help="run arms whose result file exists again (default: an "
                        "arm already run is read back, so arms can run at different times on the same commit)")
    parser.add_argument("--arm", choices=ARMS, help=argparse.SUPPRESS)  # internal: run one arm in this process
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    out = Path(args.output_dir)
    if args.arm:
        result = run_arm(args.arm, args.seed, args)
        (out / f"{args.arm}-seed{args.seed}.json").write_text(json.dumps(result))
        return 0

    out.mkdir(parents=True, exist_ok=True)
    results = []
    if args.combine:
        for seed in args.seeds:
            for arm in args.arms:
                if (out / f"{arm}-seed{seed}.json").exists():
                    results.append(json.loads((out / f"{arm}-seed{seed}.json").read_text()))
        print(_format(results, args.arms))
        return 0
    for seed in args.seeds:
        order = args.arms if seed % 2 == 0 else list(reversed(args.arms))
        for arm in order:
            if (out / f"{arm}-seed{seed}.json").exists() and not args.rerun:
                results.append(json.loads((out / f"{arm}-seed{seed}.json").read_text()))
                continue
            command = [sys.executable, __file__, "--arm", arm, "--seed", str(seed), "--cpu-minutes",
                       str(args.cpu_minutes), "--train-prompts", str(args.train_prompts), "--eval-prompts",
                       str(args.eval_prompts), "--prompts-per-step", str(args.prompts_per_step),
                       "--max-completion-length", str(args.max_completion_length), "--output-dir", str(out),
                       *(["--dtype", args.dtype] if args.dtype else []),
                       *(["--curve-at", *map(str, args.curve_at)] if args.curve_at else []),
                       "--curve-prompts", str(args.curve_prompts),
                       *(["--learning-rate", str(args.learning_rate)] if args.learning_rate else [])]
            start = time.perf_counter()
            done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
            (out / f"{arm}-seed{seed}.log").write_text(done.stdout + done.stderr)
            if done.returncode != 0:
                sys.stderr.write(done.stderr[-3000:])
                raise SystemExit(f"arm {arm} seed {seed} failed ({done.returncode}); log in {out}")
            results.append(json.loads((out / f"{arm}-seed{seed}.json").read_text()))
            r = results[-1]
            print(f"{arm} seed {seed}: {r['optimizer_steps']} steps, accuracy {r['accuracy']:.3f}, "
                  f"no gradient {r['no_gradient_share']:.2f}, {(time.perf_counter() - start) / 60:.1f} min", flush=True)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    print(_format(results, args.arms))
    return 0


if __name__ == "__main__":
    sys.exit(main())
