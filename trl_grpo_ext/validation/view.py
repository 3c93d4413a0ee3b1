"""`RunView`: the values a rule of `validation.rules` reads (every field, the keys the user set, the resolved batch),
and where it reports a setting without effect (`warn`)."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from typing import Any

from ..config.advantage_settings import is_explicit
from ..config.checks import RunArgumentError
from .rewards import reward_specs
from .tables import enum_value


class RunView:
    """The values a rule reads: ``values`` (every field: `user_values.flatten_values` or a config's ``vars``),
    ``user`` (the keys the user set; None for a config built in Python, judged against ``defaults``), ``world_size``,
    ``batch`` (TRL's batch fields as resolved; else resolved from the user's keys), ``on_cpu`` (default ``use_cpu``),
    ``engine`` (of an accelerate config), ``problems`` (the collector), ``reward_names`` (None: unknown or none)."""

    def __init__(self, values: Mapping[str, Any], user: Mapping[str, Any] | None = None, world_size: int = 1, *,
                 batch: dict | None = None, on_cpu: bool | None = None, engine=None, problems=None,
                 defaults: Mapping[str, Any] | None = None, reward_names: list[str] | None = None,
                 check_model: bool = True):
        self.values, self.user, self.world_size = values, user, world_size
        self._batch, self.engine, self.problems = batch, engine, problems
        self.on_cpu = bool(values.get("use_cpu")) if on_cpu is None else on_cpu
        self.defaults = defaults or {}
        self._reward_names, self.check_model = reward_names, check_model

    def get(self, name: str, default: Any = None) -> Any:
        return enum_value(self.values.get(name, default))

    def warn(self, line: str) -> None:
        """A setting without effect: listed with the run's other warnings, not refused."""
        self.problems.warn(line)

    def is_set(self, name: str) -> bool:
        """Whether the user set ``name`` (for a config built in Python: whether it is not its default)."""
        return self.set_keys.get(name) is not None

    @cached_property
    def set_keys(self) -> Mapping[str, Any]:
        """The keys the user set: ``user``, or for a config built in Python the fields not at their default."""
        if self.user is not None:
            return self.user
        return {k: v for k, v in self.values.items() if is_explicit(k, v, self.defaults)}

    def blocked(self, fields) -> bool:
        return self.problems is not None and self.problems.blocked(fields)

    @cached_property
    def batch(self) -> dict:
        """TRL's batch and stop fields (``per_device_train_batch_size``, ``gradient_accumulation_steps``, ...).

        Raises:
            RunArgumentError: invalid or conflicting quantities among the user's keys."""
        if self._batch is not None:
            return self._batch
        from ..plan.resolve import _INPUT_FIELDS, QuantityError, resolve_trl_fields
        from .tables import typed_value

        user = self.user or {}
        given = {k: typed_value(v) for k, v in user.items() if k in _INPUT_FIELDS and v is not None}
        try:
            return resolve_trl_fields(given, self.world_size, set_fields=set(given))
        except QuantityError as err:
            raise RunArgumentError(str(err)) from None

    @cached_property
    def reward_names(self) -> list[str] | None:
        """The names of the run's registry rewards (None: none, or ``reward_funcs=``)."""
        if self._reward_names is not None or self.values.get("rewards") is None:
            return self._reward_names
        try:
            return [spec.name for spec in reward_specs(self.values)] or None
        except ValueError:  # the `reward_specs` rule reports it
            return None

    def quantity_keys(self) -> tuple[str, ...]:
        """The quantity fields (ours and TRL's batch/stop fields) the user set."""
        from ..plan.resolve import _INPUT_FIELDS

        return tuple(k for k in (self.user or {}) if k in _INPUT_FIELDS and self.user[k] is not None)

    def loss_type(self) -> str:
        """TRL's ``loss_type`` as the run resolves it (an ``advantage_preset``'s first)."""
        from ..config.advantage_settings import PRESETS

        preset = PRESETS.get(self.get("advantage_preset") or "", {})
        return preset.get("loss_type") or self.get("loss_type") or "dapo"
