"""The zero-variance filter's settings (one frozen `ZeroVarianceSettings`), what the config refuses, and which
reward column the filter judges. Pure functions over plain values (no config, no trainer, no torch)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: The config fields of the filter, in the order the card and the plan show them.
FIELDS = ("zero_variance_filter", "zero_variance_tolerance", "zero_variance_reward", "max_resample_rounds",
          "skip_exploration_probability")


@dataclass(frozen=True)
class ZeroVarianceSettings:
    """The filter's settings as the run uses them (``GRPOExtConfig.resolved.zero_variance``; ``run_config.json``'s
    ``resolved.zero_variance``; the card's rows).

    Attributes:
        zero_variance_filter (`str`): ``"off"``, ``"mask"``, ``"resample"`` or ``"skip"``.
        zero_variance_tolerance (`float`): largest sample std of a uniform group [reward units].
        zero_variance_reward (`str` or `None`): the judged reward by the name TRL logs (None: the weighted total).
        max_resample_rounds (`int`): extra generation rounds per step (resample).
        skip_exploration_probability (`float`): p of skip mode.
    """

    zero_variance_filter: str = "off"
    zero_variance_tolerance: float = 0.0
    zero_variance_reward: str | None = None
    max_resample_rounds: int = 3
    skip_exploration_probability: float = 0.25

    @classmethod
    def from_values(cls, values: Mapping[str, Any] | Any, **overrides: Any) -> ZeroVarianceSettings:
        """The settings of a run's fields (a mapping or an object with the :data:`FIELDS`), then ``overrides``."""
        get = values.get if isinstance(values, Mapping) else lambda name: getattr(values, name)
        return cls(**{**{name: get(name) for name in FIELDS}, **overrides})

#: Loss types whose normaliser counts rows (sequences) or a constant per row, so masking rows needs a rescale by
#: rows / kept rows to exclude them from the normaliser (see `groups.masked_loss_scale`). The token-count normalisers of
#: dapo / cispo / vespo use `num_items_in_batch`, recomputed from kept tokens; bnpo divides by the micro-batch's own
#: kept tokens.
ROW_NORMALISED_LOSSES = frozenset({"grpo", "sapo", "dr_grpo", "luspo"})
TOKEN_NORMALISED_LOSSES = frozenset({"dapo", "bnpo", "cispo", "vespo"})


def check_zero_variance_settings(
    *,
    mode: str,
    zero_variance_reward: str | None,
    reward_names: list[str] | None,
    multi_objective_aggregation: str,
    num_generations: int,
    world_size: int,
    generation_batch_size: int | None,
    steps_per_generation: int | None,
    gradient_accumulation_steps: int,
    per_device_train_batch_size: int,
    loss_type: str = "dapo",
    entropy_coef: float = 0.0,
    use_adaptive_entropy: bool = False,
) -> str | None:
    """Settings the zero-variance filter cannot honour, refused instead of silently ignored (docs/zero_variance.md):
    ``zero_variance_reward`` with the filter off or naming no selected reward; an entropy bonus with a row-normalised
    ``loss_type`` (the rescale would scale it too); ``normalize_then_sum``; resample without whole groups on every
    process.

    Args:
        mode (`str`): ``zero_variance_filter``. zero_variance_reward (`str`, *optional*): the judged reward.
        reward_names (`list[str]`, *optional*): the run's registry rewards (None: passed to the trainer).
        multi_objective_aggregation (`str`), loss_type (`str`, defaults to `"dapo"`, a preset's included),
        entropy_coef (`float`), use_adaptive_entropy (`bool`): TRL's fields.
        num_generations (`int`): G. world_size (`int`): processes. generation_batch_size, steps_per_generation
            (`int`, *optional*), gradient_accumulation_steps, per_device_train_batch_size (`int`): TRL's batch fields
            [completions, micro-batches].

    Returns:
        `str | None`: ``zero_variance_reward`` as TRL will log it (the canonical registry name), or None.

    Raises:
        ValueError: naming the field, its value and the fix.
    """
    if mode == "off":
        if zero_variance_reward is not None:
            raise ValueError(
                f"zero_variance_reward={zero_variance_reward!r} only takes effect with the zero-variance "
                "filter on. Fix: set zero_variance_filter: mask (or resample), or remove zero_variance_reward."
            )
        return None
    if (entropy_coef or use_adaptive_entropy) and loss_type in ROW_NORMALISED_LOSSES:
        raise ValueError(
            f"zero_variance_filter={mode!r} with loss_type={loss_type!r} rescales the whole loss by rows / kept rows, "
            f"which would also rescale the entropy bonus (entropy_coef={entropy_coef}"
            f"{', use_adaptive_entropy=True' if use_adaptive_entropy else ''}). Fix: use a token-normalised loss_type "
            "(dapo, bnpo, cispo, vespo), or set entropy_coef: 0, or zero_variance_filter: off."
        )
    zero_variance_reward = _canonical_reward_name(zero_variance_reward, reward_names)
    if multi_objective_aggregation != "sum_then_normalize":
        raise ValueError(
            f"zero_variance_filter={mode!r} judges groups on the weighted total reward and "
            f"needs multi_objective_aggregation='sum_then_normalize', got {multi_objective_aggregation!r}. "
            "Fix: use multi_objective_aggregation: sum_then_normalize, or zero_variance_filter: off."
        )
    if mode != "resample":
        return zero_variance_reward
    if generation_batch_size is not None:
        local = generation_batch_size // world_size
        held = f"generation_batch_size ({generation_batch_size}) / {world_size} processes = {local}"
        fix = f"make generation_batch_size a multiple of {world_size * num_generations}"
    else:
        steps_per_generation = steps_per_generation or gradient_accumulation_steps
        local = per_device_train_batch_size * steps_per_generation
        held = (
            f"micro_batch_size ({per_device_train_batch_size}) × steps_per_generation "
            f"({steps_per_generation}) = {local}"
        )
        multiple = num_generations // math.gcd(steps_per_generation, num_generations)
        fix = f"make micro_batch_size (per_device_train_batch_size) a multiple of {multiple}"
    if local % num_generations:
        raise ValueError(
            f"zero_variance_filter='resample' needs whole groups on every process, but each of the {world_size} "
            f"processes holds {held} completions of a generation batch, which is not divisible by "
            f"num_generations ({num_generations}). Fix: {fix}, or use zero_variance_filter: mask (which "
            "works on the gathered batch)."
        )
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
            "name one of them, or remove zero_variance_reward to judge the weighted total."
        )
    return canonical


