"""Every bad input of a run refused before any weight loads (:func:`validate_run_args`: the single values, then
every rule of :data:`.rules.RULES`), by `plan` and the recipe on the same arguments; one line per problem, all at
once. Layout: docs/architecture.md."""

from ..config.checks import Range, RunArgumentError
from .lora import check_lora_targets, model_modules, peft_target_matches
from .rewards import check_reward_columns
from .rules import RULES
from .user_values import CHOICES, DEFAULTS, RANGES, check_user_values, user_values_from_argv, validate_run_args

__all__ = [
    "RunArgumentError", "Range", "RANGES", "CHOICES", "DEFAULTS", "validate_run_args", "RULES", "check_user_values",
    "check_reward_columns", "check_lora_targets", "model_modules", "peft_target_matches", "user_values_from_argv"
]
