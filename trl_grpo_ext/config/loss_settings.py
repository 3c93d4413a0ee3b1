"""Settings of TRL's policy loss that take effect only under others: the clip (acts only off-policy, trl#3757) and
``bnpo``'s per-micro-batch normaliser (trl#3021); docs/quantifiers.md. Pure Python, restating TRL 1.16's trainer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["CLIP_DEFAULTS", "CLIPPED_LOSSES", "bnpo_accumulation_warning", "clip_takes_effect", "ignored_clipping"]

#: TRL's clip fields and their defaults.
CLIP_DEFAULTS: dict[str, Any] = {"epsilon": 0.2, "epsilon_high": None, "delta": None}
#: Loss types whose policy term clips the ratio with ``epsilon`` / ``epsilon_high`` / ``delta``.
CLIPPED_LOSSES = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo")


def clip_takes_effect(gradient_accumulation_steps: int, steps_per_generation: int, num_iterations: int) -> bool:
    """Whether some update of the run is off-policy, so that the clip can act."""
    return gradient_accumulation_steps % (steps_per_generation * num_iterations) != 0


def ignored_clipping(settings: Mapping[str, Any], *, loss_type: str, gradient_accumulation_steps: int,
                     steps_per_generation: int, num_iterations: int) -> str | None:
    """The warning that the clip fields the user set (``settings``, numbers in range: a rule runs after the range
    checks; a default counts as unset) would change nothing, or None when they take effect; the other arguments are
    TRL's fields as resolved."""
    given = {name: value for name, value in settings.items()
             if name in CLIP_DEFAULTS and value is not None and value != CLIP_DEFAULTS[name]}
    if not given or loss_type not in CLIPPED_LOSSES:
        return None
    if clip_takes_effect(gradient_accumulation_steps, steps_per_generation, num_iterations):
        return None
    names = " and ".join(given)
    listed = ", ".join(f"{name}={value!r}" for name, value in given.items())
    return (f"{listed} only take{'s' if len(given) == 1 else ''} effect when an update is off-policy, but with "
            f"num_iterations={num_iterations}, steps_per_generation={steps_per_generation} and "
            f"gradient_accumulation_steps={gradient_accumulation_steps} every update is on-policy: π/π_old is exactly "
            "1 and the clip never acts (trl#3757). Fix: set num_iterations: 2 (or more) to reuse each generation "
            f"batch for several updates, or remove {names}.")


def bnpo_accumulation_warning(loss_type: str, gradient_accumulation_steps: int, micro_batch_size: int,
                              completions_per_step: int, world_size: int = 1) -> str | None:
    """The warning that ``loss_type: bnpo`` changes with ``micro_batch_size``; None for another loss type or one
    micro-batch per step."""
    if loss_type != "bnpo" or gradient_accumulation_steps <= 1:
        return None
    per_process = completions_per_step // max(1, world_size)
    return (f"loss_type='bnpo' divides each micro-batch's token loss by that micro-batch's own token count and "
            f"averages the {gradient_accumulation_steps} micro-batches of a step (micro_batch_size={micro_batch_size} "
            f"of {per_process} completions per process), so the loss and its gradient change with micro_batch_size "
            "(trl#3021). Fix: use loss_type: dapo (normalised over the whole step), or micro_batch_size: "
            f"{per_process} (one micro-batch per step)")
