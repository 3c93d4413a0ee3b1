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

#: Schedulers that read ``min_lr`` or ``min_lr_rate`` from ``lr_scheduler_kwargs`` and raise without one.
MIN_LR_SCHEDULERS = ("cosine_with_min_lr", "cosine_warmup_with_min_lr")
#: The fields :func:`trainer_problems` reads (a problem already reported for one skips it).
TRAINER_FIELDS = ("output_dir", "lr_scheduler_type", "lr_scheduler_kwargs", "save_strategy", "metric_for_best_model",
                  "load_best_model_at_end", "pad_to_multiple_of", "hub_strategy", "hub_always_push",
                  "accelerator_config", "transformers_continuous_batching_config", "model_init_kwargs")
#: `model_init_kwargs` keys the recipe sets from ModelConfig fields (recipes/grpo_qlora.py): field to write instead.
MODEL_INIT_FIELDS = {"dtype": "dtype", "torch_dtype": "dtype", "revision": "model_revision",
                     "attn_implementation": "attn_implementation"}


def trainer_problems(values: Mapping[str, Any], user: Mapping[str, Any] | None = None) -> list[tuple[str, tuple]]:
    """The problems of ``values`` (every field) as ``(line, fields)``, each line with its fix (``user``: unused)."""
    found = []
    output_dir = values.get("output_dir")
    if isinstance(output_dir, str) and not output_dir.strip():
        found.append((f"output_dir={output_dir!r} names no folder: the trainer would fail creating it after the model "
                      "loads. Fix: set output_dir to a folder, e.g. outputs/my-run (an empty shell variable gives '').",
                      ("output_dir",)))
    scheduler = enum_value(values.get("lr_scheduler_type"))
    kwargs = as_mapping("lr_scheduler_kwargs", values.get("lr_scheduler_kwargs"))
    found += _scheduler_kwargs_problems(scheduler or "linear", kwargs)
    floors = [k for k in ("min_lr", "min_lr_rate") if kwargs.get(k) is not None]
    if scheduler in MIN_LR_SCHEDULERS and len(floors) != 1:  # transformers: exactly one, else it raises
        found.append((f"lr_scheduler_type={scheduler!r} decays to a floor it reads from lr_scheduler_kwargs, which sets "
                      f"{'both min_lr and min_lr_rate' if floors else 'none'} (lr_scheduler_kwargs={kwargs!r}): "
                      "transformers raises at the first step. Fix: give one of them, e.g. lr_scheduler_kwargs: "
                      "{min_lr_rate: 0.1}, or use lr_scheduler_type: cosine.",
                      ("lr_scheduler_type", "lr_scheduler_kwargs")))
    if (enum_value(values.get("save_strategy")) == "best" and values.get("metric_for_best_model") is None
            and not values.get("load_best_model_at_end")):
        found.append(("save_strategy='best' saves when metric_for_best_model improves, and metric_for_best_model is "
                      "not set: the trainer refuses it after the model loads. Fix: set metric_for_best_model: "
                      "reward (or another logged metric), or save_strategy: steps.",
                      ("save_strategy", "metric_for_best_model")))
    pad = values.get("pad_to_multiple_of")  # TRL int()s a string but "auto", "none", "null" (refusing a non-number)
    if isinstance(pad, str) and pad.lower() not in ("auto", "none", "null"):
        pad = int(pad) if pad.strip().lstrip("+-").isdigit() else None
    if pad is not None and not isinstance(pad, str) and (type(pad) is not int or pad < 1):
        found.append((f"pad_to_multiple_of={values.get('pad_to_multiple_of')!r} is not valid: TRL takes a whole "
                      "number >= 1 of tokens, 'auto' or none. Fix: remove it (auto: 128 on Neuron, else no padding) "
                      "or set e.g. 8.", ("pad_to_multiple_of",)))
    return found + _mapping_key_problems(values)


def trainer_warnings(values: Mapping[str, Any], user: Mapping[str, Any] | None = None) -> list[str]:
    """TRL's own push settings, which the recipe turns off, beside a push (``user``: the keys set; None: all)."""
    pushes = values.get("push_to_hub") is True or enum_value(values.get("push_to_hub_mode")) not in (None, "none")
    return [f"{name}={enum_value(values.get(name))!r} configures TRL's own push (at each save or when trainer.train "
            "ends), which the recipe turns off: it pushes once, after the adapter, the card and the plot are saved "
            f"locally (hub.push). Fix: remove {name}."
            for name in (("hub_strategy", "hub_always_push") if pushes else ())
            if (values if user is None else user).get(name) not in (None, False, "end")]  # end: the recipe's one push


def batch_dispatch_problems(values: Mapping[str, Any]) -> list[tuple[str, tuple[str, ...]]]:
    """``accelerator_config``'s batch keys that break GRPO, whose processes each draw their own rows of text from
    TRL's `RepeatSampler` (any value but None/False counts as set: accelerate reads 1 or "false" as true):
    ``dispatch_batches`` fails at the first step; ``split_batches`` has each of N processes train 1/N of the
    completions (measured on 2: 5 of 8 prompts never drawn); ``gradient_accumulation_kwargs.num_steps`` is written
    over ``gradient_accumulation_steps`` by `Trainer.__init__`. Returns ``(line, fields)`` per problem."""
    read = as_mapping("accelerator_config", values.get("accelerator_config"))
    found = []
    if read.get("dispatch_batches") not in (None, False):
        found.append((f"accelerator_config.dispatch_batches={read['dispatch_batches']!r} has process 0 read every "
                      "batch and send it to the others as tensors, but a GRPO batch is prompts (text): accelerate fails "
                      "at the first step, after the model loads. Fix: remove dispatch_batches (each process draws its "
                      "own prompts).", ("accelerator_config",)))
    if read.get("split_batches") not in (None, False):
        found.append((f"accelerator_config.split_batches={read['split_batches']!r} divides each process's batch among "
                      "the processes: with several, each would train a fraction of the completions micro_batch_size "
                      "counts, and some prompts would never be drawn. Fix: remove split_batches (micro_batch_size "
                      "already counts the completions of one process).", ("accelerator_config",)))
    accumulation = read.get("gradient_accumulation_kwargs")
    if isinstance(accumulation, Mapping) and accumulation.get("num_steps") is not None:
        found.append((f"accelerator_config.gradient_accumulation_kwargs sets num_steps={accumulation['num_steps']!r}, "
                      "which transformers writes over gradient_accumulation_steps (or refuses beside it, after the "
                      "model loads): the run would train other batches than the plan's. Fix: remove num_steps "
                      "(prompts_per_step and micro_batch_size set the accumulation).", ("accelerator_config",)))
    return found


