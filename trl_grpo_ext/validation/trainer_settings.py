"""Rules on transformers' `Trainer` settings and on a continued adapter that only the real classes or the model's
folder would refuse: after the model has loaded (`Trainer.__init__`, the scheduler at the first step), or only in the
recipe. Listed in `rules.RULES`, so `plan` refuses them too (transformers 5.24: `training_args.py`, `trainer.py`,
`optimization.py`)."""

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
TRAINER_FIELDS = ("output_dir", "lr_scheduler_type", "lr_scheduler_kwargs", "eval_strategy", "save_strategy",
                  "metric_for_best_model", "load_best_model_at_end", "save_steps", "eval_steps", "auto_find_batch_size",
                  "pad_to_multiple_of", "hub_strategy", "hub_always_push", "accelerator_config",
                  "transformers_continuous_batching_config", "model_init_kwargs")
#: `model_init_kwargs` keys the recipe sets from ModelConfig fields (recipes/grpo_qlora.py): field to write instead.
MODEL_INIT_FIELDS = {"dtype": "dtype", "torch_dtype": "dtype", "revision": "model_revision",
                     "attn_implementation": "attn_implementation"}


def trainer_problems(values: Mapping[str, Any], user: Mapping[str, Any] | None = None) -> list[tuple[str, tuple]]:
    """The problems of ``values`` (every field) as ``(line, fields)``, each line with its fix; ``user``: the keys the
    user set (None: every field of ``values`` counts as set)."""
    get = lambda name: enum_value(values.get(name))  # noqa: E731
    found = []
    output_dir = values.get("output_dir")
    if isinstance(output_dir, str) and not output_dir.strip():
        found.append((f"output_dir={output_dir!r} names no folder: the trainer would fail creating it after the model "
                      "loads. Fix: set output_dir to a folder, e.g. outputs/my-run (an empty shell variable gives '').",
                      ("output_dir",)))
    scheduler = get("lr_scheduler_type")
    kwargs = as_mapping("lr_scheduler_kwargs", values.get("lr_scheduler_kwargs"))  # the command line's JSON too
    found += _scheduler_kwargs_problems(scheduler or "linear", kwargs)
    floors = [k for k in ("min_lr", "min_lr_rate") if isinstance(kwargs, Mapping) and kwargs.get(k) is not None]
    if scheduler in MIN_LR_SCHEDULERS and len(floors) != 1:  # transformers: exactly one, else it raises
        found.append((f"lr_scheduler_type={scheduler!r} decays to a floor it reads from lr_scheduler_kwargs, which sets "
                      f"{'both min_lr and min_lr_rate' if floors else 'none'} (lr_scheduler_kwargs={kwargs!r}): "
                      "transformers raises at the first step. Fix: give one of them, e.g. lr_scheduler_kwargs: "
                      "{min_lr_rate: 0.1}, or use lr_scheduler_type: cosine.",
                      ("lr_scheduler_type", "lr_scheduler_kwargs")))
    save = get("save_strategy") or "steps"
    best = bool(values.get("load_best_model_at_end"))
    if save == "best" and values.get("metric_for_best_model") is None and not best:
        found.append(("save_strategy='best' saves when metric_for_best_model improves, and metric_for_best_model is "
                      "not set: the trainer refuses it after the model loads. Fix: set metric_for_best_model: "
                      "reward (or another logged metric), or save_strategy: steps.",
                      ("save_strategy", "metric_for_best_model")))
    pad = values.get("pad_to_multiple_of")  # TRL 1.16 reads "auto" (this case only), "none"/"null" or int(value)
    if pad is not None and not (isinstance(pad, str) and (pad == "auto" or pad.lower() in ("none", "null"))):
        try:  # TRL's int() of a string ("+8", " 8" too); a YAML number must be an int
            number = int(pad) if isinstance(pad, str) or (isinstance(pad, int) and not isinstance(pad, bool)) else 0
        except ValueError:
            number = 0
        if number < 1:
            found.append((f"pad_to_multiple_of={pad!r} is not valid: TRL takes a whole number >= 1 of tokens, 'auto' "
                          "(lower case) or none. Fix: remove it (auto: 128 on Neuron, else no padding) or set e.g. 8.",
                          ("pad_to_multiple_of",)))
    found += _mapping_key_problems(values)
    return found


def trainer_warnings(values: Mapping[str, Any], user: Mapping[str, Any] | None = None) -> list[str]:
    """Trainer settings without effect in the recipe's run, one line each (arguments as `trainer_problems`)."""
    pushes = values.get("push_to_hub") is True or enum_value(values.get("push_to_hub_mode")) not in (None, "none")
    return [f"{name}={enum_value(values.get(name))!r} configures TRL's own push (at each save or when trainer.train "
            "ends), which the recipe turns off: it pushes once, after the adapter, the card and the plot are saved "
            f"locally (hub.push). Fix: remove {name}."
            for name in (("hub_strategy", "hub_always_push") if pushes else ())
            if (values if user is None else user).get(name) not in (None, False, "end")]  # end: the recipe's one push


