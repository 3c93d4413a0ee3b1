"""Checks of the plan listed with the config's other problems (`frontdoor.read_run_args`'s ``checks``)."""

from __future__ import annotations

from typing import Any

from ..config.checks import RunArgumentError
from ..models.embedded.tiny import EMBEDDED_PREFIX
from .tables import enum_value

_EVAL_FIELDS = ("eval_strategy", "final_eval", "eval_num_prompts", "eval_steps", "logging_steps", "num_generations",
                "num_generations_eval", "per_device_eval_batch_size", "dataset_test_split")


def dataset_size_of(script_args: Any, dataset_size: int | None = None) -> int | None:
    """``dataset_size`` if given, else ``embedded_num_prompts`` for an embedded dataset, else None."""
    name = getattr(script_args, "dataset_name", None)
    if dataset_size is None and isinstance(name, str) and name.startswith(EMBEDDED_PREFIX):
        return getattr(script_args, "embedded_num_prompts", None)
    return dataset_size


def plan_of(run: Any, dataset_size: int | None, world_size: int):
    """`plan.resolve_plan` of the quantities the user set in ``run`` (the front door's `RunArgs`). Raises ValueError
    or TypeError: a quantity's own problem, or QuantityError: the plan's."""
    from ..plan import resolve_plan
    from .rules import RunView

    batch = RunView({}, getattr(run, "user_values", None) or {}, world_size).batch
    return resolve_plan(batch, dataset_size, world_size, run.training_args.max_completion_length)


def check_skip_epochs(run: Any, dataset_size: int | None, world_size: int) -> None:
    """`check_skip_plan` on the plan of ``run`` with ``dataset_size`` prompts; nothing when the filter is not
    ``skip``, the size is unknown or the plan does not resolve. Raises RunArgumentError: at most one epoch."""
    from ..zero_variance.settings import check_skip_plan

    training = run.training_args
    if enum_value(getattr(training, "zero_variance_filter", None)) != "skip" or dataset_size is None:
        return
    try:  # the quantities alone (another field's problem, a misspelt reward, does not hide this one)
        plan = plan_of(run, dataset_size, world_size)
    except (ValueError, TypeError):  # reported by the checks of those fields
        return
    try:
        check_skip_plan(plan, seeded=getattr(training, "skip_history_file", None) is not None)
    except ValueError as err:
        raise RunArgumentError(str(err)) from None


def eval_plan_of(run: Any, eval_rows: int | None, world_size: int, total_steps: int = 1, steps_per_epoch: int = 1):
    """`plan.evaluation.resolve_eval_plan` of ``run`` on the ``eval_rows`` the dataset stage read (else
    ``eval_num_prompts``, else the embedded task's test split size); ``total_steps`` and ``steps_per_epoch`` only
    count the evaluations. Raises QuantityError: as `resolve_eval_plan`."""
    from ..config.data_sizes import EMBEDDED_TEST_SIZES
    from ..plan.evaluation import resolve_eval_plan

    script, training = run.script_args, run.training_args
    prompts = eval_rows if eval_rows is not None else script.eval_num_prompts
    return resolve_eval_plan(
        eval_prompts=prompts if prompts is not None else EMBEDDED_TEST_SIZES.get(str(script.dataset_name)),
        eval_strategy=str(enum_value(training.eval_strategy)), eval_steps=training.eval_steps,
        logging_steps=training.logging_steps, num_generations=training.num_generations,
        num_generations_eval=training.num_generations_eval,
        per_device_eval_batch_size=training.per_device_eval_batch_size, world_size=world_size,
        total_steps=total_steps, steps_per_epoch=steps_per_epoch, final_eval=str(enum_value(script.final_eval)),
        split_rows=eval_rows is not None and script.eval_num_prompts is None)


def check_eval_batches(run: Any, eval_rows: int | None, world_size: int) -> None:
    """:func:`eval_plan_of`'s refusals, listed with the other problems; nothing when one of its fields is already
    refused. Raises QuantityError."""
    if run.problems is None or not run.problems.blocked(_EVAL_FIELDS):
        eval_plan_of(run, eval_rows, world_size)
