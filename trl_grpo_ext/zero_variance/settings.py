"""The zero-variance filter's settings (`ZeroVarianceSettings`), what the config refuses, and the judged reward
column (pure: no torch; docs/zero_variance.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from ..config.checks import RunArgumentError


@dataclass(frozen=True)
class ZeroVarianceSettings:
    """The filter's settings as the run uses them (``resolved.zero_variance``; the card's rows): the :data:`FIELDS`
    (the config's fields of the same names hold their defaults and docs)."""

    zero_variance_filter: str
    zero_variance_tolerance: float
    zero_variance_reward: str | None
    max_resample_rounds: int
    skip_exploration_probability: float
    skip_history_file: str | None
    zero_variance_signal: str = "off"
    zero_variance_signal_coef: float = 0.1
    rollout_budget: str = "uniform"

    @classmethod
    def from_values(cls, values: Mapping[str, Any] | Any, **overrides: Any) -> ZeroVarianceSettings:
        """The settings of a mapping or object holding the :data:`FIELDS` (a missing one at its default), then
        ``overrides``."""
        get = values.get if isinstance(values, Mapping) else lambda name, default: getattr(values, name, default)
        return cls(**{**{f.name: get(f.name, f.default) for f in fields(cls)}, **overrides})


#: The config fields of the filter, in the order the card and the plan show them.
FIELDS = tuple(f.name for f in fields(ZeroVarianceSettings))


#: ``zero_variance_signal`` values: off, or entropy (RL-ZVP-style token advantages for all-right / all-wrong groups).
ZERO_VARIANCE_SIGNALS = ("off", "entropy")
#: ``rollout_budget`` values: uniform (G completions per prompt, TRL's) or adaptive (split by estimated pass rate).
ROLLOUT_BUDGETS = ("uniform", "adaptive")


def check_zero_variance_settings(v) -> str | None:
    """Refuse what the filter, ``zero_variance_signal`` and ``rollout_budget: adaptive`` cannot honour
    (docs/zero_variance.md); warn (``v.warn``) of a filter or signal without effect beside ``normalize_then_sum``.
    ``v``: a `validation.rules.RunView`: ``v.get(name)`` a config field's value (None: its default), ``v.batch`` TRL's
    batch fields as resolved [completions, micro-batches], ``v.world_size``, ``v.reward_names`` the run's registry
    rewards (None: unknown).

    Returns:
        ``zero_variance_reward`` as TRL logs it (the canonical registry name).

    Raises:
        RunArgumentError: naming the field, its value and the fix."""
    get, batch, world_size = v.get, v.batch, v.world_size
    mode, signal = get("zero_variance_filter") or "off", get("zero_variance_signal") or "off"
    budget, aggregation = get("rollout_budget") or "uniform", get("multi_objective_aggregation") or "sum_then_normalize"
    g, summed = batch["num_generations"], aggregation == "sum_then_normalize"
    canonical = _canonical_reward_name(get("zero_variance_reward"), v.reward_names)
    if signal != "off" and mode == "resample":
        raise RunArgumentError(f"zero_variance_signal={signal!r} learns from all-right and all-wrong groups, but "
                               "zero_variance_filter='resample' replaces them first. Fix: use zero_variance_filter: "
                               "mask (or off) with zero_variance_signal, or zero_variance_signal: off.")
    for applies, why, fix in (  # (why, fix): the first that applies
            (not summed, f"multi_objective_aggregation={aggregation!r} takes TRL's per-reward advantages over its "
             "rounds' partial groups", "multi_objective_aggregation: sum_then_normalize"),
            (mode in ("resample", "skip"), f"zero_variance_filter={mode!r} chooses which prompts are rolled out",
             "zero_variance_filter: mask (or off)"),
            (get("use_vllm"), "use_vllm generates G completions per prompt itself", "use_vllm: false"),
            (g < 4, f"its first round gives every prompt G / 2 = {g // 2} completions, fewer than 2",
             "num_generations: 4 or more")):
        if budget == "adaptive" and applies:
            raise RunArgumentError(f"rollout_budget='adaptive' splits each step's completions unevenly across its "
                                   f"prompts, but {why}. Fix: {fix}, or rollout_budget: uniform.")
    gbs, mb = batch.get("generation_batch_size"), batch["per_device_train_batch_size"]
    spg = batch.get("steps_per_generation") or batch["gradient_accumulation_steps"]
    local = gbs // world_size if gbs else mb * spg  # the completions of a generation batch one process holds
    if local % g and (budget == "adaptive" or (mode == "resample" and summed)):
        what, other = (("rollout_budget='adaptive'", "rollout_budget: uniform") if budget == "adaptive" else
                       ("zero_variance_filter='resample'", "zero_variance_filter: mask (which works on the gathered "
                        "batch)"))
        held, fix = ((f"generation_batch_size ({gbs}) / {world_size} processes", f"generation_batch_size a multiple "
                      f"of {world_size * g}") if gbs else (f"micro_batch_size ({mb}) × steps_per_generation ({spg})",
                                                           f"micro_batch_size × steps_per_generation a multiple of {g}"))
        raise RunArgumentError(f"{what} needs whole groups of num_generations ({g}) on every process, but each "
                               f"process holds {held} = {local} completions of a generation batch. Fix: make {fix}, or "
                               f"use {other}.")
    idle = [f"{name}={value!r}" for name, value in (("zero_variance_filter", mode), ("zero_variance_signal", signal))
            if value != "off"]
    if idle and not summed:
        v.warn(f"{' and '.join(idle)} {'has' if len(idle) == 1 else 'have'} no effect with multi_objective_aggregation="
               f"{aggregation!r} (TRL's advantages are used as they are). Fix: remove it, or use sum_then_normalize.")
    return canonical


def _canonical_reward_name(name: str | None, reward_names: list[str] | None) -> str | None:
    if name is None or not reward_names:
        return name
    from ..rewards.registry import UnknownRewardError, check_reward_name

    selected = [check_reward_name(reward) for reward in reward_names]
    try:
        canonical = name if name in selected else check_reward_name(name)
    except UnknownRewardError:
        canonical = name
    judged_reward_index(canonical if canonical in selected else name, selected)  # raises: not one of them
    return canonical


def judged_reward_index(name: str | None, reward_func_names: list[str]) -> int | None:
    """Column of ``name`` (``zero_variance_reward``) among TRL's ``reward_func_names``; None judges the total.

    Raises:
        RunArgumentError (a ValueError): ``name`` is not one of them."""
    if name is None:
        return None
    if name not in reward_func_names:
        raise RunArgumentError(
            f"zero_variance_reward={name!r} is not one of this run's rewards ({', '.join(reward_func_names)}). Fix: "
            "name one of them (as logged in rewards/<name>/mean), or remove zero_variance_reward to judge the total.")
    return reward_func_names.index(name)


def check_skip_plan(plan, seeded: bool = False) -> None:
    """Refuse ``zero_variance_filter: skip`` where it skips nothing: a dataset without a length, one whose every
    prompt is in every generation batch (no other prompt can take a skipped one's slot), or a `RunPlan` covering at
    most one epoch (skip predicts from earlier epochs) unless ``seeded`` (a ``skip_history_file``).

    Raises:
        ValueError: naming the fix."""
    if plan.dataset_size is None:
        raise ValueError(
            "zero_variance_filter='skip' replaces prompts of a dataset with a length, but this dataset has none (an "
            "IterableDataset). Fix: use a map-style dataset, or zero_variance_filter: mask.")
    n, per_batch, epochs = plan.dataset_size, plan.prompts_per_generation, plan.epochs_covered
    for applies, why, fix in (
            (n <= per_batch, f"the dataset's {n} prompts all fit in one generation batch of {per_batch} prompts, so no "
             "other prompt can take a skipped one's slot", "use more training prompts than prompts_per_step"),
            (epochs <= 1 and not seeded, f"this run covers {epochs:.3g} epoch(s) of {n} prompts, and skip predicts a "
             "prompt from its rollouts in earlier epochs", "train for more than one epoch, seed the history "
             "(skip_history_file: an eval of the training split)")):
        if applies:
            raise ValueError(f"zero_variance_filter='skip' would act as mask: {why}. Fix: {fix}, or use "
                             "zero_variance_filter: mask.")