def batch_dispatch_problems(values: Mapping[str, Any]) -> list[tuple[str, tuple[str, ...]]]:
    """The problems of ``accelerator_config``'s batch keys (read from a mapping, JSON, a JSON file's path, or the
    `AcceleratorConfig` ``TrainingArguments.__post_init__`` built). GRPO's batches are rows of text that every process
    draws for itself from TRL's `RepeatSampler` (accelerate 1.15, ``data_loader.py``): ``dispatch_batches`` has
    process 0 send them as tensors and fails at the first step (``concatenate`` / ``find_batch_size`` raise TypeError
    on a string), on one process too; ``split_batches`` divides each process's batch by the number of processes, so
    with N > 1 each trains 1/N of the completions the plan counts and some prompts are never drawn (measured on 2
    processes: 2 rows per micro-batch for 4, 5 of 8 prompts seen). Any value but None/False counts as set (accelerate
    reads 1 or "false" as true). ``gradient_accumulation_kwargs.num_steps``: transformers writes it over
    ``gradient_accumulation_steps`` (`Trainer.__init__`), or raises beside one above 1.

    Returns one ``(line, fields)`` per problem, the line naming the key, its value and the fix."""
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


def _scheduler_kwargs_problems(scheduler: str, kwargs: Any) -> list[tuple[str, tuple[str, ...]]]:
    """``lr_scheduler_kwargs`` keys the schedule's function does not take (transformers' `get_scheduler` passes them
    on: a TypeError at the first step), or that the trainer passes itself (the warmup and training steps)."""
    import inspect

    from transformers.optimization import TYPE_TO_SCHEDULER_FUNCTION
    from transformers.trainer_utils import SchedulerType

    try:
        params = inspect.signature(TYPE_TO_SCHEDULER_FUNCTION[SchedulerType(scheduler)]).parameters
    except (ValueError, KeyError):  # an unknown schedule is refused by its choices
        return []
    if not isinstance(kwargs, Mapping) or any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return []
    own = {"optimizer", "num_warmup_steps", "num_training_steps", "last_epoch"}
    takes = [name for name in params if name not in own]
    unknown = [key for key in kwargs if key not in takes]
    if not unknown or scheduler in ("constant", "constant_with_warmup"):  # those: refused as ignored (tables)
        return []
    return [(f"lr_scheduler_kwargs has keys lr_scheduler_type={scheduler!r} does not take: "
             f"{', '.join(map(repr, unknown))} (it takes {', '.join(takes) or 'none'}; warmup and training steps come "
             "from warmup_steps and the plan). Fix: remove or rename them.", ("lr_scheduler_kwargs",))]


def _mapping_key_problems(values: Mapping[str, Any]) -> list[tuple[str, tuple[str, ...]]]:
    """Keys of ``accelerator_config`` / ``transformers_continuous_batching_config`` their config class has no field
    for (a TypeError in ``__init__``, after the model loads), and ``model_init_kwargs`` keys the recipe sets from
    ModelConfig fields (:data:`MODEL_INIT_FIELDS`; the recipe's value would lose) or that TRL refuses beside a
    quantized base (``quantization_config``)."""
    import dataclasses

    from transformers.trainer_pt_utils import AcceleratorConfig

    classes = [("accelerator_config", AcceleratorConfig)]
    try:  # where TRL 1.16 imports it from (GRPOTrainer.__init__); older transformers have none
        from transformers.generation import ContinuousBatchingConfig

        classes.append(("transformers_continuous_batching_config", ContinuousBatchingConfig))
    except ImportError:
        pass
    found = []
    for name, cls in classes:
        unknown = sorted(set(as_mapping(name, values.get(name))) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            found.append((f"{name} has keys {cls.__name__} does not take: {', '.join(map(repr, unknown))} (its fields: "
                          f"{', '.join(f.name for f in dataclasses.fields(cls))}). Fix: remove or rename them.", (name,)))
    if as_mapping("accelerator_config", values.get("accelerator_config")).get("use_configured_state"):
        found.append(("accelerator_config.use_configured_state=True reuses an AcceleratorState built before the "
                      "config, which plan and the recipe never build: transformers refuses it. Fix: remove "
                      "use_configured_state (it is for a Python session that made its own Accelerator).",
                      ("accelerator_config",)))
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
    or an ``output_dir`` that is the adapter's folder (overwritten). Whether its base exists is the recipe's check.

    Raises:
        RunArgumentError: naming the field, the value and the fix."""
    from ..models.source import resolve_model_source

    name = values.get("model_name_or_path")
    if not isinstance(name, str) or not name:
        return
    try:
        source = resolve_model_source(name)
    except (ValueError, OSError):  # a folder that is neither a model nor an adapter: plan and the recipe report it
        return
    if not source.continued:
        return
    if not values.get("use_peft"):
        raise RunArgumentError(f"model_name_or_path={name!r} is an adapter of an earlier run, which this run would "
                               "continue, but use_peft is false. Fix: set use_peft: true to train the adapter further.")
    output_dir = values.get("output_dir")
    if isinstance(output_dir, str) and output_dir and Path(output_dir).expanduser().resolve() == Path(source.adapter):
        raise RunArgumentError(f"output_dir={output_dir!r} is the adapter folder being continued (model_name_or_path="
                               f"{name!r}); the new adapter would overwrite it. Fix: choose another output_dir.")
