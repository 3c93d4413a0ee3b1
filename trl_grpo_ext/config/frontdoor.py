"""The front door: every command (`plan`, `train`, `eval`, the recipe) reads a run's config here, through TRL's
argument parser, every problem reported at once, one line each (docs/configuration.md)."""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import functools
import os
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from .checks import world_size_from_env
from .keymap import cli_keys, translate

CONFIG_SUFFIXES = (".yaml", ".yml")


class ConfigError(ValueError):
    """A config the front door refuses: one line per problem (several: listed in ``problems``)."""


@dataclass
class RunArgs:
    """A run's four dataclasses (or twins); ``given``: the keys the user set; ``problems``: the collector while the
    front door's ``checks`` run; ``warnings``: settings without effect, one line each."""

    script_args: Any
    training_args: Any
    model_args: Any
    push_args: Any
    given: frozenset
    config_path: str | None
    user_values: dict | None = None
    problems: Any = None
    warnings: list = field(default_factory=list)

    def __iter__(self):  # script_args, training_args, model_args, push_args = run
        return iter((self.script_args, self.training_args, self.model_args, self.push_args))


def recipes_dir() -> Path:
    """The recipes folder: package data in a wheel, ``recipes/`` in a checkout. Raises FileNotFoundError if neither."""
    here = Path(__file__).resolve().parent.parent  # trl_grpo_ext/, this module being in trl_grpo_ext/config/
    for candidate in (here / "recipes", here.parent / "recipes"):
        if (candidate / "configs").is_dir():
            return candidate
    raise FileNotFoundError(f"no recipes folder next to {here} (a broken install? reinstall trl-grpo-ext)")


def shipped_configs(kind: str = "configs") -> dict[str, Path]:
    """The shipped configs of ``kind`` (``"configs"`` or ``"accelerate_configs"``) by name."""
    folder = recipes_dir() / kind
    return {p.stem: p for p in sorted(folder.iterdir()) if p.suffix in CONFIG_SUFFIXES}


def resolve_config(name_or_path: str, kind: str = "configs") -> Path:
    """A config file from a path or a shipped name (``tiny_cpu``, ``tiny_cpu.yaml``).

    Raises:
        ConfigError: neither; the message lists the shipped names."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    shipped = shipped_configs(kind)
    stem = path.name[: -len(path.suffix)] if path.suffix in CONFIG_SUFFIXES else path.name
    if str(path.parent) in (".", "") and stem in shipped:
        return shipped[stem]
    close = difflib.get_close_matches(stem, list(shipped), n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    flag = "--config" if kind == "configs" else "--accelerate_config"
    raise ConfigError(f"{flag} {name_or_path!r}: no such file and no shipped config of that name.{hint} "
                      f"Shipped: {', '.join(shipped)}.")


def dataclass_types(light: bool) -> tuple[type, ...]:
    """``(RecipeArguments, GRPOExtConfig, ModelConfig, HubPushArguments)``, or with ``light`` their twins: plain
    dataclasses with the same init fields read from the installed classes, without ``__post_init__``."""
    from .recipe_args import RECIPE_DATACLASSES

    return _twins() if light else RECIPE_DATACLASSES


@functools.lru_cache(maxsize=1)
def _twins() -> tuple[type, ...]:
    import typing

    from .recipe_args import RECIPE_DATACLASSES

    twins = []
    for cls in RECIPE_DATACLASSES:
        hints = typing.get_type_hints(cls)
        spec = [(f.name, hints[f.name], dataclasses.field(default=f.default, default_factory=f.default_factory,
                                                         metadata=f.metadata))
                for f in dataclasses.fields(cls) if f.init]
        twins.append(dataclasses.make_dataclass(cls.__name__, spec, repr=False, eq=False))
    return tuple(twins)


def hf_argument_parser(types_: tuple[type, ...]):
    """TRL's ``HfArgumentParser`` (the base of ``TrlParser``) over ``types_`` (`_trl_compat.hf_argparser_module`)."""
    from .._trl_compat import hf_argparser_module

    module = hf_argparser_module()
    if module is None:
        raise ConfigError("TRL is not installed: pip install trl-grpo-ext (which depends on trl).")
    return module.HfArgumentParser(types_, exit_on_error=False)


