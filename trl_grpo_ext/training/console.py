"""What a training run shows on the console: a progress bar sized by the plan, and one short line per logging step.

transformers prints every log as a Python dict (28 keys for a GRPO step); that belongs in the trackers and in a file,
not on the screen. `StepLineCallback` replaces transformers' `ProgressCallback` / `PrinterCallback`: it keeps the
bar (``state.max_steps``, which `GRPOExtTrainer.set_initial_training_values` sets to the plan's total) and writes,
per log,

    step 12/120  reward 0.452 ± 0.131  zero-std 0.25  kl 0.0012  lr 2.0e-03  0.42 s/step

(mean reward, its standard deviation, the share of the generated groups whose rewards all tie —
`zero_variance.report.uniform_share`, the filter's own count when it is on — the KL to the reference — shown only
when TRL logs it, i.e. ``beta`` ≠ 0 — the learning rate and seconds per optimizer step since the previous log, evaluation and checkpoint time left out). A
step that made no optimizer update says so: ``no update: 3 of 3 groups uniform``.
`MetricsFileCallback` appends every full log to ``output_dir/metrics.jsonl`` (one JSON object per line, with
``step``), for any run, tracker or not. `ZeroLossNoteCallback` explains once why a logged loss of 0 is expected
(``beta`` 0, one policy update per generation batch).
"""

from __future__ import annotations

import json
import math
import os
import time

from transformers.trainer_callback import ProgressCallback, TrainerCallback

from ..config.loss_settings import CLIPPED_LOSSES, clip_takes_effect
from ..zero_variance.report import (
    BUDGET_KEYS,
    CAUSE_KEYS,
    NO_UPDATE_KEY,
    PROMPTS_DRAWN_KEY,
    no_update_steps,
    steps_per_generation,
    summary_line,
    uniform_share,
)

METRICS_FILE = "metrics.jsonl"
_SUMMARY_KEYS = ("train_runtime", "train_loss")


def _number(value, spec: str) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return format(value, spec)
    return "-"


