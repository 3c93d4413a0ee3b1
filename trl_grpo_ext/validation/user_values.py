"""What the user set (the YAML mapping plus the command line), and the checks judged on those keys alone."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..checks import RunArgumentError, as_number, check_choice, closest_choice
from .problems import Problems
from .tables import CHOICES, EXCLUSIVE, RANGES, enum_value, is_on, typed_value


class UserValues(dict):
    """The keys a user set and their values (a `dict`), with ``command_line_keys``: those given on the command line."""

    command_line_keys: frozenset = frozenset()


def user_values_from_argv(argv: Sequence[str], parser: argparse.ArgumentParser | None = None) -> UserValues:
    """The keys the user set and their values: the ``--config`` YAML mapping, overridden by command-line arguments.

    Args:
        argv (`list[str]`): the arguments as given to TRL's ``TrlParser.parse_args_and_config``.
        parser (`argparse.ArgumentParser`, *optional*): the parser that will read ``argv`` (a ``TrlParser``). The
            command line is parsed into a namespace pre-filled with a sentinel, so exactly the destinations an
            argument wrote are kept (abbreviations, ``--no_x`` flags and dashed aliases included), typed as the
            parser types them. Without a parser, ``--key value`` / ``--key=value`` tokens are read as strings.

    Returns:
        `UserValues`: field name -> value, only for keys the user set (the YAML's ``env`` key excluded); its
        ``command_line_keys`` are the keys the command line set.

    Raises:
        RunArgumentError: the YAML file is not a mapping. (A missing file is reported by the caller.)
    """
    import yaml

    args = list(argv)
    values = UserValues()
    if "--config" in args:
        index = args.index("--config")
        path = args[index + 1] if index + 1 < len(args) else None
        del args[index:index + 2]
        if path is not None and Path(path).is_file():
            data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
            if data is not None and not isinstance(data, dict):
                raise RunArgumentError(f"--config {path}: expected a mapping of field names to values, got "
                                       f"{type(data).__name__}. Fix: write one `key: value` per line.")
            values.update({k: v for k, v in (data or {}).items() if k != "env"})
    if parser is None:
        cli: dict[str, Any] = {}
        i = 0
        while i < len(args):
            token = args[i]
            if token.startswith("--"):
                key, eq, value = token[2:].partition("=")
                if not eq and i + 1 < len(args) and not args[i + 1].startswith("--"):
                    value, i = args[i + 1], i + 1
                cli[key.replace("-", "_")] = value if (eq or value) else True
            i += 1
    else:
        sentinel = object()
        namespace = argparse.Namespace(**{a.dest: sentinel for a in parser._actions if a.dest != "help"})
        parsed, _ = parser.parse_known_args(args, namespace=namespace)
        cli = {k: v for k, v in vars(parsed).items() if v is not sentinel}
    values.update(cli)
    values.command_line_keys = frozenset(cli)
    return values


def check_user_values(user_values: Mapping[str, Any], world_size: int = 1, problems: Problems | None = None) -> None:
    """Check what the user set, before any dataclass is built: ranges, choices, exclusive pairs, conflicts.

    Args:
        user_values (`Mapping[str, Any]`): field -> value for the keys the user set (see
            :func:`user_values_from_argv`).
        world_size (`int`, defaults to `1`): processes, for the quantity conflicts.
        problems (`Problems`, *optional*): record each problem there and return; without it, raise.

    Raises:
        RunArgumentError: without ``problems``: every problem found (one line each, naming the field(s), the
            value(s) and a fix; a single problem as the error its check raised).
    """
    own = problems is None
    problems = Problems() if own else problems
    for name, value in user_values.items():
        if name in RANGES:
            problems.check(RANGES[name].check, name, value, fields=[name])
        if name in CHOICES and value is not None and enum_value(value) not in CHOICES[name]:
            close = closest_choice(value, CHOICES[name])
            problems.check(check_choice, name, enum_value(value), CHOICES[name], fields=[name],
                           fix=f"Fix: {name}: {close}" if close else f"Fix: set {name} to one of these.")
    for a, b, fix in EXCLUSIVE:
        if is_on(user_values.get(a)) and is_on(user_values.get(b)) and not problems.blocked((a, b)):
            problems.add(f"{a}={user_values[a]!r} and {b}={user_values[b]!r} cannot both be set. Fix: {fix}", (a, b))
    quantities = quantity_keys(user_values)
    problems.check(_check_quantity_conflicts, user_values, world_size, fields=quantities)
    advantages = [n for n in ADVANTAGE_FIELDS if user_values.get(n) is not None]
    problems.check(_check_advantage_conflicts, user_values, fields=advantages)
    if own:
        problems.raise_if_any(RunArgumentError)


#: The fields the advantage settings resolve from (their conflicts are judged together).
ADVANTAGE_FIELDS = ("advantage_preset", "advantage_baseline", "advantage_std_scaling", "advantage_epsilon",
                    "advantage_std_kind", "scale_rewards", "loss_type")


def quantity_keys(user_values: Mapping[str, Any]) -> list[str]:
    """The batch and stop fields (`plan.resolve`'s inputs) the user set: what the quantity conflicts are judged on."""
    from ..plan.resolve import _INPUT_FIELDS

    return [k for k in user_values if k in _INPUT_FIELDS and user_values[k] is not None]


def resolve_user_quantities(user_values: Mapping[str, Any], world_size: int) -> dict:
    """TRL's batch and stop fields as the quantity keys the user set resolve them (`plan.resolve_trl_fields`, with
    conflicts judged on the set keys only; TRL's defaults for the rest).

    Raises:
        RunArgumentError: invalid or conflicting quantities (one line: field, value, fix).
    """
    from ..plan.resolve import _INPUT_FIELDS, QuantityError, resolve_trl_fields

    given = {k: typed_value(v) for k, v in user_values.items() if k in _INPUT_FIELDS and v is not None}
    try:
        return resolve_trl_fields(given, world_size, set_fields=set(given))
    except QuantityError as err:
        raise RunArgumentError(str(err)) from None


def _check_quantity_conflicts(user_values: Mapping[str, Any], world_size: int) -> None:
    """Our batch/stop fields next to the raw TRL fields they write: judged on the keys the user set."""
    resolve_user_quantities(user_values, world_size)


def _check_advantage_conflicts(user_values: Mapping[str, Any]) -> None:
    """The advantage preset, `scale_rewards`, `loss_type` and our advantage fields: conflicts between set keys."""
    from ..advantage_settings import AdvantageConfigError, resolve_advantage_settings

    if not any(user_values.get(n) is not None for n in ADVANTAGE_FIELDS):
        return
    scale_set = user_values.get("scale_rewards") is not None
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the config's own resolution warns once, later
            resolve_advantage_settings(
                preset=user_values.get("advantage_preset"),
                scale_rewards=user_values["scale_rewards"] if scale_set else "group",
                advantage_baseline=user_values.get("advantage_baseline"),
                advantage_std_scaling=user_values.get("advantage_std_scaling"),
                advantage_epsilon=as_number(user_values.get("advantage_epsilon")) if user_values.get(
                    "advantage_epsilon") is not None else None,
                advantage_std_kind=user_values.get("advantage_std_kind"),
                loss_type=user_values.get("loss_type"),
                # every field the user set counts as explicit, whatever its value: no comparison with a default
                defaults={"scale_rewards": None if scale_set else "group"},
            )
    except AdvantageConfigError as err:
        raise RunArgumentError(str(err)) from None
