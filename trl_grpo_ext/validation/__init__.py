"""Every bad input of a run refused before any weight loads: :func:`validate_run_args` (single values from the
tables of :mod:`.tables`, then every cross-field rule of :data:`.rules.RULES`), called by `plan` and the recipe on
the same four argument objects; `GRPOExtConfig.__post_init__` runs the rules of scope ``"run"``. Each refusal is one
line naming the field, the value and a fix; every problem is reported at once (:class:`~.problems.Problems`).

Modules: :mod:`.tables` (ranges, choices, exclusive pairs, settings that need another), :mod:`.user_values` (what the
user set), :mod:`.rules`, :mod:`.run`, :mod:`.rewards`, :mod:`.lora`, :mod:`.engines`, :mod:`.problems`. Importing
this package imports neither torch nor TRL.
"""

from ..config.checks import Range, RunArgumentError
from .lora import check_lora_targets, model_modules, peft_target_matches
from .rewards import check_reward_columns
from .rules import RULES, Rule, RunView
from .run import validate_run_args
from .tables import EXCLUSIVE, REQUIRES, UNCHECKED_NUMERIC
from .user_values import CHOICES, DEFAULTS, RANGES, UserValues, check_user_values, user_values_from_argv

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
    "RULES",
    "Rule",
    "RunView",
    "check_user_values",
    "check_reward_columns",
    "check_lora_targets",
    "model_modules",
    "peft_target_matches",
    "user_values_from_argv",
    "UserValues",
]