def step_line(logs: dict, step: int, max_steps: int, seconds_per_step: float | None,
              groups_per_step: int | None = None, steps_in_interval: int = 1) -> str:
    """The one-line summary of a training log (see the module docstring).

    Args:
        logs (`dict`): one training log. step (`int`), max_steps (`int`): optimizer steps done, planned.
        seconds_per_step (`float`, *optional*): since the previous log (evaluations and saves left out).
        groups_per_step (`int`, *optional*): prompts per step (named in a no-update notice).
        steps_in_interval (`int`, defaults to `1`): optimizer steps this log covers (``logging_steps``).

    >>> step_line({"reward": 0.5, "reward_std": 0.25, "frac_reward_zero_std": 0.0, "learning_rate": 1e-3}, 3, 10, 0.5)
    'step 3/10  reward 0.500 ± 0.250  zero-std 0.00  lr 1.0e-03  0.50 s/step'
    >>> step_line({"reward": 0.2, "reward_std": 0.0, "frac_reward_zero_std": 1.0,
    ...            "zero_variance/frac_uniform_before": 1.0, "zero_variance/no_update": 1.0}, 9, 24, None, 3)
    'step 9/24  reward 0.200 ± 0.000  zero-std 1.00  lr -  no update: 3 of 3 groups uniform'
    >>> step_line({"reward": 0.9, "reward_std": 0.1, "zero_variance/frac_uniform_before": 0.5,
    ...            "zero_variance/prompts_drawn": 2.0, "zero_variance/frac_uniform_after": 0.0}, 5, 9, None)
    'step 5/9  reward 0.900 ± 0.100  zero-std 0.50 (0.00 after resampling)  lr -'
    >>> step_line({"reward": 0.1, "reward_std": 0.2, "zero_variance/frac_uniform_before": 0.75,
    ...            "zero_variance/frac_uniform_wrong": 0.5, "zero_variance/frac_uniform_right": 0.25,
    ...            "zero_variance/frac_uniform_cut": 0.0, "zero_variance/frac_uniform_tied": 0.0}, 4, 9, None, 4)
    'step 4/9  reward 0.100 ± 0.200  zero-std 0.75 (2 wrong, 1 right, 0 cut)  lr -'
    >>> step_line({"reward": 0.0, "reward_std": 0.0, "frac_reward_zero_std": 1.0}, 2, 3, None)
    'step 2/3  reward 0.000 ± 0.000  zero-std 1.00  lr -  all groups uniform: zero advantages (zero_variance_filter off: the optimizer still steps)'
    """
    parts = [f"step {step}/{max_steps}",
             f"reward {_number(logs.get('reward'), '.3f')} ± {_number(logs.get('reward_std'), '.3f')}",
             f"zero-std {_number(uniform_share(logs), '.2f')}"]
    if causes := cause_counts(logs, groups_per_step if steps_in_interval == 1 else None):
        parts[-1] += f" ({causes})"
    if _number(logs.get(BUDGET_KEYS[0]), ".0f") != "-":  # rollout_budget: adaptive; a log of several steps holds means
        low, high = logs[BUDGET_KEYS[0]], _number(logs.get(BUDGET_KEYS[1]), ".0f" if steps_in_interval == 1 else ".1f")
        parts.append(f"completions/prompt {low:.0f}-{high}" if steps_in_interval == 1 else
                     f"completions/prompt {low:.1f}-{high} (means of {steps_in_interval} steps' fewest-most)")
    if (logs.get(PROMPTS_DRAWN_KEY) or 0) > 0:  # resample drew prompts: the trained batch's share too
        parts[-1] += f" ({_number(logs.get('zero_variance/frac_uniform_after'), '.2f')} after resampling)"
    if "kl" in logs:
        parts.append(f"kl {_number(logs['kl'], '.4f')}")
    parts.append(f"lr {_number(logs.get('learning_rate'), '.1e')}")
    if seconds_per_step is not None:
        parts.append(f"{seconds_per_step:.2f} s/step")
    skipped = no_update_steps(logs, steps_in_interval)
    if skipped and steps_in_interval == 1:
        groups = f"{groups_per_step} of {groups_per_step}" if groups_per_step else "all"
        parts.append(f"no update: {groups} groups uniform")
    elif skipped:
        parts.append(f"no update on {skipped} of {steps_in_interval} steps (all groups uniform)")
    elif uniform_share(logs) == 1.0 and NO_UPDATE_KEY not in logs and \
            logs.get("zero_variance/frac_completions_no_gradient", 1.0) == 1.0:  # filter off, no signal: zero advantages
        parts.append("all groups uniform: zero advantages (zero_variance_filter off: the optimizer still steps)")
    return "  ".join(parts)


def cause_counts(logs: dict, groups: int | None) -> str:
    """Why the step's uniform groups were uniform (`zero_variance.causes`): counts of ``groups`` per generation batch
    (shares when unknown, or when the log averages several steps); ``""`` when none was uniform or not logged.

    >>> cause_counts({"zero_variance/frac_uniform_wrong": 0.25, "zero_variance/frac_uniform_right": 0.0,
    ...               "zero_variance/frac_uniform_cut": 0.125, "zero_variance/frac_uniform_tied": 0.125}, None)
    'wrong 0.25, right 0.00, cut 0.12, tied 0.12'
    """
    shares = {cause: logs.get(key) for cause, key in CAUSE_KEYS.items()}
    if any(not isinstance(v, (int, float)) or not math.isfinite(v) for v in shares.values()) or not any(shares.values()):
        return ""
    shown = {cause: share for cause, share in shares.items() if cause != "tied" or share}
    if groups:
        return ", ".join(f"{round(share * groups)} {cause}" for cause, share in shown.items())
    return ", ".join(f"{cause} {share:.2f}" for cause, share in shown.items())


def other_line(logs: dict, step: int) -> str:
    """A log that is not a training step: an evaluation in the step line's terms (``eval_reward`` ± its std, the
    fraction of zero-std groups, seconds taken), anything else as its numbers with 4 significant digits.

    >>> other_line({"eval_reward": 0.5, "eval_reward_std": 0.1, "eval_frac_reward_zero_std": 0.25,
    ...             "eval_runtime": 3.2, "eval_loss": 0.01}, 40)
    'eval at step 40  reward 0.500 ± 0.100  zero-std 0.25  3.2 s'
    """
    if "eval_reward" in logs:
        return (f"eval at step {step}  reward {_number(logs.get('eval_reward'), '.3f')} ± "
                f"{_number(logs.get('eval_reward_std'), '.3f')}  zero-std "
                f"{_number(logs.get('eval_frac_reward_zero_std'), '.2f')}  {_number(logs.get('eval_runtime'), '.1f')} s")
    shown = "  ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                      for k, v in logs.items() if isinstance(v, (int, float)) and not k.endswith("_flos"))
    return f"step {step}  {shown}"


