"""Checks of the plan listed with the config's other problems (`frontdoor.read_run_args`'s ``checks``)."""

from __future__ import annotations

from typing import Any

from ..config.checks import RunArgumentError
from ..config.resolved import QUANTITY_FIELDS
from ..models.embedded.tiny import EMBEDDED_PREFIX
from .tables import enum_value


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


_EVAL_FIELDS = ("eval_strategy", "final_eval", "eval_num_prompts", "eval_steps", "logging_steps", "num_generations",
                "num_generations_eval", "per_device_eval_batch_size", "dataset_test_split")


def check_eval_batches(run: Any, eval_rows: int | None, world_size: int) -> None:
    """`evaluation.plan.resolve_eval_plan`'s refusals (an eval batch of part groups, a test split that fills no whole
    batch) on ``run``, with the ``eval_rows`` the dataset stage read (else ``eval_num_prompts``, else the embedded
    task's test split); nothing when one of its fields is already refused.

    Raises:
        QuantityError: as `resolve_eval_plan`."""
    from ..config.data_sizes import embedded_test_size
    from ..evaluation.plan import resolve_eval_plan

    if run.problems is not None and run.problems.blocked(_EVAL_FIELDS):
        return
    script, training = run.script_args, run.training_args
    prompts = eval_rows if eval_rows is not None else script.eval_num_prompts
    resolve_eval_plan(  # total_steps only counts evaluations, which no refusal depends on
        eval_prompts=prompts if prompts is not None else embedded_test_size(script.dataset_name),
        eval_strategy=str(enum_value(training.eval_strategy)), eval_steps=training.eval_steps,
        logging_steps=training.logging_steps, num_generations=training.num_generations,
        num_generations_eval=training.num_generations_eval,
        per_device_eval_batch_size=training.per_device_eval_batch_size, world_size=world_size, total_steps=1,
        steps_per_epoch=1, final_eval=str(enum_value(script.final_eval)),
        split_rows=eval_rows is not None and script.eval_num_prompts is None)
