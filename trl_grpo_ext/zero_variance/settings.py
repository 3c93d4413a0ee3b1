"""The zero-variance filter's settings (`ZeroVarianceSettings`), what the config refuses, and the judged reward
column (pure: no torch; docs/zero_variance.md)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any


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
        """The settings of a mapping or object holding the :data:`FIELDS`, then ``overrides``."""
        values = values if isinstance(values, Mapping) else vars(values)
        defaults = {f.name: f.default for f in fields(cls)}
        return cls(**{**{name: values[name] if name in values or name not in defaults else defaults[name]
                         for name in FIELDS}, **overrides})


#: The config fields of the filter, in the order the card and the plan show them.
FIELDS = tuple(f.name for f in fields(ZeroVarianceSettings))


#: ``zero_variance_signal`` values: off, or entropy (RL-ZVP-style token advantages for all-right / all-wrong groups).
ZERO_VARIANCE_SIGNALS = ("off", "entropy")
#: ``rollout_budget`` values: uniform (G completions per prompt, TRL's) or adaptive (split by estimated pass rate).
ROLLOUT_BUDGETS = ("uniform", "adaptive")


def check_hard_prompt_settings(*, mode: str, signal: str, rollout_budget: str, use_vllm: bool, world_size: int,
                               batch: Mapping[str, Any], multi_objective_aggregation: str) -> str | None:
    """Refuse what ``zero_variance_signal`` and ``rollout_budget: adaptive`` cannot honour (docs/zero_variance.md);
    ``batch``: TRL's resolved batch fields. Returns the warning for the signal beside ``normalize_then_sum`` (TRL's
    advantages are used as they are), else None.

    Raises:
        ValueError: naming the field, its value and the fix."""
    g, summed = batch["num_generations"], multi_objective_aggregation == "sum_then_normalize"
    if signal != "off" and mode == "resample":
        raise ValueError(f"zero_variance_signal={signal!r} learns from all-right and all-wrong groups, but "
                         "zero_variance_filter='resample' replaces them first. Fix: use zero_variance_filter: mask (or "
                         "off) with zero_variance_signal, or zero_variance_signal: off.")
    if rollout_budget != "adaptive":
        return None if signal == "off" or summed else (
            f"zero_variance_signal={signal!r} has no effect with multi_objective_aggregation="
            f"{multi_objective_aggregation!r} (TRL's advantages are used as they are). Fix: remove it, or use "
            "sum_then_normalize.")
    local = _local_completions(world_size, batch.get("generation_batch_size"), batch.get("steps_per_generation"),
                               batch["gradient_accumulation_steps"], batch["per_device_train_batch_size"])
    for applies, why, fix in (  # (why, fix): the first that applies
            (not summed, f"multi_objective_aggregation={multi_objective_aggregation!r} takes TRL's per-reward "
             "advantages over its rounds' partial groups", "multi_objective_aggregation: sum_then_normalize"),
            (mode == "resample", "zero_variance_filter='resample' replaces uniform groups with other prompts'",
             "zero_variance_filter: mask (or off)"),
            (mode == "skip", "zero_variance_filter='skip' chooses which prompts are rolled out",
             "zero_variance_filter: mask"),
            (use_vllm, "use_vllm generates G completions per prompt itself", "use_vllm: false"),
            (g < 4, f"its first round gives every prompt G / 2 = {g // 2} completions, fewer than 2",
             "num_generations: 4 or more"),
            (local % g != 0, f"each process holds {local} completions of a generation batch, not whole groups of "
             f"num_generations={g}", f"micro_batch_size × steps_per_generation a multiple of {g}")):
        if applies:
            raise ValueError(f"rollout_budget='adaptive' splits each step's completions unevenly across its prompts, "
                             f"but {why}. Fix: {fix}, or rollout_budget: uniform.")
    return None


def _local_completions(world_size: int, generation_batch_size: int | None, steps_per_generation: int | None,
                       gradient_accumulation_steps: int, per_device_train_batch_size: int) -> int:
    """The completions of one generation batch each process holds."""
    if generation_batch_size:
        return generation_batch_size // world_size
    return per_device_train_batch_size * (steps_per_generation or gradient_accumulation_steps)


#: Loss types normalised by rows (masking rows needs the rescale rows / kept rows, `groups.masked_loss_scale`) or by
#: kept tokens (dapo, cispo, vespo: `num_items_in_batch`; bnpo: the micro-batch's own).
ROW_NORMALISED_LOSSES = frozenset({"grpo", "sapo", "dr_grpo", "luspo"})
TOKEN_NORMALISED_LOSSES = frozenset({"dapo", "bnpo", "cispo", "vespo"})


def check_zero_variance_settings(*, mode: str, zero_variance_reward: str | None, reward_names: list[str] | None,
                                 multi_objective_aggregation: str, num_generations: int, world_size: int,
                                 generation_batch_size: int | None, steps_per_generation: int | None,
                                 gradient_accumulation_steps: int, per_device_train_batch_size: int,
                                 loss_type: str = "dapo", entropy_coef: float = 0.0,
                                 use_adaptive_entropy: bool = False, skip_history_file: str | None = None) -> str | None:
    """Refuse what the filter cannot honour (docs/zero_variance.md); batch arguments are TRL's fields [completions,
    micro-batches].

    Returns:
        `str | None`: ``zero_variance_reward`` as TRL logs it (the canonical registry name).

    Raises:
        ValueError: naming the field, its value and the fix."""
    if mode == "off":  # the reward the logged uniform share and its causes judge; the advantages are TRL's
        return _canonical_reward_name(zero_variance_reward, reward_names)
    if (entropy_coef or use_adaptive_entropy) and loss_type in ROW_NORMALISED_LOSSES:
        raise ValueError(
            f"zero_variance_filter={mode!r} with loss_type={loss_type!r} rescales the whole loss by rows / kept rows, "
            f"which would also rescale the entropy bonus (entropy_coef={entropy_coef}"
            f"{', use_adaptive_entropy=True' if use_adaptive_entropy else ''}). Fix: use a token-normalised loss_type "
            "(dapo, bnpo, cispo, vespo), or set entropy_coef: 0, or zero_variance_filter: off.")
    zero_variance_reward = _canonical_reward_name(zero_variance_reward, reward_names)
    if multi_objective_aggregation != "sum_then_normalize":
        raise ValueError(
            f"zero_variance_filter={mode!r} judges groups on the weighted total reward and "
            f"needs multi_objective_aggregation='sum_then_normalize', got {multi_objective_aggregation!r}. "
            "Fix: use multi_objective_aggregation: sum_then_normalize, or zero_variance_filter: off.")
    if mode == "skip" and skip_history_file is not None and zero_variance_reward is not None:
        raise ValueError(
            f"skip_history_file={skip_history_file!r} holds each prompt's sampled weighted total rewards, but "
            f"zero_variance_reward={zero_variance_reward!r} judges groups on one reward. Fix: remove one of them.")
    if mode != "resample":
        return zero_variance_reward
    local = _local_completions(world_size, generation_batch_size, steps_per_generation, gradient_accumulation_steps,
                               per_device_train_batch_size)
    if local % num_generations:
        steps_per_generation = steps_per_generation or gradient_accumulation_steps
        held, fix = ((f"generation_batch_size ({generation_batch_size}) / {world_size} processes = {local}",
                      f"make generation_batch_size a multiple of {world_size * num_generations}")
                     if generation_batch_size else
                     (f"micro_batch_size ({per_device_train_batch_size}) × steps_per_generation "
                      f"({steps_per_generation}) = {local}", "make micro_batch_size (per_device_train_batch_size) a "
                      f"multiple of {num_generations // math.gcd(steps_per_generation, num_generations)}"))
        raise ValueError(
            f"zero_variance_filter='resample' needs whole groups on every process, but each of the {world_size} "
            f"processes holds {held} completions of a generation batch, which is not divisible by "
            f"num_generations ({num_generations}). Fix: {fix}, or use zero_variance_filter: mask (which "
            "works on the gathered batch).")
    return zero_variance_reward


def _canonical_reward_name(name: str | None, reward_names: list[str] | None) -> str | None:
    if name is None or not reward_names:
        return name
    from ..rewards.registry import UnknownRewardError, check_reward_name

    selected = [check_reward_name(reward) for reward in reward_names]
    if name in selected:
        return name
    try:
        canonical = check_reward_name(name)
    except UnknownRewardError:
        canonical = None
    if canonical not in selected:
        raise ValueError(
            f"zero_variance_reward={name!r} is not one of this run's rewards ({', '.join(selected)}). Fix: "
            "name one of them, or remove zero_variance_reward to judge the weighted total.")
    return canonical


def judged_reward_index(name: str | None, reward_func_names: list[str]) -> int | None:
    """Column of ``name`` (``zero_variance_reward``) among TRL's ``reward_func_names``; None judges the total.

    Raises:
        ValueError: ``name`` is not one of them."""
    if name is None:
        return None
    if name not in reward_func_names:
        raise ValueError(
            f"zero_variance_reward={name!r} is not one of this run's reward functions ({', '.join(reward_func_names)}). "
            "Fix: name one of them (as logged in rewards/<name>/mean), or remove zero_variance_reward to judge the "
            "weighted total.")
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
    if plan.dataset_size <= plan.prompts_per_generation:
        raise ValueError(
            f"zero_variance_filter='skip' gives a skipped prompt's slot to another prompt, but the dataset's "
            f"{plan.dataset_size} prompts all fit in one generation batch of {plan.prompts_per_generation} prompts: every "
            "prompt is rolled out every time, so it would act as mask. Fix: use more training prompts than "
            "prompts_per_step, or zero_variance_filter: mask.")
    if plan.epochs_covered <= 1 and not seeded:
        raise ValueError(
            f"zero_variance_filter='skip' predicts a prompt from its rollouts in earlier epochs, so it skips nothing "
            f"in the first epoch, and this run covers {plan.epochs_covered:.3g} epoch(s) of {plan.dataset_size} "
            "prompts: it would act as mask. Fix: train for more than one epoch (raise total_epochs and "
            "total_training_steps, or use fewer prompts), or seed the history from an evaluation of the training "
            "split (skip_history_file), or use zero_variance_filter: mask.")