class StepLineCallback(ProgressCallback):
    """transformers' progress bar (``bar=True``) or none, with one line per log instead of the dict.

    Args:
        bar (`bool`, defaults to `True`): show the bar (``False`` when ``disable_tqdm`` is set: lines only).
        groups_per_step (`int`, *optional*): the plan's prompts per step, named in a no-update notice.
        plan (`RunPlan`, *optional*): when given, the end of training prints the run's uniform groups and their
            causes (`closing_line`); None leaves that line to the caller (`defer_closing_line`).
    """

    def __init__(self, bar: bool = True, groups_per_step: int | None = None, plan=None):
        super().__init__()
        self.bar, self.groups_per_step, self.plan = bar, groups_per_step, plan
        self._clock = None  # (time, step) the seconds per step count from: the last training log, save or evaluation
        self._logged = 0  # the step of the previous training log: the interval a no-update notice covers

    def on_train_begin(self, args, state, control, **kwargs):
        self._clock, self._logged = (time.perf_counter(), state.global_step), state.global_step
        if self.bar:
            super().on_train_begin(args, state, control, **kwargs)
        else:
            self.current_step = state.global_step

    def on_step_end(self, args, state, control, **kwargs):
        if self.bar:
            super().on_step_end(args, state, control, **kwargs)

    def on_train_end(self, args, state, control, **kwargs):
        if self.bar and self.training_bar is not None:
            super().on_train_end(args, state, control, **kwargs)
        line = closing_line(state.log_history, self.plan) if state.is_world_process_zero else None
        if line:
            print(line, flush=True)

    def on_save(self, args, state, control, **kwargs):
        self._restart_clock(state)  # a checkpoint's time is not the next step's

    def _restart_clock(self, state) -> None:
        if self._clock is not None:
            self._clock = (time.perf_counter(), state.global_step)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        if any(k in logs for k in _SUMMARY_KEYS) and "reward" not in logs:
            return  # the recipe prints the run's summary itself; TRL folds a last, partial interval's metrics into it
        if "reward" in logs or "learning_rate" in logs:
            now, interval = time.perf_counter(), max(state.global_step - self._logged, 1)
            seconds = None
            if self._clock is not None and state.global_step > self._clock[1]:
                seconds = (now - self._clock[0]) / (state.global_step - self._clock[1])
            self._clock, self._logged = (now, state.global_step), state.global_step
            line = step_line(logs, state.global_step, state.max_steps, seconds, self.groups_per_step, interval)
        else:
            line = other_line(logs, state.global_step)
            self._restart_clock(state)  # an evaluation's time is not the next step's
        if self.bar and self.training_bar is not None:
            self.training_bar.write(line)
        else:
            print(line, flush=True)


class ZeroLossNoteCallback(TrainerCallback):
    """Explains, once per run, a logged training loss of 0 when the settings make 0 the expected value (``beta`` 0,
    every update on-policy: :func:`zero_loss_note`), the most asked GRPO question (trl#2703, trl#3452)."""

    def __init__(self):
        self.shown = False

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.shown or not state.is_world_process_zero or not logs or "loss" not in logs:
            return
        if uniform_share(logs) == 1.0:  # every group uniform: the gradient is 0 too, so "training still works" is false
            return
        entropy = getattr(args, "entropy_coef", 0.0) or float(bool(getattr(args, "use_adaptive_entropy", False)))
        note = zero_loss_note(logs["loss"], beta=args.beta, loss_type=args.loss_type,
                              gradient_accumulation_steps=args.gradient_accumulation_steps,
                              steps_per_generation=args.steps_per_generation or args.gradient_accumulation_steps,
                              num_iterations=args.num_iterations, entropy_coef=entropy)
        if note:
            from tqdm.auto import tqdm

            self.shown = True
            tqdm.write(note)  # above the progress bar, like the step lines


