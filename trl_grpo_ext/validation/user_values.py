"""What the user set and its single values: the tables read from the recipe's dataclasses themselves
(`RECIPE_DATACLASSES`: declared ranges and choices, argparse choices, defaults, types), the checks of each value the
user set (`check_user_values`, `check_yaml_types`), the keys of the command line, and `validate_run_args`: those
checks, then every rule of `rules.RULES`."""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from ..config.checks import (
    Range,
    RunArgumentError,
    as_number,
    check_choice,
    choice_from_yaml,
    declared_checks,
)
from ..config.engines import Engine
from ..config.recipe_args import RECIPE_DATACLASSES
from .mappings import read_mapping
from .problems import Problems
from .rules import RunView, run_rules
from .tables import OTHER_RANGES, TRL_CHOICES, TRL_RANGES, enum_value


def _plain(value: Any) -> Any:
    return [_plain(v) for v in value] if isinstance(value, (list, tuple)) else enum_value(value)


_INIT = [f for cls in RECIPE_DATACLASSES for f in dataclasses.fields(cls) if f.init]
_DECLARED = {name: found for cls in RECIPE_DATACLASSES for name, found in declared_checks(cls).items()}
#: Every field's dataclass default (the first class holding a name gives it; enum members as their values).
DEFAULTS: dict[str, Any] = {}
_ARGPARSE_CHOICES: dict[str, tuple] = {}
for _f in _INIT:
    if "choices" in _f.metadata:
        _ARGPARSE_CHOICES.setdefault(_f.name, tuple(_plain(list(_f.metadata["choices"]))))
    if _f.default is not dataclasses.MISSING:
        DEFAULTS.setdefault(_f.name, _plain(_f.default))
    elif _f.default_factory is not dataclasses.MISSING:
        DEFAULTS.setdefault(_f.name, _plain(_f.default_factory()))
#: Fields typed Optional (``str | None``): YAML's null is a value there, whatever the default.
NULLABLE = frozenset(f.name for f in _INIT if "None" in str(f.type) or "Optional" in str(f.type))
#: Fields typed ``dict`` (a JSON string too; for `mappings.PATH_FIELDS` a file's path).
MAPPING_FIELDS = frozenset(f.name for f in _INIT if "dict" in str(f.type))
#: Range of every numeric field read by this package: TRL's, ours (declared on the fields), the recipe's and LoRA's.
RANGES: dict[str, Range] = {**TRL_RANGES, **{n: c["range"] for n, c in _DECLARED.items() if "range" in c},
                            **OTHER_RANGES}
#: Allowed values of string fields: every argparse ``choices`` (the command line enforces them, a YAML value reaches
#: the dataclass directly), TRL's, ours (declared on the fields).
CHOICES: dict[str, tuple[str, ...]] = {**_ARGPARSE_CHOICES, **TRL_CHOICES,
                                       **{n: c["choices"] for n, c in _DECLARED.items() if "choices" in c}}


def _kind(hint: Any) -> type | tuple | None:
    """``bool``/``int``/``float``/``str`` for a scalar field (Optional allowed), ``(list, item type)`` for a list of
    ``str`` or ``float``; None for anything else (unions, mappings, enums)."""
    args = [a for a in typing.get_args(hint) if a is not type(None)] \
        if typing.get_origin(hint) in (typing.Union, types.UnionType) else [hint]
    if len(args) != 1:
        return None
    if args[0] in (bool, int, float, str):
        return args[0]
    item = typing.get_args(args[0])
    return (list, item[0]) if typing.get_origin(args[0]) is list and item and item[0] in (str, float) else None


#: The type a YAML value of each field must have (`_kind`), from the recipe's dataclasses.
KINDS = {f.name: kind for cls in reversed(RECIPE_DATACLASSES) for hints in [typing.get_type_hints(cls)]
         for f in dataclasses.fields(cls) if f.init and (kind := _kind(hints[f.name])) is not None}


def flatten_values(*objects: Any) -> dict[str, Any]:
    """One mapping of field -> value: :data:`DEFAULTS`, updated by each object's fields in order (a mapping, or an
    object's ``vars``; ``None`` skipped)."""
    values = dict(DEFAULTS)
    for obj in objects:
        if obj is not None:
            values.update(obj if isinstance(obj, Mapping) else vars(obj))
    return values


def yaml_choices(config: dict) -> dict:
    """``config`` with each YAML 1.1 boolean of a choice field read as the word written (`checks.choice_from_yaml`)."""
    return {key: choice_from_yaml(value, CHOICES[key]) if key in CHOICES else value for key, value in config.items()}


