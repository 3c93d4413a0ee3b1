"""Advantage settings (baseline, std scaling, ε, std kind) and their presets, resolved against TRL's
``scale_rewards`` and ``loss_type`` into one `AdvantageSettings` (pure: no torch; docs/advantages.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .checks import Range, check_choice

BASELINES = ("group_mean", "leave_one_out")
STD_SCALINGS = ("group", "batch", "none")
STD_KINDS = ("sample", "population")

TRL_EPSILON = 1e-4  # the ε TRL 1.16 hard-codes in (r - μ) / (σ + 1e-4)

EPSILON_RANGE = Range(low=0, fix="use 1e-4 (TRL's).")

#: The published variants (sources and reasoning: docs/advantages.md, "Presets").
_GROUP_STD = {"advantage_baseline": "group_mean", "advantage_std_scaling": "group", "advantage_std_kind": "sample",
              "advantage_epsilon": TRL_EPSILON}
PRESETS: dict[str, dict[str, Any]] = {
    "grpo": {**_GROUP_STD, "loss_type": "grpo"},  # Shao et al. 2024, DeepSeekMath, arXiv 2402.03300, eq. (3)
    # Liu et al. 2025, Dr. GRPO, arXiv 2503.20783: no std division, no 1/|o_i| length normalisation
    "dr_grpo": {"advantage_baseline": "group_mean", "advantage_std_scaling": "none", "loss_type": "dr_grpo"},
    # Ahmadian et al. 2024, RLOO, arXiv 2402.14740: leave-one-out baseline, sequence-level REINFORCE (a token sum)
    "rloo": {"advantage_baseline": "leave_one_out", "advantage_std_scaling": "none", "loss_type": "dr_grpo"},
    "dapo": {**_GROUP_STD, "loss_type": "dapo"},  # Yu et al. 2025, DAPO, arXiv 2503.14476 (token-level loss)
}

#: The config fields of the advantages (ours, then TRL's ``scale_rewards``), in the order the card shows them.
FIELDS = ("advantage_preset", "advantage_baseline", "advantage_std_scaling", "advantage_epsilon", "advantage_std_kind",
          "scale_rewards")
#: Their defaults, with TRL's ``loss_type``: ours None, TRL's TRL's.
FIELD_DEFAULTS: dict[str, Any] = {**dict.fromkeys(FIELDS), "scale_rewards": "group", "loss_type": "dapo"}


class AdvantageConfigError(ValueError):
    """Advantage settings that are unknown or contradict each other."""


def _check_choice(field_name: str, value: Any, valid: tuple[str, ...]) -> str:
    return check_choice(field_name, value, valid, error=AdvantageConfigError)


def normalize_scale_rewards(value: Any) -> str:
    """TRL's `scale_rewards` as one of `STD_SCALINGS` (True -> "group", False -> "none", as TRL reads it).
    Raises AdvantageConfigError on any other value."""
    if isinstance(value, (bool, str)) and str(value).lower() in ("true", "false"):
        return "group" if str(value).lower() == "true" else "none"
    return check_choice("scale_rewards", value, STD_SCALINGS, error=AdvantageConfigError, fix="(Or True / False.)")


@dataclass(frozen=True)
class AdvantageSettings:
    """How rewards become advantages (`advantages.compute_advantages`): ``baseline`` (`BASELINES`), ``std_scaling``
    (`STD_SCALINGS`), ``epsilon`` >= 0 [reward units], ``std_kind`` (``"sample"``: n − 1, or ``"population"``).
    Raises AdvantageConfigError on an unknown value or a bad ε."""

    baseline: str = "group_mean"
    std_scaling: str = "group"
    epsilon: float = TRL_EPSILON
    std_kind: str = "sample"

    def __post_init__(self) -> None:
        _check_choice("advantage_baseline", self.baseline, BASELINES)
        _check_choice("advantage_std_scaling", self.std_scaling, STD_SCALINGS)
        _check_choice("advantage_std_kind", self.std_kind, STD_KINDS)
        object.__setattr__(self, "epsilon", float(EPSILON_RANGE.check("advantage_epsilon", self.epsilon,
                                                                      error=AdvantageConfigError)))

    @property
    def is_trl_native(self) -> bool:
        """Whether TRL's own formula computes these settings (group mean; no std, or sample std with ε = 1e-4)."""
        return self.baseline == "group_mean" and (
            self.std_scaling == "none" or (self.std_kind == "sample" and self.epsilon == TRL_EPSILON))


