"""What the user set (the YAML mapping plus the command line), the single-value checks of those keys, and the tables
read from the recipe's dataclasses themselves (`RECIPE_DATACLASSES`: declared checks, argparse choices, defaults)."""

from __future__ import annotations

import argparse
import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..config.checks import Range, RunArgumentError, check_choice, choice_from_yaml, closest_choice, declared_checks
from ..config.recipe_args import RECIPE_DATACLASSES
from .mappings import read_mapping
from .problems import Problems
from .tables import DEFAULT_FIELDS, OTHER_RANGES, TRL_CHOICES, TRL_RANGES, enum_value


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return enum_value(value)


def _field_tables() -> tuple[dict, dict, dict]:
    """``(declared checks, argparse choices, defaults)`` of the init fields of `RECIPE_DATACLASSES` (the first class
    holding a name gives its choices and default; enum members as their values)."""
    declared: dict[str, dict[str, Any]] = {}
    choices: dict[str, tuple] = {}
    defaults: dict[str, Any] = {}
    for cls in RECIPE_DATACLASSES:
        declared.update(declared_checks(cls))
        for f in dataclasses.fields(cls):
            if not f.init:
                continue
            if "choices" in f.metadata:
                choices.setdefault(f.name, tuple(_plain(list(f.metadata["choices"]))))
            if f.default is not dataclasses.MISSING:
                defaults.setdefault(f.name, _plain(f.default))
            elif f.default_factory is not dataclasses.MISSING:
                defaults.setdefault(f.name, _plain(f.default_factory()))
    return declared, choices, defaults


_DECLARED, _ARGPARSE_CHOICES, FIELD_DEFAULTS = _field_tables()
#: Fields typed Optional (``str | None``): YAML's null is a value there, whatever the default.
NULLABLE = frozenset(f.name for cls in RECIPE_DATACLASSES for f in dataclasses.fields(cls)
                     if "None" in str(f.type) or "Optional" in str(f.type))
#: Fields typed ``dict``: the value is a mapping; where the type allows ``str`` too, its JSON (TrainingArguments parses
#: a string that starts with "{" in ``__post_init__``), and for `mappings.PATH_FIELDS` a JSON file's path.
MAPPING_FIELDS = {f.name: "str" in re.sub(r"\[.*?\]", "", str(f.type)) for cls in RECIPE_DATACLASSES
                  for f in dataclasses.fields(cls) if f.init and "dict" in str(f.type)}  # `dict[str, bool]`: no str
#: Range of every numeric field read by this package: TRL's, ours (declared on the fields), the recipe's and LoRA's.
RANGES: dict[str, Range] = {**TRL_RANGES, **{n: c["range"] for n, c in _DECLARED.items() if "range" in c},
                            **OTHER_RANGES}
#: Allowed values of string fields: every argparse ``choices`` (the command line enforces them, a YAML value reaches
#: the dataclass directly), TRL's, ours (declared on the fields).
CHOICES: dict[str, tuple[str, ...]] = {**_ARGPARSE_CHOICES, **TRL_CHOICES,
                                       **{n: c["choices"] for n, c in _DECLARED.items() if "choices" in c}}
#: The dataclass defaults of the fields the cross-checks read (`tables.DEFAULT_FIELDS`).
DEFAULTS: dict[str, Any] = {name: FIELD_DEFAULTS[name] for name in DEFAULT_FIELDS}


def flatten_values(*objects: Any) -> dict[str, Any]:
    """One mapping of field -> value: :data:`DEFAULTS`, updated by each object's fields in order (a mapping, or an
    object's ``vars``; ``None`` skipped)."""
    values = dict(DEFAULTS)
    for obj in objects:
        if obj is not None:
            values.update(obj if isinstance(obj, Mapping) else vars(obj))
    return values


class UserValues(dict):
    """The keys a user set and their values, with ``command_line_keys``: those given on the command line."""

    command_line_keys: frozenset = frozenset()