def check_user_values(values: Mapping[str, Any], problems: Problems) -> None:
    """The single-value checks of ``values`` (the keys the user set, before any dataclass is built, so that
    ``learning_rate: fast`` gets its range and a fix): YAML's null for a field that needs a value, a range, a mapping,
    a choice (YAML 1.1 booleans already read as words: `yaml_choices`). Into ``problems``."""
    for name, value in list(values.items()):
        if (name in RANGES or name in CHOICES) and value is None and DEFAULTS.get(name) is not None \
                and name not in NULLABLE:
            problems.add(f"{name}=None is not valid: the field needs a value. Fix: remove {name} (default "
                         f"{DEFAULTS[name]!r}) or give a value.", (name,))
        elif name in RANGES and not isinstance(value, (list, tuple, dict)):
            problems.check(RANGES[name].check, name, value, fields=[name])
        elif name in MAPPING_FIELDS:
            problems.check(read_mapping, name, value, fields=[name])
        if name in CHOICES and value is not None:
            problems.check(check_choice, name, enum_value(value), CHOICES[name], fields=[name],
                           fix=f"Fix: set {name} to one of these.")


_WORDS = {bool: "true or false", int: "a whole number", float: "a number", str: "a string",
          (list, str): "a list of strings", (list, float): "a list of numbers"}


def _fits(value: Any, kind: Any) -> bool:
    if isinstance(kind, tuple):
        return isinstance(value, list) and all(_fits(item, kind[1]) for item in value)
    return isinstance(value, (int, float) if kind is float else kind) and (kind is bool or not isinstance(value, bool))


def check_yaml_types(config: Mapping[str, Any], problems: Problems) -> dict:
    """``config`` (the YAML mapping) without the values of a type their field cannot hold (`KINDS`), each recorded in
    ``problems``: TRL's parser sets the file's values as argparse defaults, which argparse types only when they are
    strings (``lora_modules_to_save: lm_head`` reached PEFT as letters, ``lora_r: 8.0`` as a float). A string is left
    to argparse (``lora_target_modules`` also takes PEFT's ``all-linear``), a number string in a list of numbers is
    read as one (PyYAML reads ``5e-1`` as a string), a choice field's value to its check, and TRL reads
    ``scale_rewards: true/false`` itself."""
    out = dict(config)
    for name, value in config.items():
        kind = KINDS.get(name)
        if kind is None or value is None or name in CHOICES or name == "scale_rewards" and isinstance(value, bool) \
                or isinstance(value, str) and (not isinstance(kind, tuple) or name == "lora_target_modules"):
            continue
        if kind == (list, float) and isinstance(value, list):
            value = out[name] = [as_number(v) if isinstance(v, str) and as_number(v) is not None else v for v in value]
        if not _fits(value, kind):
            fix = f'quote it: {name}: "{value}"' if kind is str else \
                f"write [{value}]" if isinstance(kind, tuple) and not isinstance(value, list) else \
                f"write {_WORDS[kind]}" + (" without a decimal point" if kind is int else "")
            problems.add(f"{name}={value!r} must be {_WORDS[kind]}. Fix: {fix}.", (name,))
            del out[name]
    return out


def user_values_from_argv(argv: Sequence[str], parser: argparse.ArgumentParser) -> dict[str, Any]:
    """The keys the command line ``argv`` sets (``--config`` already split off by the front door), typed: ``argv`` is
    parsed by ``parser`` (the one that will read it) into a namespace of sentinels, so that exactly the destinations
    an argument wrote are kept."""
    sentinel = object()
    namespace = argparse.Namespace(**{a.dest: sentinel for a in parser._actions if a.dest != "help"})
    parsed, _ = parser.parse_known_args(list(argv), namespace=namespace)
    return {k: v for k, v in vars(parsed).items() if v is not sentinel}


def validate_run_args(script_args: Any, training_args: Any, model_args: Any, push_args: Any, *,
                      user_values: Mapping[str, Any] | None = None, world_size: int = 1, check_model: bool = True,
                      problems: Problems | None = None, engine: Engine | None = None) -> dict[str, Any]:
    """Refuse every bad value and combination of a run's arguments before any weight loads, all at once.

    Args:
        script_args, training_args, model_args, push_args: the four argument objects, their twins, or mappings;
            absent fields take :data:`DEFAULTS`. user_values: the keys the user set (conflicts are judged on these).
        world_size: processes. check_model: check LoRA targets against the model. problems: record there instead
            of raising. engine: of ``plan --accelerate-config``. The single values are checked here only without
            ``user_values`` (the front door checks those itself, before it parses them).

    Returns each rule's result by name (`run_rules`). Raises RunArgumentError: without ``problems``, one line per
    problem (a single one as its check raised it)."""
    own = problems is None
    problems = Problems() if own else problems
    user = yaml_choices(dict(user_values or {}))
    values = yaml_choices(flatten_values(script_args, training_args, model_args, push_args))
    values.update({k: v for k, v in user.items() if k not in values})  # keys only the user values hold (plan)
    if user_values is None:  # the other values are defaults or derived from the user's (written by __post_init__)
        check_user_values(values, problems)
    results = run_rules(RunView(values, user, world_size, engine=engine, check_model=check_model, defaults=DEFAULTS),
                        problems)
    if own:
        problems.raise_if_any(RunArgumentError)
    return results
