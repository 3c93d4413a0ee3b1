"""`validate_run_args`: the single-value checks of a run's arguments, then every rule of `rules.RULES`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..config.checks import RunArgumentError, check_choice, choice_from_yaml
from ..config.engines import Engine
from .problems import Problems
from .rules import RunView, run_rules
from .tables import enum_value
from .user_values import CHOICES, FIELD_DEFAULTS, RANGES, UserValues, flatten_values


def validate_run_args(script_args: Any, training_args: Any, model_args: Any, push_args: Any, *,
                      user_values: Mapping[str, Any] | None = None, world_size: int = 1,
                      dataset_columns: Sequence[str] | None = None, check_model: bool = True,
                      problems: Problems | None = None, engine: Engine | None = None,
                      user_checked: bool = False) -> None:
    """Refuse every bad value and combination of a run's arguments before any weight loads, all at once.

    Args:
        script_args, training_args, model_args, push_args: the four argument objects, their twins, or mappings; absent
            fields take :data:`DEFAULTS`.
        user_values: the keys the user set (:func:`user_values_from_argv`); conflicts are judged on these.
        world_size: processes. dataset_columns: the training dataset's columns (else known only for the embedded and
            GSM8K-format datasets). check_model: check LoRA targets against the model. problems: record there instead
            of raising. engine: of ``plan --accelerate-config``. user_checked: the front door already checked
            ``user_values`` (a value that reached the arguments unchanged is not checked again).

    Raises:
        RunArgumentError: without ``problems``: one line per problem (a single one as its check raised it)."""
    own = problems is None
    problems = Problems() if own else problems
    user = UserValues(user_values or {})
    user.command_line_keys = getattr(user_values, "command_line_keys", frozenset())
    values = flatten_values(script_args, training_args, model_args, push_args)
    values.update({k: v for k, v in user.items() if k not in values})  # keys only the user values hold (plan)
    def checked(name: str) -> bool:
        return user_checked and user.get(name) is not None and user[name] is values.get(name)

    for name, rng in RANGES.items():
        if checked(name):
            continue
        if user.get(name, 0) is None and FIELD_DEFAULTS.get(name) is not None:  # YAML's null for a number
            problems.add(f"{name}=None is not valid: the field needs a value. Fix: remove {name} (default "
                         f"{FIELD_DEFAULTS[name]!r}) or give a value.", (name,))
            continue
        if name in values and not isinstance(values[name], (list, tuple, dict)):
            problems.check(rng.check, name, values[name], fields=[name])
    for name, choices in CHOICES.items():
        value = choice_from_yaml(enum_value(values.get(name)), choices)  # YAML's `off` (False) is "off"
        if name in values and value is not None and not checked(name):
            valid = problems.check(check_choice, name, value, choices, fields=[name])
            if valid is not None:
                values[name] = valid
                if isinstance(user.get(name), bool):
                    user[name] = valid
    view = RunView(values, user, world_size, engine=engine, dataset_columns=dataset_columns, check_model=check_model)
    run_rules(view, problems)
    if own:
        problems.raise_if_any(RunArgumentError)