def user_values_from_argv(argv: Sequence[str], parser: argparse.ArgumentParser) -> UserValues:
    """The keys the command line ``argv`` sets (``--config`` already split off by the front door), typed: ``argv`` is
    parsed by ``parser`` (the one that will read it) into a namespace of sentinels, so that exactly the destinations
    an argument wrote are kept; all of them are ``command_line_keys``."""
    sentinel = object()
    namespace = argparse.Namespace(**{a.dest: sentinel for a in parser._actions if a.dest != "help"})
    parsed, _ = parser.parse_known_args(list(argv), namespace=namespace)
    values = UserValues({k: v for k, v in vars(parsed).items() if v is not sentinel})
    values.command_line_keys = frozenset(values)
    return values


def check_user_values(values: Mapping[str, Any], problems: Problems | None = None, user: dict | None = None) -> None:
    """The single-value checks (ranges, choices) of ``values`` (the keys the user set, before any dataclass is built,
    so that ``learning_rate: fast`` gets its range and a fix; or every value of arguments built in Python): YAML's
    null for a field that needs a number, a range, a choice (a YAML 1.1 boolean read as the word meant, written back
    into ``values`` and ``user``). Into ``problems``, else raised."""
    own = problems is None
    problems = Problems() if own else problems
    for name, value in list(values.items()):
        if (name in RANGES or name in CHOICES) and value is None and FIELD_DEFAULTS.get(name) is not None \
                and name not in NULLABLE:
            problems.add(f"{name}=None is not valid: the field needs a value. Fix: remove {name} (default "
                         f"{FIELD_DEFAULTS[name]!r}) or give a value.", (name,))
        elif name in RANGES and not isinstance(value, (list, tuple, dict)):
            problems.check(RANGES[name].check, name, value, fields=[name])
        elif name in MAPPING_FIELDS:
            problems.check(read_mapping, name, value, MAPPING_FIELDS[name], fields=[name])
        value = choice_from_yaml(enum_value(value), CHOICES.get(name, ()))
        if name in CHOICES and value is not None:
            close = closest_choice(value, CHOICES[name])
            valid = problems.check(check_choice, name, value, CHOICES[name], fields=[name],
                                   fix=f"Fix: {name}: {close}" if close else f"Fix: set {name} to one of these.")
            if valid is not None and isinstance(values[name], bool):
                for mapping in (values, user if user is not None else {}):
                    if name in mapping:
                        mapping[name] = valid
    if own:
        problems.raise_if_any(RunArgumentError)


def without_stray_values(args: Sequence[str], parser: argparse.ArgumentParser) -> tuple[list[str], list[str]]:
    """``args`` without the words after a one-value option's value (``--report_to wandb tensorboard``: argparse
    keeps ``wandb`` and TRL's parser then refuses ``['tensorboard']`` naming no field), and one problem line per
    option that had them; a negative value is joined to its option (``--learning_rate=-1e-5``), which argparse
    would otherwise read as an option."""
    single = {opt: a.nargs for a in parser._actions if a.nargs in (None, "?") for opt in a.option_strings}
    out, problems, i = [], [], 0
    while i < len(args):
        token = args[i]
        out.append(token)
        i += 1
        flag, equals, value = token.partition("=")
        if flag in single and (equals or (i < len(args) and not args[i].startswith("--"))):
            if not equals:  # --key value (a flag's value is optional: --use_peft alone is true)
                value, i = args[i], i + 1
                if value.startswith("-"):  # a negative number: argparse reads -1e-5 as an option, --key=-1e-5 not
                    out[-1] = f"{flag}={value}"
                else:
                    out.append(value)
            token = flag
            extra = []
            while i < len(args) and not args[i].startswith("--"):
                extra.append(args[i])
                i += 1
            if extra:
                key = token[2:].replace("-", "_")
                fix = ("give one value: true or false" if single[flag] == "?" else
                       f"give one value, or write the list in the YAML ({key}: [{', '.join([value, *extra])}]) when "
                       "the field takes a list")
                problems.append(f"{token} takes one value on the command line, but got {[value, *extra]!r}. Fix: "
                                f"{fix}.")
    return out, problems

