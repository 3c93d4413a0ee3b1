"""What the user set (the YAML mapping plus the command line), and the single-value checks of those keys."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..config.checks import RunArgumentError, check_choice, closest_choice
from .problems import Problems
from .tables import CHOICES, RANGES, enum_value


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


def check_user_values(user_values: Mapping[str, Any], problems: Problems | None = None) -> None:
    """The single-value checks (ranges, choices) of the keys the user set, before any dataclass is built, so that a
    value the parser cannot read (``learning_rate: fast``) is answered with its range and a fix.

    Raises:
        RunArgumentError: without ``problems``: every problem found (one line each, naming the field, the value and a
            fix; a single problem as the error its check raised).
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
    if own:
        problems.raise_if_any(RunArgumentError)
