"""`validate_run_args`: the single-value checks of a run's arguments, then every rule of `rules.RULES`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..config.checks import RunArgumentError
from ..config.engines import Engine
from .problems import Problems
from .rules import RunView, run_rules
from .user_values import UserValues, check_user_values, flatten_values


def validate_run_args(script_args: Any, training_args: Any, model_args: Any, push_args: Any, *,
                      user_values: Mapping[str, Any] | None = None, world_size: int = 1,
                      check_model: bool = True,
                      problems: Problems | None = None, engine: Engine | None = None,
                      user_checked: bool = False) -> dict[str, Any]:
    """Refuse every bad value and combination of a run's arguments before any weight loads, all at once.

    Args:
        script_args, training_args, model_args, push_args: the four argument objects, their twins, or mappings; absent
            fields take :data:`DEFAULTS`.
        user_values: the keys the user set (:func:`user_values_from_argv`); conflicts are judged on these.
        world_size: processes. check_model: check LoRA targets against the model. problems: record there instead
            of raising. engine: of ``plan --accelerate-config``. user_checked: the front door already checked
            ``user_values`` (`check_user_values`), so the single values are not checked again.

    Returns each rule's result by name (`rules.run_rules`).

    Raises:
        RunArgumentError: without ``problems``: one line per problem (a single one as its check raised it)."""
    own = problems is None
    problems = Problems() if own else problems
    user = UserValues(user_values or {})
    user.command_line_keys = getattr(user_values, "command_line_keys", frozenset())
    values = flatten_values(script_args, training_args, model_args, push_args)
    values.update({k: v for k, v in user.items() if k not in values})  # keys only the user values hold (plan)
    if not user_checked:  # the front door checked the keys the user set; the other values are defaults or
        check_user_values(values, problems=problems, user=user)  # derived from them (written by __post_init__)
    view = RunView(values, user, world_size, engine=engine, check_model=check_model)
    results = run_rules(view, problems)
    if own:
        problems.raise_if_any(RunArgumentError)
    return results
