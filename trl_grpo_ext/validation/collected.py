"""Checks that used to run one at a time after the config's problems were listed, now part of that list.

`plan`, the recipe and ``trl-grpo-ext train --accelerate_config`` reported these only once every other problem was
fixed: a skip filter that one epoch leaves with nothing to skip (`zero_variance.settings.check_skip_plan`, on the
plan). It is a small function the front door's ``checks`` run with the others (`frontdoor.read_run_args`), so a config with three problems shows three.
"""

from __future__ import annotations

from typing import Any

from ..config.checks import RunArgumentError
from .tables import enum_value

EMBEDDED_PREFIX = "embedded:"
#: What `plan.resolve_plan` takes (`ResolvedConfig.quantity_fields`).
QUANTITY_FIELDS = ("prompts_per_step", "micro_batch_size", "total_training_steps", "total_epochs",
                   "per_device_train_batch_size", "gradient_accumulation_steps", "steps_per_generation",
                   "generation_batch_size", "max_steps", "num_train_epochs", "num_generations", "num_iterations",
                   "stop_semantics")


def dataset_size_of(script_args: Any, dataset_size: int | None = None) -> int | None:
    """``dataset_size`` if given, else ``embedded_num_prompts`` for an embedded dataset, else ``None`` (unknown
    before the dataset is read)."""
    if dataset_size is not None:
        return dataset_size
    name = getattr(script_args, "dataset_name", None)
    if isinstance(name, str) and name.startswith(EMBEDDED_PREFIX):
        return getattr(script_args, "embedded_num_prompts", None)
    return None


def check_skip_epochs(run: Any, dataset_size: int | None, world_size: int) -> None:
    """`check_skip_plan` on the plan of ``run`` (the front door's `RunArgs`, twins or real) with ``dataset_size``
    prompts; nothing when the filter is not ``skip`` or the size is unknown (the recipe checks it again once it has
    read the dataset). A plan that does not resolve is left to the checks that report its fields.

    Raises:
        RunArgumentError: the run covers at most one epoch (skip would act as mask), naming the fix.
    """
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
