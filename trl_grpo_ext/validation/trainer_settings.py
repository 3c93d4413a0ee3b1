"""Rules on transformers' `Trainer` settings and on a continued adapter that nothing refuses before the model loads
(`Trainer.__init__`, the scheduler at the first step) or only the recipe would (transformers 5.24:
`trainer.py`, `optimization.py`). What `TrainingArguments` or `GRPOConfig` refuse when built is theirs."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..config.checks import RunArgumentError
from .mappings import as_mapping
from .tables import enum_value

#: The fields :func:`check_trainer_settings` reads (a problem already reported for one skips it).
TRAINER_FIELDS = ("lr_scheduler_type", "lr_scheduler_kwargs", "save_strategy", "metric_for_best_model",
                  "load_best_model_at_end")


def check_trainer_settings(values: Mapping[str, Any], problems) -> None:
    """Record in ``problems`` (a `Problems`) each problem of ``values`` (every field), with its fix: a min-lr schedule
    without exactly one floor (transformers raises at the first step), ``save_strategy: best`` without a metric
    (`Trainer.__init__` refuses it)."""
    scheduler = enum_value(values.get("lr_scheduler_type"))
    kwargs = as_mapping("lr_scheduler_kwargs", values.get("lr_scheduler_kwargs"))
    floors = [k for k in ("min_lr", "min_lr_rate") if kwargs.get(k) is not None]
    if scheduler in ("cosine_with_min_lr", "cosine_warmup_with_min_lr") and len(floors) != 1:  # exactly one, else raises
        problems.add(f"lr_scheduler_type={scheduler!r} decays to a floor it reads from lr_scheduler_kwargs, which sets "
                     f"{'both min_lr and min_lr_rate' if floors else 'none'} (lr_scheduler_kwargs={kwargs!r}): "
                     "transformers raises at the first step. Fix: give one of them, e.g. lr_scheduler_kwargs: "
                     "{min_lr_rate: 0.1}, or use lr_scheduler_type: cosine.", ("lr_scheduler_type", "lr_scheduler_kwargs"))
    takes = _scheduler_parameters(scheduler or "linear")
    unknown = [key for key in kwargs if takes is not None and key not in takes]
    if unknown:  # (a typo such as num_cycle for cosine's num_cycles: a TypeError at the first step)
        problems.add(f"lr_scheduler_kwargs has keys lr_scheduler_type={scheduler or 'linear'!r} does not take: "
                     f"{', '.join(map(repr, unknown))} (it takes {', '.join(takes) or 'none'}): transformers fails at "
                     "the first step. Fix: remove or rename them.", ("lr_scheduler_kwargs",))
    if (enum_value(values.get("save_strategy")) == "best" and values.get("metric_for_best_model") is None
            and not values.get("load_best_model_at_end")):
        problems.add("save_strategy='best' saves when metric_for_best_model improves, and metric_for_best_model is "
                     "not set: the trainer refuses it after the model loads. Fix: set metric_for_best_model: reward (or "
                     "another logged metric), or save_strategy: steps.", ("save_strategy", "metric_for_best_model"))


def check_batch_dispatch(values: Mapping[str, Any], problems) -> None:
    """Record in ``problems`` ``accelerator_config``'s batch keys that break GRPO, whose processes each draw their own
    rows of text from TRL's `RepeatSampler` (any value but None/False counts as set: accelerate reads 1 or "false" as
    true): ``dispatch_batches`` fails at the first step; ``split_batches`` has each of N processes train 1/N of the
    completions (measured on 2: 5 of 8 prompts never drawn)."""
    read = as_mapping("accelerator_config", values.get("accelerator_config"))
    if read.get("dispatch_batches") not in (None, False):
        problems.add(f"accelerator_config.dispatch_batches={read['dispatch_batches']!r} has process 0 read every batch "
                     "and send it to the others as tensors, but a GRPO batch is prompts (text): accelerate fails at the "
                     "first step, after the model loads. Fix: remove dispatch_batches (each process draws its own "
                     "prompts).", ("accelerator_config",))
    if read.get("split_batches") not in (None, False):
        problems.add(f"accelerator_config.split_batches={read['split_batches']!r} divides each process's batch among "
                     "the processes: with several, each would train a fraction of the completions micro_batch_size "
                     "counts, and some prompts would never be drawn. Fix: remove split_batches (micro_batch_size "
                     "already counts the completions of one process).", ("accelerator_config",))


def continued_adapter(values: Mapping[str, Any]) -> Any:
    """The `models.source.ModelSource` of a run that continues an adapter, else None (also for a folder that is
    neither a model nor an adapter: plan and the recipe report it)."""
    from ..models.source import resolve_model_source

    name = values.get("model_name_or_path")
    try:
        source = resolve_model_source(name) if isinstance(name, str) and name else None
    except (ValueError, OSError, TypeError):
        return None
    return source if source is not None and source.continued else None


def check_continued_adapter(values: Mapping[str, Any]) -> None:
    """A continued adapter (`models.source`) the run cannot train: ``use_peft: false`` (the adapter would be dropped)
    or an ``output_dir`` that is the adapter's folder (overwritten).

    Raises:
        RunArgumentError: naming the field, the value and the fix."""
    source, name = continued_adapter(values), values.get("model_name_or_path")
    if source is None:
        return
    if not values.get("use_peft"):
        raise RunArgumentError(f"model_name_or_path={name!r} is an adapter of an earlier run, which this run would "
                               "continue, but use_peft is false. Fix: set use_peft: true to train the adapter further.")
    output_dir = values.get("output_dir")
    if isinstance(output_dir, str) and output_dir and Path(output_dir).expanduser().resolve() == Path(source.adapter):
        raise RunArgumentError(f"output_dir={output_dir!r} is the adapter folder being continued (model_name_or_path="
                               f"{name!r}); the new adapter would overwrite it. Fix: choose another output_dir.")


def _scheduler_parameters(scheduler: str) -> list[str] | None:
    """The ``lr_scheduler_kwargs`` keys the schedule's function takes (transformers' ``get_scheduler``), or None when
    it takes any (or is unknown: its choices refuse it; a constant schedule's kwargs are a `tables.NEEDS` warning)."""
    import inspect

    from transformers.optimization import TYPE_TO_SCHEDULER_FUNCTION
    from transformers.trainer_utils import SchedulerType

    try:
        params = inspect.signature(TYPE_TO_SCHEDULER_FUNCTION[SchedulerType(scheduler)]).parameters
    except (ValueError, KeyError):
        return None
    if scheduler in ("constant", "constant_with_warmup") or any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return None
    return [name for name in params if name not in ("optimizer", "num_warmup_steps", "num_training_steps", "last_epoch")]
