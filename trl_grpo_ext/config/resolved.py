"""The resolved values of a run's config, in one frozen `ResolvedConfig` (``GRPOExtConfig.resolved``), built by
`resolve_config` for `GRPOExtConfig` and `trl-grpo-ext plan` alike (pure Python: no torch, no TRL). Resolving is
idempotent, so a `dataclasses.replace` of a config resolves to the same values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ..plan.resolve import _INPUT_FIELDS, resolve_trl_fields
from ..rewards.spec import RewardSpec, parse_reward_specs
from ..zero_variance.settings import ZeroVarianceSettings
from .advantage_settings import AdvantageSettings, resolve_advantage_settings
from .checks import Range

__all__ = ["ResolvedConfig", "resolve_config", "resolve_reward_specs", "USER_FIELDS"]

#: The fields `resolve_config` reads: the quantities (ours and TRL's raw batch/stop fields), the advantage fields
#: (ours and TRL's ``scale_rewards``/``loss_type``) and the rewards (ours and TRL's ``reward_weights``).
USER_FIELDS = (
    *_INPUT_FIELDS,
    "advantage_preset", "advantage_baseline", "advantage_std_scaling", "advantage_epsilon", "advantage_std_kind",
    "scale_rewards", "loss_type",
    "rewards", "reward_weights",
)


@dataclass(frozen=True)
class ResolvedConfig:
    """What a config's fields resolve to (``GRPOExtConfig.resolved``; ``run_config.json``'s ``"resolved"``).

    Attributes:
        world_size (`int`): processes the quantities were resolved for.
        prompts_per_step, micro_batch_size (`int` or `None`): our batch fields [prompts, completions], defaults filled
            in; None when the batch is given in TRL's fields.
        total_training_steps (`int` or `None`), total_epochs (`float` or `None`): our stop limits [steps, passes].
        per_device_train_batch_size, gradient_accumulation_steps, steps_per_generation, generation_batch_size,
            max_steps, num_train_epochs, num_generations, num_iterations: TRL's fields as written
            (`plan.resolve_trl_fields`).
        stop_semantics (`str`): ``"first_reached"`` (our stop fields) or ``"trl"`` (``max_steps > 0`` wins).
        advantages (`AdvantageSettings`). scale_rewards, loss_type (`str`): TRL's fields as written.
        rewards (`tuple[RewardSpec, ...]` or `None`), reward_weights (`tuple[float, ...]` or `None`): the registry
            rewards and TRL's weights as written; None when the rewards are passed as ``reward_funcs=``.
        zero_variance_reward (`str` or `None`): the judged reward by the name TRL logs.
        zero_variance (`ZeroVarianceSettings` or `None`): the filter's settings as the run uses them.
    """

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
        """The resolved quantity fields, as `trl_grpo_ext.plan.resolve_plan` takes them."""
        names = ("prompts_per_step", "micro_batch_size", "total_training_steps", "total_epochs",
                 "per_device_train_batch_size", "gradient_accumulation_steps", "steps_per_generation",
                 "generation_batch_size", "max_steps", "num_train_epochs", "num_generations", "num_iterations",
                 "stop_semantics")
        return {name: getattr(self, name) for name in names}

    def trl_fields(self) -> dict[str, Any]:
        """TRL's own fields to write into the config (TRL and transformers read them): the batch shape, the stop,
        the group size, ``scale_rewards``, ``loss_type`` and, with `rewards`, ``reward_weights``."""
        names = ("per_device_train_batch_size", "gradient_accumulation_steps", "steps_per_generation",
                 "generation_batch_size", "max_steps", "num_train_epochs", "num_generations", "num_iterations",
                 "scale_rewards", "loss_type")
        values = {name: getattr(self, name) for name in names}
        if self.rewards is not None:
            values["reward_weights"] = WrittenRewardWeights(self.reward_weights)
        return values

    def to_dict(self) -> dict[str, Any]:
        """Every attribute as JSON-serialisable values (the advantage settings and reward specs as dicts)."""
        values = asdict(self)
        if self.rewards is not None:
            values["rewards"] = [spec.to_dict() for spec in self.rewards]
            values["reward_weights"] = list(self.reward_weights)
        return values


class WrittenRewardWeights(list):
    """TRL's ``reward_weights`` as `GRPOExtConfig` writes it from the weights on the ``rewards`` items (a plain `list`
    to TRL and to JSON).

    The type marks the weights as ours, not the user's: `dataclasses.replace` hands the written field back to
    ``__init__``, and :func:`resolve_reward_specs` then ignores it (the items hold the weights), while weights the
    user wrote in both places are still refused, whatever their values. Weights the user gave in ``reward_weights``
    are never marked (the config keeps the user's list), and a marked list that was edited in place is the user's.
    """

    def __init__(self, values=()):
        super().__init__(values)
        self.written = tuple(self)

    def is_unchanged(self) -> bool:
        """Whether the list still holds what the config wrote (an in-place edit makes it the user's)."""
        return tuple(self) == self.written


def is_written(reward_weights: Any) -> bool:
    """Whether ``reward_weights`` is what an earlier resolution wrote, unchanged (see :class:`WrittenRewardWeights`)."""
    return isinstance(reward_weights, WrittenRewardWeights) and reward_weights.is_unchanged()


_WEIGHT = Range(fix="give each reward function a number, e.g. `reward_weights: [1.0, 0.5]`.")


def resolve_reward_specs(rewards: Any, reward_weights: Sequence[float] | None) -> list[RewardSpec]:
    """The reward specs of the ``rewards`` setting, with TRL's ``reward_weights`` applied.

    Weights go on the items or in ``reward_weights``, not both. A :class:`WrittenRewardWeights` is what an earlier
    resolution wrote (`dataclasses.replace` passes it back) and is ignored, so resolving twice gives the same specs.

    Args:
        rewards: the ``rewards`` setting as given (see `trl_grpo_ext.rewards.spec.parse_reward_specs`).
        reward_weights (`list[float]`, *optional*): TRL's field.

    Returns:
        `list[RewardSpec]`, weights filled in.

    Raises:
        ValueError: as `parse_reward_specs` (a malformed item, weights in both places that differ, a wrong number
            of weights, a reward selected twice); UnknownRewardError: an unknown name.
    """
    if is_written(reward_weights):
        reward_weights = None
    return parse_reward_specs(rewards, reward_weights)


def resolve_config(values: Mapping[str, Any], world_size: int, trl_defaults: Mapping[str, Any]) -> ResolvedConfig:
    """Resolve a config's fields into a :class:`ResolvedConfig`.

    Args:
        values (`Mapping[str, Any]`): the fields of :data:`USER_FIELDS` as the user gave them (a missing quantity
            field takes TRL's default; the others are required).
        world_size (`int`): training processes (``WORLD_SIZE``).
        trl_defaults (`Mapping[str, Any]`): the dataclass defaults of ``scale_rewards`` and ``loss_type`` (a field
            counts as set when it differs from its default, see `resolve_advantage_settings`).

    Raises:
        QuantityError: invalid or conflicting quantities. AdvantageConfigError: invalid or conflicting advantage
        settings. ValueError: invalid rewards (see :func:`resolve_reward_specs`).

    Warns:
        UserWarning: an advantage field set that has no effect (see `resolve_advantage_settings`).
    """
    quantities = resolve_trl_fields({k: values[k] for k in _INPUT_FIELDS if k in values}, world_size)
    advantages, advantage_trl_fields = resolve_advantage_settings(
        preset=values["advantage_preset"],
        scale_rewards=values["scale_rewards"],
        advantage_baseline=values["advantage_baseline"],
        advantage_std_scaling=values["advantage_std_scaling"],
        advantage_epsilon=values["advantage_epsilon"],
        advantage_std_kind=values["advantage_std_kind"],
        loss_type=values["loss_type"],
        defaults=trl_defaults,
    )
    rewards = reward_weights = None
    if values["rewards"] is not None:
        specs = resolve_reward_specs(values["rewards"], values["reward_weights"])
        rewards, reward_weights = tuple(specs), tuple(spec.weight for spec in specs)
    elif values["reward_weights"] is not None and not is_written(values["reward_weights"]):
        # weights for reward functions passed to the trainer (`reward_funcs=`): numbers, not booleans
        reward_weights = tuple(_WEIGHT.check(f"reward_weights[{i}]", weight, error=ValueError, typed=True)
                               for i, weight in enumerate(values["reward_weights"]))
    return ResolvedConfig(world_size=world_size, **quantities, advantages=advantages, **advantage_trl_fields,
                          rewards=rewards, reward_weights=reward_weights)
