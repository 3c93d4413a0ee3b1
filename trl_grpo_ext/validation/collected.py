"""Checks of the plan listed with the config's other problems (`frontdoor.read_run_args`'s ``checks``)."""

from __future__ import annotations

from typing import Any

from ..config.checks import RunArgumentError
from ..config.resolved import QUANTITY_FIELDS
from .tables import enum_value

EMBEDDED_PREFIX = "embedded:"


def dataset_size_of(script_args: Any, dataset_size: int | None = None) -> int | None:
    """``dataset_size`` if given, else ``embedded_num_prompts`` for an embedded dataset, else None."""
    if dataset_size is not None:
        return dataset_size
    name = getattr(script_args, "dataset_name", None)
    if isinstance(name, str) and name.startswith(EMBEDDED_PREFIX):
        return getattr(script_args, "embedded_num_prompts", None)
    return None


def check_skip_epochs(run: Any, dataset_size: int | None, world_size: int) -> None:
    """`check_skip_plan` on the plan of ``run`` (the front door's `RunArgs`) with ``dataset_size`` prompts; nothing when
    the filter is not ``skip``, the size is unknown or the plan does not resolve.

    Raises:
        RunArgumentError: the run covers at most one epoch."""
    from ..plan import resolve_plan
    from ..zero_variance.settings import check_skip_plan
    from .rules import RunView

    training = run.training_args
    if enum_value(getattr(training, "zero_variance_filter", None)) != "skip" or dataset_size is None:
        return
    try:  # the quantities alone (another field's problem, a misspelt reward, does not hide this one)
        fields = RunView({}, getattr(run, "user_values", None) or {}, world_size).batch
        plan = resolve_plan({k: fields.get(k) for k in QUANTITY_FIELDS}, dataset_size, world_size,
                            training.max_completion_length)
    except (ValueError, TypeError):  # reported by the checks of those fields
        return
    try:
        check_skip_plan(plan)
    except ValueError as err:
        raise RunArgumentError(str(err)) from None
