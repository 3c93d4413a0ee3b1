"""The resolved values of a run's config (``GRPOExtConfig.resolved``), built by `resolve_config` for `GRPOExtConfig`
and `plan` alike (pure: no torch; idempotent)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from ..plan.resolve import _INPUT_FIELDS, resolve_trl_fields
from ..rewards.spec import RewardSpec, parse_reward_specs
from ..zero_variance.settings import ZeroVarianceSettings
from .advantage_settings import FIELDS as ADVANTAGE_FIELDS
from .advantage_settings import AdvantageSettings, resolve_advantage_settings
from .checks import Range

__all__ = ["ResolvedConfig", "resolve_config", "USER_FIELDS", "QUANTITY_FIELDS"]

#: What `plan.resolve_plan` takes (`ResolvedConfig.quantity_fields`).
QUANTITY_FIELDS = ("prompts_per_step", "micro_batch_size", "total_training_steps", "total_epochs",
                   "per_device_train_batch_size", "gradient_accumulation_steps", "steps_per_generation",
                   "generation_batch_size", "max_steps", "num_train_epochs", "num_generations", "num_iterations",
                   "stop_semantics")

#: The fields `resolve_config` reads: the quantities (ours and TRL's raw batch/stop fields), the advantage fields
#: (ours and TRL's ``scale_rewards``/``loss_type``) and the rewards (ours and TRL's ``reward_weights``).
USER_FIELDS = (*_INPUT_FIELDS, *ADVANTAGE_FIELDS, "loss_type", "rewards", "reward_weights")


@dataclass(frozen=True)
class ResolvedConfig:
    """What a config's fields resolve to (also ``run_config.json``'s ``"resolved"``): the ``world_size`` resolved for;
    our batch and stop fields (None when TRL's give them) and TRL's as written (`plan.resolve_trl_fields`); the
    `AdvantageSettings` with TRL's ``scale_rewards`` / ``loss_type``; the registry ``rewards`` and TRL's
    ``reward_weights`` (None with ``reward_funcs=``); the judged ``zero_variance_reward`` and `ZeroVarianceSettings`."""

    world_size: int
    prompts_per_step: int | None
    micro_batch_size: int | None
    total_training_steps: int | None
    total_epochs: float | None
    per_device_train_batch_size: int
    gradient_accumulation_steps: int
    steps_per_generation: int | None
    generation_batch_size: int | None
    max_steps: int
    num_train_epochs: float
    num_generations: int
    num_iterations: int
    stop_semantics: str
    advantages: AdvantageSettings
    scale_rewards: str
    loss_type: str
    rewards: tuple[RewardSpec, ...] | None
    reward_weights: tuple[float, ...] | None
    zero_variance_reward: str | None = None
    zero_variance: ZeroVarianceSettings | None = None

    def quantity_fields(self) -> dict[str, Any]:
        """The quantity fields, as `plan.resolve_plan` takes them."""
        return {name: getattr(self, name) for name in QUANTITY_FIELDS}

    def trl_fields(self) -> dict[str, Any]:
        """TRL's own fields to write into the config (with `rewards`, ``reward_weights`` too)."""
        names = ("per_device_train_batch_size", "gradient_accumulation_steps", "steps_per_generation",
                 "generation_batch_size", "max_steps", "num_train_epochs", "num_generations", "num_iterations",
                 "scale_rewards", "loss_type")
        values = {name: getattr(self, name) for name in names}
        if self.rewards is not None:
            values["reward_weights"] = list(self.reward_weights)
        return values

    def to_dict(self) -> dict[str, Any]:
        values = asdict(self)
        if self.rewards is not None:
            values["rewards"] = [spec.to_dict() for spec in self.rewards]
            values["reward_weights"] = list(self.reward_weights)
        return values


_WEIGHT = Range(fix="give each reward function a number, e.g. `reward_weights: [1.0, 0.5]`.")


def resolve_config(values: Mapping[str, Any], world_size: int, trl_defaults: Mapping[str, Any]) -> ResolvedConfig:
    """Resolve the :data:`USER_FIELDS` of ``values`` (a missing quantity field takes TRL's default) for
    ``world_size`` processes; ``trl_defaults``: the defaults of ``scale_rewards`` and ``loss_type``.

    Raises:
        QuantityError, AdvantageConfigError, ValueError (rewards): invalid or conflicting values."""
    quantities = resolve_trl_fields({k: values[k] for k in _INPUT_FIELDS if k in values}, world_size)
    advantages, advantage_trl_fields = resolve_advantage_settings(
        preset=values["advantage_preset"], **{name: values[name] for name in (*ADVANTAGE_FIELDS[1:], "loss_type")},
        defaults=trl_defaults)
    rewards = reward_weights = None
    if values["rewards"] is not None:
        specs = parse_reward_specs(values["rewards"], values["reward_weights"])
        rewards, reward_weights = tuple(specs), tuple(spec.weight for spec in specs)
    elif values["reward_weights"] is not None:
        # weights for reward functions passed to the trainer (`reward_funcs=`): numbers, not booleans
        reward_weights = tuple(_WEIGHT.check(f"reward_weights[{i}]", weight, error=ValueError, typed=True)
                               for i, weight in enumerate(values["reward_weights"]))
    return ResolvedConfig(world_size=world_size, **quantities, advantages=advantages, **advantage_trl_fields,
                          rewards=rewards, reward_weights=reward_weights)