def _split_config(argv: list[str]) -> tuple[str | None, list[str]]:
    """``(--config's value, the other arguments)``, ``--config=PATH`` too (a second one is an unknown key).
    ConfigError without a value."""
    found = [i for i, a in enumerate(argv) if a.split("=", 1)[0] == "--config"]
    if not found:
        return None, argv
    i, inline = found[0], "=" in argv[found[0]]
    value = argv[i].split("=", 1)[1] if inline else (argv[i + 1] if i + 1 < len(argv) else "")
    if not value or value.startswith("--"):
        raise ConfigError("--config needs a YAML file or a shipped config name, e.g. --config tiny_cpu")
    return value, argv[:i] + argv[i + (1 if inline else 2):]


def load_yaml(path: Path, flag: str = "--config") -> dict:
    """The YAML mapping in ``path`` ({} when empty; ``flag``: the option that named it, for messages).
    Raises ConfigError on bad YAML, a non-mapping, a key that is no name, or a key written twice (YAML keeps the last
    silently)."""
    import yaml

    class UniqueKeys(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor`: its keys may be overridden
                    continue
                key = self.construct_object(key_node, deep=deep)
                if not isinstance(key, str):  # `1: 3`, `true: 1`
                    raise ConfigError(f"{flag} {path}: the key {key!r} (line {key_node.start_mark.line + 1}) is no "
                                      "field name. Fix: write `field_name: value`.")
                if key in seen:
                    raise ConfigError(f"{flag} {path}: {key!r} is written twice (lines {seen[key]} and "
                                      f"{key_node.start_mark.line + 1}), and YAML would keep the second silently. "
                                      "Fix: keep one of them.")
                seen[key] = key_node.start_mark.line + 1
            return super().construct_mapping(node, deep)

    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=UniqueKeys)  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as err:
        raise ConfigError(f"{flag} {path}: not valid YAML: {' '.join(str(err).split())}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{flag} {path}: expected a mapping of keys to values, got a {type(data).__name__}.")
    return data


def _known_keys(types_: tuple[type, ...]) -> dict[str, type]:
    return {f.name: f.type for cls in reversed(types_) for f in fields(cls)}  # the first class holding a name wins


def _unknown_keys(config: dict, args: list[str], types_: tuple[type, ...]) -> tuple[list[str], set[str]]:
    """The keys of ``config`` and ``args`` that are no field of ``types_``, and the fields the command line sets."""
    known, cli = _known_keys(types_), set()
    unknown = [key for key in config if key not in known]
    negatable = {f.name for cls in types_ for f in fields(cls) if f.default is True}  # HfArgumentParser's --no_X
    for _, key in cli_keys(args):
        canon = key.replace("-", "_")
        if canon in known:
            cli.add(canon)
        elif canon.startswith("no_") and canon[3:] in negatable:
            cli.add(canon[3:])
        elif canon not in unknown and f"--{key}" not in unknown:
            unknown.append(f"--{key}")
    return unknown, cli


def _unknown_problem(unknown: list[str], types_: tuple[type, ...]) -> tuple[ConfigError, list[str]]:
    """The unknown keys' problem, and the fields it names: the keys and the fields they were meant as (so that rules
    on those fields stay silent: ``use-peft: true`` does not also refuse ``lora_r`` as needing ``use_peft``)."""
    known = _known_keys(types_)
    parts, named = [], []
    for key in unknown:
        bare = key.lstrip("-")
        no_flag = bare.startswith("no_") and "bool" in str(known.get(bare[3:]))  # --no_use_peft: defaults to false
        canon = bare.replace("-", "_")  # a YAML key is the field's own name, zero_variance_filter
        close = [f"--{bare[3:]} false"] if no_flag else [canon] if canon in known else \
            difflib.get_close_matches(bare, known, n=1, cutoff=0.75)
        parts.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        named += [bare, canon, *(bare[3:] if no_flag else close[:1])]
    return ConfigError(f"unknown key(s): {', '.join(parts)}. Remove or rename them; valid keys are the fields of "
                       "RecipeArguments, GRPOExtConfig (every GRPOConfig field), trl.ModelConfig and HubPushArguments "
                       "(docs/configuration.md)."), named


def _command_line_as_yaml(args: list[str], types_: tuple[type, ...]) -> list[str]:
    """``--key '[a, b]'`` for a list field read as YAML, as ``--key a b`` (HfArgumentParser's spelling; ``rewards``
    reads its own, `rewards.spec`), and ``--flag on`` / ``off`` for a boolean as ``true`` / ``false``."""
    import yaml

    known = _known_keys(types_)
    lists = {name for name, type_ in known.items() if "list[" in str(type_) and name != "rewards"}
    flags = {name for name, type_ in known.items() if "bool" in str(type_) and "list[" not in str(type_)}
    out = []
    for index, token in enumerate(args):
        key = args[index - 1][2:].replace("-", "_") if index and args[index - 1].startswith("--") else None
        if key in flags and token.lower() in ("on", "off"):  # YAML reads them as booleans: so does the command line
            out.append("true" if token.lower() == "on" else "false")
            continue
        flag, equals, value = token.partition("=")
        name = flag[2:].replace("-", "_") if equals and flag.startswith("--") else None
        if name in flags and value.lower() in ("on", "off"):
            out.append(f"{flag}={'true' if value.lower() == 'on' else 'false'}")  # --bf16=on as --bf16 on
            continue
        if name in lists and value.startswith("["):
            out.append(flag)  # --key=[a, b]: read as --key [a, b]
            token, key = value, name
        if key in lists and token.startswith("[") and token.endswith("]"):
            try:
                items = yaml.safe_load(token)
            except yaml.YAMLError:
                items = None
            if isinstance(items, list) and all(isinstance(item, (str, int, float)) for item in items):
                out.extend(str(item) for item in items)
                continue
        out.append(token)
    return out


def _without_keys(config: dict, args: list[str], keys: set[str]) -> tuple[dict, list[str]]:
    """``config`` and ``args`` without ``keys`` (a command-line key with its values)."""
    config = {k: v for k, v in config.items() if k not in keys}
    out, skipping = [], False
    for token in args:
        if token.startswith("--") and len(token) > 2:
            canon = token[2:].split("=", 1)[0].replace("-", "_")
            skipping = canon in keys or (canon.startswith("no_") and canon[3:] in keys)
            if skipping:
                continue
        elif skipping:
            continue
        out.append(token)
    return config, out


def read_run_args(argv: list[str] | None = None, *, light: bool = False, announce: bool = True,
                  world_size: int | None = None, checks=(), engine=None) -> RunArgs:
    """Read a run's config: ``--config NAME_OR_PATH`` plus ``--key value`` overrides (default ``sys.argv[1:]``).

    The values and every rule of `validation.rules.RULES` are checked once, on the twins (the keys the user set), for
    `plan` and the recipe alike; then, unless ``light``, the real dataclasses are built (TRL's and transformers' own
    checks). ``announce``: print translation notes on stderr; ``world_size``: default ``$WORLD_SIZE``, else 1;
    ``checks``: more checks of the `RunArgs`; ``engine``: the `engines.Engine` of ``plan --accelerate-config``.

    Raises:
        ConfigError: several problems listed in ``problems``; a single one as the error its check raised."""
    from ..validation import validate_run_args
    from ..validation.problems import Problems
    from ..validation.user_values import (
        UserValues,
        check_user_values,
        check_yaml_types,
        user_values_from_argv,
        without_stray_values,
        yaml_choices,
    )
    from .keymap import ALIASES, REMOVED, RENAMED

    argv = list(sys.argv[1:] if argv is None else argv)
    name, args = _split_config(argv)
    config, path = {}, None
    if name is not None:
        path = resolve_config(name)
        config = load_yaml(path)
        env = config.pop("env", None) or {}
        if not isinstance(env, dict):
            raise ConfigError(f"--config {path}: `env` must be a mapping of environment variables to values.")
        for key, value in env.items():
            os.environ[key] = str(value)
    problems = Problems()
    notes: list[str] = []
    config, args, translation_problems = translate(config, args, notes)
    for problem in translation_problems:
        problems.add(problem)
    if announce:  # before any problem is raised: a refusal may name the new key the user did not write
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
    config = yaml_choices(config)
    twins = dataclass_types(True)
    # keys the translation refused stay where they were: reported once, by it, and left out of the checks below
    config, args = _without_keys(config, args, {*ALIASES, *RENAMED, *REMOVED})
    args = _command_line_as_yaml(args, twins)
    unknown, cli_given = _unknown_keys(config, args, twins)
    if unknown:
        problems.add(*_unknown_problem(unknown, twins))
        config, args = _without_keys(config, args, {*unknown, *(key.lstrip("-").replace("-", "_") for key in unknown)})
    # what the user set (the file after translation, then the command line): conflicts are judged on these keys
    parser = hf_argument_parser(twins)
    config = check_yaml_types(config, problems)
    args, stray = without_stray_values(args, parser)
    for line in stray:
        problems.add(ConfigError(line), [line.split()[0].lstrip("-").replace("-", "_")])
    while True:
        try:
            cli_values = user_values_from_argv(args, parser)
            break
        except argparse.ArgumentError as err:  # a value the field's type refuses, e.g. --num_generations two
            field_, problem = _argument_problem(err, parser)
            problems.add(problem, [field_] if field_ else [])
            _, shorter = _without_keys({}, args, {field_} if field_ else set())
            if shorter == args:  # nothing left out: the parse cannot go on
                problems.raise_if_any(ConfigError)
            args = shorter
    user_values = UserValues(config)
    user_values.update(cli_values)
    user_values.command_line_keys = cli_values.command_line_keys
    world = world_size if world_size is not None else problems.check(world_size_from_env, fields=["WORLD_SIZE"]) or 1
    check_user_values(user_values, problems=problems)
    given = frozenset(config) | frozenset(cli_given)
    run = _parse(parser, config, args, problems, given=given, path=path, user_values=user_values)
    results = validate_run_args(*run, user_values=user_values, world_size=world, problems=problems, engine=engine,
                                user_checked=True)
    run.problems = problems
    for check in checks:
        problems.check(check, run)
    problems.raise_if_any(ConfigError)
    if not light:  # the real dataclasses: what only they (and TRL's and transformers' own checks) refuse
        from .ext_config import FRONT_DOOR_CHECKED

        token = FRONT_DOOR_CHECKED.set(results)  # checked above: `GRPOExtConfig.__post_init__` checks nothing again
        try:
            run = _parse(hf_argument_parser(dataclass_types(False)), config, args, problems, given=given, path=path,
                         user_values=user_values)
        finally:
            FRONT_DOOR_CHECKED.reset(token)
        problems.raise_if_any(ConfigError)
    run.warnings = list(problems.warnings)
    return run


def _argument_problem(err: argparse.ArgumentError, parser, defaults=None) -> tuple[str | None, ConfigError]:
    """The field an argparse error is about (``--learning_rate/--learning-rate`` -> ``learning_rate``) and its problem:
    argparse's line, with a fix naming the field's default (``defaults``: before the file's were set) for a type error."""
    name = (err.argument_name or "").split("/")[0]
    field_ = name.lstrip("-").replace("-", "_") if name.startswith("--") else None
    default = (defaults or {}).get(field_, parser.get_default(field_)) if field_ and "invalid" in str(err) else None
    fix = f" Fix: give {field_} a value of that type, e.g. its default {default!r}." if default is not None else ""
    return field_, ConfigError(f"{str(err).rstrip('.')}.{fix}")


def _parse(parser, config: dict, args: list[str], problems, *, given: frozenset, path: Path | None,
           user_values) -> RunArgs:
    """TrlParser's semantics (the file's values are defaults, the command line wins) into `RunArgs`: a YAML value of a
    wrong type is recorded and left out; a dataclass's own refusal is recorded and raised."""
    config = dict(config)
    original = {key: parser.get_default(key) for key in config}
    while True:
        parser.set_defaults(**config)
        try:
            outputs = parser.parse_args_into_dataclasses(args=args)
            break
        except argparse.ArgumentError as err:  # e.g. `learning_rate: fast`: argparse types a string default
            field_, problem = _argument_problem(err, parser, original)  # the dataclass's default, not the file's
            if not problems.blocked([field_] if field_ else []):
                problems.add(problem, [field_] if field_ else [])
            if field_ not in config:  # not from the file (the command line was read before): nothing to leave out
                problems.raise_if_any(ConfigError)
            config.pop(field_)
            parser.set_defaults(**{field_: original[field_]})
        except ValueError as err:  # a dataclass's own check (GRPOExtConfig.__post_init__)
            problems.add(err)
            problems.raise_if_any(ConfigError)
    return RunArgs(*outputs, given=given, config_path=None if path is None else str(path),
                   user_values=user_values)