class MetricsFileCallback(TrainerCallback):
    """Appends every log (all metrics) to ``output_dir/metrics.jsonl`` on the main process. At the start of training
    the file keeps only the rows of steps up to the one training starts from: none for a new (or overwritten) run,
    those up to the checkpoint's step for a resumed one (so it holds each step once, as trainer_state.json does)."""

    def on_train_begin(self, args, state, control, **kwargs):
        path = os.path.join(args.output_dir, METRICS_FILE)
        if not state.is_world_process_zero or not os.path.exists(path):
            return
        kept = []
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    row = json.loads(line)
                except ValueError:  # a line cut short by a killed run
                    continue
                if isinstance(row, dict) and isinstance(row.get("step"), int) and row["step"] <= state.global_step \
                        and not any(key in row for key in _SUMMARY_KEYS):
                    kept.append(line if line.endswith("\n") else line + "\n")
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(kept)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and logs:
            os.makedirs(args.output_dir, exist_ok=True)
            with open(os.path.join(args.output_dir, METRICS_FILE), "a", encoding="utf-8") as f:
                f.write(json.dumps({"step": state.global_step, **logs}, default=str) + "\n")


def closing_line(log_history: list[dict], plan) -> str | None:
    """The run's closing line: its uniform groups, their causes and the fix (`summary_line`); None without a plan
    or a logged share."""
    if plan is None:
        return None
    return summary_line(log_history, plan.prompts_per_generation, steps_per_generation(plan), plan.max_completion_length)


def defer_closing_line(trainer) -> None:
    """Leave the closing line to the caller (`closing_line`): the recipe prints it after its evaluation and files."""
    for callback in trainer.callback_handler.callbacks:
        if isinstance(callback, StepLineCallback):
            callback.plan = None


def install(trainer) -> None:
    """Replace ``trainer``'s log printer (bar or dicts) by `StepLineCallback`; add `ZeroLossNoteCallback` and
    `MetricsFileCallback`."""
    from transformers.trainer_callback import PrinterCallback

    trainer.pop_callback(ProgressCallback)
    trainer.pop_callback(PrinterCallback)
    plan = getattr(trainer, "plan", None)
    groups = plan.prompts_per_step if plan is not None and isinstance(plan.prompts_per_step, int) else None
    trainer.add_callback(StepLineCallback(bar=not trainer.args.disable_tqdm, groups_per_step=groups, plan=plan))
    trainer.add_callback(ZeroLossNoteCallback())
    trainer.add_callback(MetricsFileCallback())


#: Loss types whose policy term is ``−clip(ratio) × advantage``: on-policy (ratio 1) their value is a weighted sum
#: of the advantages. (``sapo``'s gate weighs positive and negative advantages differently; ``cispo`` and ``vespo``
#: multiply by log π: their loss is not 0.)
ADVANTAGE_WEIGHTED_LOSSES = CLIPPED_LOSSES
#: A logged loss at most this far from 0 counts as "a loss of 0" for :func:`zero_loss_note`.
ZERO_LOSS_ATOL = 1e-3


def zero_loss_note(loss: float, *, beta: float, loss_type: str, gradient_accumulation_steps: int,
                   steps_per_generation: int, num_iterations: int, entropy_coef: float = 0.0) -> str | None:
    """The console's one-time explanation of a logged loss of 0 when the settings give 0 (beta 0, no entropy bonus,
    every update on-policy, an advantage-weighted loss: docs/quantifiers.md, "Why is my loss 0?"); else None."""
    if not isinstance(loss, (int, float)) or abs(loss) > ZERO_LOSS_ATOL or beta != 0 or entropy_coef != 0:
        return None
    if loss_type not in ADVANTAGE_WEIGHTED_LOSSES:
        return None
    if clip_takes_effect(gradient_accumulation_steps, steps_per_generation, num_iterations):
        return None
    return (
        f"note: a loss of {loss:.4g} is expected here, and training still works. With beta=0 (no KL term) and one "
        f"policy update per generation batch (num_iterations={num_iterations}), π/π_old = 1 and the {loss_type} loss "
        "is minus a weighted mean of the advantages, which sum to 0 in each group: its value is "
        f"{'exactly 0' if loss_type == 'grpo' else '0 when the completions of a group are equally long, else small'}"
        ", while its gradient, the advantage-weighted mean of ∇log π, is not. Watch the reward, not the loss "
        "(docs/quantifiers.md, \"Why is my loss 0?\"). Shown once."
    )