def is_explicit(name: str, value: Any, defaults: Mapping[str, Any]) -> bool:
    """Whether ``value`` of field ``name`` is set: not None and not its default in ``defaults`` (``scale_rewards``
    compared as :func:`normalize_scale_rewards` reads it)."""
    if value is None:
        return False
    default = defaults.get(name)
    if name == "scale_rewards" and default is not None:
        return normalize_scale_rewards(value) != normalize_scale_rewards(default)
    return value != default


def resolve_advantage_settings(*, preset: str | None = None, scale_rewards: bool | str = "group",
                               advantage_baseline: str | None = None, advantage_std_scaling: str | None = None,
                               advantage_epsilon: float | None = None, advantage_std_kind: str | None = None,
                               loss_type: str | None = "dapo", defaults: Mapping[str, Any] | None = None,
                               ) -> tuple[AdvantageSettings, dict[str, Any]]:
    """``(settings, {"scale_rewards": ..., "loss_type": ...})``: a preset, TRL's `scale_rewards` and our advantage
    fields merged into one `AdvantageSettings`, and TRL's fields to write. A field is set when not None and not its
    default in ``defaults`` (:data:`FIELD_DEFAULTS`); the preset and the set fields must agree.

    Raises:
        AdvantageConfigError: an unknown preset or value; a preset or set fields that disagree."""
    defaults = FIELD_DEFAULTS if defaults is None else defaults
    if preset is not None:
        _check_choice("advantage_preset", preset, tuple(PRESETS))
    raw = {"advantage_baseline": advantage_baseline, "advantage_std_scaling": advantage_std_scaling,
           "scale_rewards": scale_rewards, "advantage_epsilon": advantage_epsilon,
           "advantage_std_kind": advantage_std_kind, "loss_type": loss_type}
    # every value checked first (an unknown one is reported as such, not as a conflict)
    given = AdvantageSettings(**{key: raw[f"advantage_{key}"] for key in ("baseline", "std_scaling", "epsilon",
                                                                          "std_kind") if raw[f"advantage_{key}"] is not None})
    values = {**raw, "scale_rewards": normalize_scale_rewards(scale_rewards),
              "advantage_epsilon": given.epsilon if advantage_epsilon is not None else None}
    preset_fields = PRESETS[preset] if preset is not None else {}

    def decide(setting: str, fields: tuple[str, ...], fallback: Any) -> Any:
        claims = [(f"advantage_preset={preset!r} (which sets {fields[0]}={preset_fields[fields[0]]!r})",
                   preset_fields[fields[0]])] if fields[0] in preset_fields else []  # (source, value): then the set fields
        claims += [(f"{name}={raw[name]!r}", values[name]) for name in fields if is_explicit(name, raw[name], defaults)]
        for source, value in claims[1:]:
            if value != claims[0][1]:
                fix = (f"Remove {source.split('=')[0]} (the preset sets it), or drop the preset and set the fields "
                       "yourself." if fields[0] in preset_fields else
                       "Set only one of them, or give both the same value.")
                raise AdvantageConfigError(f"{claims[0][0]} conflicts with {source}: both set the {setting}. {fix}")
        if claims:
            return claims[0][1]
        return next((values[name] for name in fields if values[name] is not None), fallback)

    settings = AdvantageSettings(baseline=decide("advantage baseline", ("advantage_baseline",), "group_mean"),
                                 std_scaling=decide("std scaling", ("advantage_std_scaling", "scale_rewards"), "group"),
                                 epsilon=decide("advantage ε", ("advantage_epsilon",), TRL_EPSILON),
                                 std_kind=decide("std kind", ("advantage_std_kind",), "sample"))
    return settings, {"scale_rewards": settings.std_scaling, "loss_type": decide("loss type", ("loss_type",), loss_type)}
