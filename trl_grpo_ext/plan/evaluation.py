"""The evaluation quantities of a run, resolved and checked before any model loads. Pure Python, no torch.

TRL's eval loop (``eval_strategy`` / ``eval_steps``) generates ``num_generations_eval`` completions for each held-out
prompt and scores them with the training rewards, logging ``eval_reward`` and ``eval_rewards/<name>/mean``. Like the
training batch, ``per_device_eval_batch_size`` counts **completions**, and a batch must hold whole prompt groups.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from ..config.checks import Range, check_choice
from ..plan import QuantityError

#: Values of the recipe's ``final_eval`` setting.
FINAL_EVAL_CHOICES = ("none", "adapter", "compare_base")

_EVAL_PROMPTS = Range(low=1, integer=True, fix="leave eval_num_prompts unset for the whole split, or use e.g. 64.")
_EVAL_STEPS = Range(low=0, low_open=True, fix="use e.g. 50 (or a fraction of the run < 1) with eval_strategy: steps.")


@dataclass(frozen=True)
class EvalPlan:
    """Every derived evaluation quantity of one run.

    Attributes:
        eval_prompts (`int`): held-out prompts per evaluation [prompts].
        num_generations_eval (`int`): completions per held-out prompt in TRL's eval loop.
        completions_per_eval (`int`): ``eval_prompts × num_generations_eval`` [completions].
        per_device_eval_batch_size (`int`): completions per eval forward pass on one process.
        eval_batches (`int`): ``completions_per_eval / (per_device_eval_batch_size × world_size)``.
        eval_strategy (`str`): ``"no"``, ``"steps"`` or ``"epoch"``.
        eval_every_steps (`int | None`): optimizer steps between evaluations (``eval_strategy: steps``).
        evaluations (`int`): evaluations during the run (TRL's eval loop): every ``eval_every_steps`` steps, plus one
            at the last step when the run does not end on a multiple of it.
        final_eval (`str`): the recipe's greedy evaluation after training (:data:`FINAL_EVAL_CHOICES`).
    """

    eval_prompts: int
    num_generations_eval: int
    completions_per_eval: int
    per_device_eval_batch_size: int
    eval_batches: int
    eval_strategy: str
    eval_every_steps: int | None
    evaluations: int
    final_eval: str

    def to_dict(self) -> dict:
        """Plain dict (for ``run_plan.json``)."""
        return asdict(self)

    def format_lines(self) -> list[str]:
        """Rows for the printed plan, with units and arithmetic."""
        lines = [f"eval prompts              {self.eval_prompts} prompts (held-out split)"]
        if self.eval_strategy != "no":
            lines += [
                f"eval completions          {self.completions_per_eval} completions = {self.eval_prompts} × "
                f"{self.num_generations_eval} (num_generations_eval)",
                f"eval batches              {self.eval_batches} = {self.completions_per_eval} / "
                f"({self.per_device_eval_batch_size} per device × processes)",
                f"evaluations during run    {self.evaluations}"
                + (f" (every {self.eval_every_steps} steps)" if self.eval_every_steps else " (every epoch)"),
            ]
        if self.final_eval != "none":
            lines.append(f"final evaluation          greedy, {self.eval_prompts} prompts, {self.final_eval}")
        return lines


def resolve_eval_plan(
    *, eval_prompts: int | None, eval_strategy: str, eval_steps: float | None, logging_steps: float,
    num_generations: int, num_generations_eval: int | None, per_device_eval_batch_size: int, world_size: int,
    total_steps: int, steps_per_epoch: int, final_eval: str = "none", split_rows: bool = False,
) -> EvalPlan | None:
    """Resolve and check the evaluation quantities; ``None`` when the run evaluates nothing.

    Args:
        eval_prompts (`int`, *optional*): prompts of the held-out split used per evaluation (``None``: unknown
            before the split is loaded; checks that need it are skipped).
        eval_strategy (`str`): TrainingArguments' ``eval_strategy`` (``"no"``, ``"steps"``, ``"epoch"``).
        eval_steps (`float`, *optional*): steps between evaluations; a float below 1 is a fraction of
            ``total_steps`` (transformers' rule); ``None`` falls back to ``logging_steps``.
        logging_steps (`float`): as transformers reads it.
        num_generations (`int`), num_generations_eval (`int`, *optional*): G for training / evaluation.
        per_device_eval_batch_size (`int`): completions per eval batch on one process.
        world_size (`int`): processes.
        total_steps (`int`), steps_per_epoch (`int`): from the training plan [optimizer steps].
        final_eval (`str`, defaults to ``"none"``): one of :data:`FINAL_EVAL_CHOICES`.
        split_rows (`bool`, defaults to `False`): ``eval_prompts`` is the number of rows of the test split read
            (``eval_num_prompts`` unset), which the messages then name instead of ``eval_num_prompts``.

    Raises:
        QuantityError: an eval batch that cannot hold whole prompt groups, an eval split too small for one batch,
            non-positive ``eval_steps`` or an unknown ``final_eval`` — each message names the field and a fix.
    """
    strategy = str(getattr(eval_strategy, "value", eval_strategy))
    check_choice("final_eval", final_eval, FINAL_EVAL_CHOICES, error=QuantityError)
    if strategy == "no" and final_eval == "none":
        return None
    g_eval = num_generations_eval or num_generations
    _EVAL_PROMPTS.check("eval_num_prompts", eval_prompts, error=QuantityError)
    every = None
    evaluations = 0
    batches = 0
    completions = (eval_prompts or 0) * g_eval
    if strategy != "no":
        global_batch = per_device_eval_batch_size * world_size
        if global_batch % g_eval:
            divisors = [d for d in range(1, 4 * g_eval + 1) if (d * world_size) % g_eval == 0][:4]
            raise QuantityError(
                f"per_device_eval_batch_size={per_device_eval_batch_size} × {world_size} process(es) must be a "
                f"multiple of num_generations_eval={g_eval} (an eval batch holds whole prompt groups). Fix: set "
                f"per_device_eval_batch_size: {max([d for d in divisors if d <= per_device_eval_batch_size] or divisors[:1])} "
                f"(valid: {', '.join(map(str, divisors))}, ...)."
            )
        if eval_prompts is not None and completions % global_batch:
            step = global_batch // math.gcd(global_batch, g_eval)
            if split_rows:
                subject = (f"the test split has {eval_prompts} row{'' if eval_prompts == 1 else 's'} (all evaluated: "
                           f"eval_num_prompts is unset), and {eval_prompts}")
                sizes = [d for d in range(1, completions + 1)
                         if (d * world_size) % g_eval == 0 and completions % (d * world_size) == 0]
                fixes = [f"set eval_num_prompts to a multiple of {step} (at most {eval_prompts})"] \
                    if step <= eval_prompts else []
                fixes.append(f"give the test split a multiple of {step} rows")
                if sizes:
                    size = max([d for d in sizes if d <= per_device_eval_batch_size] or sizes[:1])
                    fixes.append(f"set per_device_eval_batch_size: {size}")
                fix = ", ".join(fixes[:-1]) + f", or {fixes[-1]}"
            else:
                subject, fix = f"eval_num_prompts={eval_prompts}", f"set eval_num_prompts to a multiple of {step}"
            raise QuantityError(
                f"{subject} × num_generations_eval={g_eval} = {completions} completions is not a multiple of the "
                f"eval batch ({per_device_eval_batch_size} × {world_size} process(es)). Fix: {fix}."
            )
        batches = completions // global_batch if eval_prompts is not None else 0
        if strategy == "steps":
            raw = logging_steps if eval_steps is None else eval_steps
            _EVAL_STEPS.check("eval_steps" if eval_steps is not None else "logging_steps", raw, error=QuantityError)
            if raw is None:  # Range accepts None ("unset"); here it leaves no interval
                raise QuantityError("eval_steps=None with logging_steps=None: set eval_steps, e.g. 50.")
            every = max(1, math.ceil(raw * total_steps)) if raw < 1 else int(raw)
            # every `every` steps, and once more at the last step (transformers evaluates when training stops)
            evaluations = total_steps // every + (1 if total_steps % every else 0)
        elif strategy == "epoch":
            evaluations = max(1, total_steps // max(1, steps_per_epoch))
        else:
            check_choice("eval_strategy", strategy, ("no", "steps", "epoch"), error=QuantityError)  # raises
    return EvalPlan(
        eval_prompts=eval_prompts or 0, num_generations_eval=g_eval, completions_per_eval=completions,
        per_device_eval_batch_size=per_device_eval_batch_size, eval_batches=batches, eval_strategy=strategy,
        eval_every_steps=every, evaluations=evaluations, final_eval=final_eval,
    )


def zero_variance_forecast_warning(eval_results: dict, num_generations: int) -> str | None:
    """A warning when an evaluation's forecast expects more than half of the groups to carry no signal.

    Args:
        eval_results (`dict`): an ``eval --json`` object (or ``eval_results.json``): reads
            ``uniform_group_forecast_weighted`` (judged on the run's weighted reward, as ``frac_reward_zero_std`` is)
            when it holds the run's G, else ``uniform_group_forecast`` (the correctness reward as pass/fail), of the
            object itself or of its ``base`` object.
        num_generations (`int`): the run's G.

    Returns:
        The warning text, or ``None`` when the forecast is at most 0.5 or absent for this G. A G beyond the table is
        forecast from the pass rates as pass/fail only when the reward is (its weighted and pass/fail forecasts
        agree); for a graded reward that would count every group uniform, so ``None`` (`plan` then suggests
        ``eval --k`` with K >= G).
    """
    source = eval_results.get("base", eval_results) if isinstance(eval_results, dict) else {}
    if not isinstance(source, dict):
        raise TypeError(f"'base' is a {type(source).__name__}, not an evaluation object")
    weighted = {int(k): float(v) for k, v in (source.get("uniform_group_forecast_weighted") or {}).items()}
    binary = {int(k): float(v) for k, v in (source.get("uniform_group_forecast") or {}).items()}
    if num_generations in weighted:  # judged on the run's weighted reward, as frac_reward_zero_std is
        share, judged = weighted[num_generations], "the run's weighted reward"
    elif any(abs(weighted[g] - binary[g]) > 1e-9 for g in weighted if g in binary):
        return None  # a graded reward (its forecasts differ from pass/fail): not judged as pass/fail at this G
    elif num_generations in binary:
        share, judged = binary[num_generations], f"{source.get('correctness_reward', 'the correctness reward')} as pass/fail"
    elif source.get("pass_rates"):  # a G the table does not list: the pass/fail formula from the pass rates
        from ..evaluation.stats import zero_variance_group_fraction

        share = zero_variance_group_fraction([float(q) for q in source["pass_rates"]], num_generations)
        judged = f"{source.get('correctness_reward', 'the correctness reward')} as pass/fail"
    else:
        return None
    if share <= 0.5:
        return None
    rates = source.get("pass_rates") or []
    mean_q = sum(rates) / len(rates) if rates else float("nan")
    return (
        f"the evaluation forecasts {share:.0%} of groups with σ = 0 at G={num_generations}, judged on {judged} (mean "
        f"pass rate {mean_q:.3f}): most steps would carry no learning signal. Raise num_generations, the temperature "
        "or the partial-credit rewards, pick easier prompts, or set zero_variance_filter: resample."
    )