def _scheduler_kwargs_problems(scheduler: str, kwargs: Mapping) -> list[tuple[str, tuple[str, ...]]]:
    """``lr_scheduler_kwargs`` keys the schedule's function does not take (a TypeError at the first step), or that
    the trainer passes itself; constant schedules' kwargs are `tables.NEEDS`' warning."""
    import inspect

    from transformers.optimization import TYPE_TO_SCHEDULER_FUNCTION
    from transformers.trainer_utils import SchedulerType

    try:
        params = inspect.signature(TYPE_TO_SCHEDULER_FUNCTION[SchedulerType(scheduler)]).parameters
    except (ValueError, KeyError):  # an unknown schedule is refused by its choices
        return []
    if scheduler in ("constant", "constant_with_warmup") or any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return []
    takes = [name for name in params if name not in ("optimizer", "num_warmup_steps", "num_training_steps", "last_epoch")]
    unknown = [key for key in kwargs if key not in takes]
    return [(f"lr_scheduler_kwargs has keys lr_scheduler_type={scheduler!r} does not take: "
             f"{', '.join(map(repr, unknown))} (it takes {', '.join(takes) or 'none'}; warmup and training steps come "
             "from warmup_steps and the plan). Fix: remove or rename them.", ("lr_scheduler_kwargs",))] if unknown else []


def _mapping_key_problems(values: Mapping[str, Any]) -> list[tuple[str, tuple[str, ...]]]:
    """Keys of ``accelerator_config`` / ``transformers_continuous_batching_config`` their class has no field for (a
    TypeError, which the front door does not report as one line, in `TrainingArguments.__post_init__` or after the
    model loads), and ``model_init_kwargs`` keys the recipe sets from ModelConfig fields (:data:`MODEL_INIT_FIELDS`)
    or that TRL refuses beside a quantized base (``quantization_config``)."""
    import dataclasses

    from transformers.generation import ContinuousBatchingConfig  # where TRL 1.16 imports it from
    from transformers.trainer_pt_utils import AcceleratorConfig

    found = []
    for name, cls in (("accelerator_config", AcceleratorConfig),
                      ("transformers_continuous_batching_config", ContinuousBatchingConfig)):
        fields = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(as_mapping(name, values.get(name))) - set(fields))
        if unknown:
            found.append((f"{name} has keys {cls.__name__} does not take: {', '.join(map(repr, unknown))} (its "
                          f"fields: {', '.join(fields)}). Fix: remove or rename them.", (name,)))
    init = as_mapping("model_init_kwargs", values.get("model_init_kwargs"))
    for key in sorted(set(init) & set(MODEL_INIT_FIELDS)):
        field = MODEL_INIT_FIELDS[key]
        found.append((f"model_init_kwargs sets {key}={init[key]!r}, which the recipe sets from {field} (ModelConfig): "
                      f"the two would disagree. Fix: write {field}: {init[key]} and remove {key} from "
                      "model_init_kwargs.", ("model_init_kwargs", field)))
    if "quantization_config" in init and (values.get("load_in_4bit") or values.get("load_in_8bit")):
        found.append(("model_init_kwargs sets quantization_config beside load_in_4bit / load_in_8bit, which TRL refuses "
                      "after the model loads. Fix: remove quantization_config from model_init_kwargs (the bnb_4bit_* "
                      "fields tune the recipe's).", ("model_init_kwargs", "load_in_4bit", "load_in_8bit")))
    return found


def check_continued_adapter(values: Mapping[str, Any]) -> None:
    """A continued adapter (`models.source`) the run cannot train: ``use_peft: false`` (the adapter would be dropped)
    or an ``output_dir`` that is the adapter's folder (overwritten).

    Raises:
        RunArgumentError: naming the field, the value and the fix."""
    from ..models.source import resolve_model_source

    name = values.get("model_name_or_path")
    try:
        source = resolve_model_source(name) if isinstance(name, str) and name else None
    except (ValueError, OSError):  # a folder that is neither a model nor an adapter: plan and the recipe report it
        return
    if source is None or not source.continued:
        return
    if not values.get("use_peft"):
        raise RunArgumentError(f"model_name_or_path={name!r} is an adapter of an earlier run, which this run would "
                               "continue, but use_peft is false. Fix: set use_peft: true to train the adapter further.")
    output_dir = values.get("output_dir")
    if isinstance(output_dir, str) and output_dir and Path(output_dir).expanduser().resolve() == Path(source.adapter):
        raise RunArgumentError(f"output_dir={output_dir!r} is the adapter folder being continued (model_name_or_path="
                               f"{name!r}); the new adapter would overwrite it. Fix: choose another output_dir.")
