"""Every bad input of a run refused before any weight loads, by kind rather than case by case.

`validate_run_args` is called by the recipe's argument stage (`launch.parse_recipe_args`) and by `trl-grpo-ext plan`
on the same four argument objects (`RecipeArguments`, `GRPOExtConfig`, `trl.ModelConfig`, `HubPushArguments`, or
namespaces holding the keys a YAML file sets). Each refusal is a :class:`RunArgumentError` (a `ValueError`) whose one
line names the field, the value and a fix. Every check runs and every problem is reported at once (the collector
:class:`~.problems.Problems`: several problems are one error with one line each in its ``problems``); a check that
reads a field already refused is skipped, as it would restate that problem. The kinds of check, each driven by a
table below:

- :data:`RANGES` and :data:`CHOICES`: the range of every numeric field that this package, TRL 1.16, PEFT or
  transformers 5 reads, and the allowed values of the string fields that would otherwise fail after the model loads
  (or at the first step). ``tests/test_validation.py`` checks that every numeric field of the four dataclasses is
  in :data:`RANGES` or in :data:`UNCHECKED_NUMERIC` with the reason.
- :data:`EXCLUSIVE`: fields that cannot both be on (both are named).
- :data:`REQUIRES`: fields that only take effect under another setting (``lora_r`` needs ``use_peft``, ...): set
  without it, they would be silently ignored.
- Conflicts between our fields and the TRL fields they write (``micro_batch_size`` and
  ``per_device_train_batch_size``, ``advantage_preset`` and ``loss_type``, ...) are judged by whether the *user set*
  both keys (`user_values`: the YAML mapping plus the command-line overrides, see :func:`user_values_from_argv`),
  never by comparing a value with its default: ``per_device_train_batch_size: 8`` is refused next to
  ``micro_batch_size: 4`` although 8 is TRL's default.
- Combinations: evaluation without a test split; `multi_objective_aggregation: normalize_then_sum` (TRL's fixed
  per-reward formula) with advantage settings it would ignore; reward parameters against run settings
  (`soft_overlong`, `length`); the optional packages each selected reward needs (its ``required_packages``); the
  dataset columns each reward reads (its ``required_columns`` and the named arguments of its callable that only a
  column can fill, :func:`check_reward_columns`); LoRA target modules
  against the module names of the model, built on the meta device from its config (:func:`check_lora_targets`).

The package, by concern: :mod:`.tables` (the tables, and reading a run's values), :mod:`.user_values` (what the
user set, from argv and YAML, and the checks on those keys), :mod:`.run` (:func:`validate_run_args` and the run-level
combinations), :mod:`.rewards` (reward parameters, packages and dataset columns), :mod:`.lora` (LoRA targets against
the model's module names), :mod:`.problems` (the collector).

Importing this package imports neither torch nor TRL (`plan` stays fast). Only :func:`model_modules` imports torch
and transformers, the first time it meets a model config: the module names are then cached on disk.
"""

from ..checks import Range, RunArgumentError
from .lora import check_lora_targets, model_modules, peft_target_matches
from .rewards import check_reward_columns
from .run import validate_run_args
from .tables import CHOICES, DEFAULTS, EXCLUSIVE, RANGES, REQUIRES, UNCHECKED_NUMERIC
from .user_values import UserValues, check_user_values, user_values_from_argv

__all__ = [
    "RunArgumentError",
    "Range",
    "RANGES",
    "CHOICES",
    "EXCLUSIVE",
    "REQUIRES",
    "DEFAULTS",
    "UNCHECKED_NUMERIC",
    "validate_run_args",
    "check_user_values",
    "check_reward_columns",
    "check_lora_targets",
    "model_modules",
    "peft_target_matches",
    "user_values_from_argv",
    "UserValues",
]