def judged_reward_index(name: str | None, reward_func_names: list[str]) -> int | None:
    """Column of ``name`` among TRL's reward function names (None: judge the weighted total).

    Args:
        name (`str`, *optional*): ``zero_variance_reward``.
        reward_func_names (`list[str]`): the names TRL gives the run's reward functions (``reward_func_names``).

    Returns:
        `int | None`: the column of the (N, F) reward tensor, or None.

    Raises:
        ValueError: ``name`` is not one of ``reward_func_names``.
    """
    if name is None:
        return None
    if name not in reward_func_names:
        raise ValueError(
            f"zero_variance_reward={name!r} is not one of this run's reward functions ({', '.join(reward_func_names)}). "
            "Fix: name one of them (as logged in rewards/<name>/mean), or remove zero_variance_reward to judge the "
            "weighted total."
        )
    return reward_func_names.index(name)


def resample_note(plan, max_resample_rounds: int) -> str:
    """How ``zero_variance_filter: resample`` counts in this plan (printed under the plan table).

    Extra prompts drawn to replace zero-variance groups come from a separate, seeded order of the training prompts
    and do not advance the main sampler: the epochs and total steps above stay exact; the extra generation is at most
    ``max_resample_rounds`` × prompts_per_step prompts (× G completions) per optimizer step.

    Args:
        plan (`RunPlan`): reads ``total_steps``, ``epochs_covered``, ``prompts_per_step`` and ``num_generations``.
        max_resample_rounds (`int`): the config's field [rounds per optimizer step].

    Returns:
        `str`: one paragraph.
    """
    extra_prompts = max_resample_rounds * plan.prompts_per_step
    epochs = plan.epochs_covered
    epochs_text = str(int(epochs)) if isinstance(epochs, float) and epochs.is_integer() else str(epochs)
    return (
        "zero_variance_filter=resample: prompts drawn to replace uniform groups do not advance the epoch count "
        f"(the {plan.total_steps} steps and {epochs_text} epochs above stay exact); each step "
        f"generates for at most {extra_prompts} extra prompts ({max_resample_rounds} rounds × "
        f"{plan.prompts_per_step}), i.e. up to {extra_prompts * plan.num_generations} extra completions, logged as "
        "zero_variance/prompts_drawn."
    )


def check_skip_plan(plan) -> None:
    """Refuse ``zero_variance_filter: skip`` where it could skip nothing.

    Skip predicts a prompt from its own earlier rollouts, which it has only from its second epoch on; and its sampler
    replaces rows of a known dataset. Checked on the plan, before any model loads (the recipe, the trainer, ``plan``).

    Args:
        plan (`RunPlan`): reads ``dataset_size`` [prompts] and ``epochs_covered``.

    Raises:
        ValueError: no dataset length (an iterable dataset), or at most one epoch covered; naming the fix.
    """
    if plan.dataset_size is None:
        raise ValueError(
            "zero_variance_filter='skip' replaces prompts of a dataset with a length, but this dataset has none (an "
            "IterableDataset). Fix: use a map-style dataset, or zero_variance_filter: mask."
        )
    if plan.epochs_covered <= 1:
        raise ValueError(
            f"zero_variance_filter='skip' predicts a prompt from its rollouts in earlier epochs, so it skips nothing "
            f"in the first epoch, and this run covers {plan.epochs_covered:.3g} epoch(s) of {plan.dataset_size} "
            "prompts: it would act as mask. Fix: train for more than one epoch (raise total_epochs and "
            "total_training_steps, or use fewer prompts), or use zero_variance_filter: mask."
        )


def skip_note(plan, exploration_probability: float) -> str:
    """How ``zero_variance_filter: skip`` counts in this plan (printed under the plan table).

    Args:
        plan (`RunPlan`): reads ``steps_per_epoch``, ``prompts_per_step``, ``total_steps``, ``epochs_covered``.
        exploration_probability (`float`): ``skip_exploration_probability`` p.

    Returns:
        `str`: one paragraph.
    """
    slots = plan.steps_per_epoch * plan.prompts_per_step
    return (
        f"zero_variance_filter=skip: an epoch is still {plan.steps_per_epoch} steps × {plan.prompts_per_step} prompt "
        f"slots ({slots}); from the second epoch on, a prompt uniform at its last k rollouts keeps its slot with "
        f"probability {exploration_probability:g}^k, and a skipped prompt's slot goes to another prompt of the epoch "
        f"(some prompts train twice in an epoch). The {plan.total_steps} steps, {plan.epochs_covered:.3g} epochs and "
        "stop reason above stay exact; skipped slots are logged as zero_variance/frac_prompts_skipped."
    )
