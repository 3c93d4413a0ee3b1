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
    """A run's four dataclasses (or twins); ``user_values``: the keys the user set (the file after translation, then
    the command line: conflicts are judged on these); ``problems``: the collector while the front door's ``checks``
    run; ``warnings``: settings without effect, one line each."""

    script_args: Any
    training_args: Any
    model_args: Any
    push_args: Any
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


@functools.lru_cache(maxsize=1)
def twins() -> tuple[type, ...]:
    """The twins of ``(RecipeArguments, GRPOExtConfig, ModelConfig, HubPushArguments)``: plain dataclasses with the
    same init fields read from the installed classes, without ``__post_init__``."""
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

    return hf_argparser_module().HfArgumentParser(types_, exit_on_error=False)  # TRL is a dependency


def _split_config(argv: list[str]) -> tuple[str | None, list[str]]:
    """``(--config's value, the other arguments)``, ``--config=PATH`` too (a second one is an unknown key); without a
    value, ``""`` (`resolve_config` refuses it)."""
    found = [i for i, a in enumerate(argv) if a.split("=", 1)[0] == "--config"]
    if not found:
        return None, argv
    i, inline = found[0], "=" in argv[found[0]]
    value = argv[i].split("=", 1)[1] if inline else (argv[i + 1] if i + 1 < len(argv) else "")
    return value, argv[:i] + argv[i + (1 if inline else 2):]


def load_yaml(path: Path, flag: str = "--config") -> dict:
    """The YAML mapping in ``path`` ({} when empty; ``flag``: the option that named it, for messages); a key written
    twice keeps its last value (YAML's rule, as in TRL). Raises ConfigError on bad YAML or a non-mapping."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise ConfigError(f"{flag} {path}: not valid YAML: {' '.join(str(err).split())}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{flag} {path}: expected a mapping of keys to values, got a {type(data).__name__}.")
    return data


def _unknown_keys(config: dict, args: list[str], types_: tuple[type, ...]) -> tuple[list, ConfigError | None, list]:
    """The keys of ``config`` and the ``--keys`` of ``args`` (as written) that name no field of ``types_``, each once
    (HfArgumentParser's ``--no_X`` names X, a boolean that defaults to true); their problem (None without any); and
    the fields it names: the keys and the fields they were meant as (so that rules on those fields stay silent:
    ``use-peft: true`` does not also refuse ``lora_r`` as needing ``use_peft``)."""
    names = [f.name for cls in types_ for f in fields(cls)]
    known = {*names, *(f"no_{f.name}" for cls in types_ for f in fields(cls) if f.default is True)}
    cli = [f"--{key}" for _, key in cli_keys(args) if key.replace("-", "_") not in known]
    unknown = list(dict.fromkeys([key for key in config if key not in known] + cli))
    parts, named = [], []
    for key in map(str, unknown):
        close = difflib.get_close_matches(key.lstrip("-"), names, n=1, cutoff=0.75)
        parts.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        named += [key.lstrip("-").replace("-", "_"), *close]
    return unknown, ConfigError(
        f"unknown key(s): {', '.join(parts)}. Remove or rename them; valid keys are the fields of RecipeArguments, "
        "GRPOExtConfig (every GRPOConfig field), trl.ModelConfig and HubPushArguments (docs/configuration.md)."
    ) if parts else None, named


def _without_keys(config: dict, args: list[str], keys: set[str]) -> tuple[dict, list[str]]:
    """``config`` and ``args`` without ``keys`` (a command-line key with its values)."""
    config = {k: v for k, v in config.items() if k not in keys}
    out, skipping = [], False
    for token in args:
        if token.startswith("--") and len(token) > 2:
            canon = token[2:].split("=", 1)[0].replace("-", "_")
            skipping = canon in keys or (canon.startswith("no_") and canon[3:] in keys)
        if not skipping:
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
        ConfigError: several problems listed in ``problems``; a single one as the error its check raised. A value
            argparse refuses (``--num_generations two``) ends the reading: its line, after the problems found before."""
    from ..validation import validate_run_args
    from ..validation.problems import Problems
    from ..validation.user_values import (
        KINDS,
        check_user_values,
        check_yaml_types,
        user_values_from_argv,
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
    problems, notes = Problems(), []
    config, args = translate(config, args, notes, problems)
    if announce:  # before any problem is raised: a refusal may name the new key the user did not write
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
    twins_ = twins()
    # keys the translation refused are reported once, by it, unknown keys once, here: both left out of what follows
    config, args = _without_keys(config, args, {*ALIASES, *RENAMED, *REMOVED})
    unknown, problem, named = _unknown_keys(config, args, twins_)
    if problem:
        problems.add(problem, named)
        config, args = _without_keys(config, args, {*unknown, *(str(k).lstrip("-").replace("-", "_") for k in unknown)})
    config = check_yaml_types(yaml_choices(config), problems)
    parser = hf_argument_parser(twins_)
    try:
        cli_values = user_values_from_argv(args, parser)
    except argparse.ArgumentError as err:  # a value the field's type refuses, e.g. --num_generations two
        problems.add(str(err))
        problems.raise_if_any(ConfigError)
        raise
    user_values = {**config, **cli_values}
    world = world_size if world_size is not None else problems.check(world_size_from_env, fields=["WORLD_SIZE"]) or 1
    check_user_values(user_values, problems)
    # a string refused above for a typed field is left out (argparse types a string default and would stop at it)
    config = {k: v for k, v in config.items() if not (isinstance(v, str) and k in problems.fields
                                                      and KINDS.get(k) in (bool, int, float))}
    run = _parse(parser, config, args, problems, config_path=path and str(path), user_values=user_values)
    results = validate_run_args(*run, user_values=user_values, world_size=world, problems=problems, engine=engine)
    run.problems = problems
    for check in checks:
        problems.check(check, run)
    problems.raise_if_any(ConfigError)
    if not light:  # the real dataclasses: what only they (and TRL's and transformers' own checks) refuse
        from .ext_config import FRONT_DOOR_CHECKED
        from .recipe_args import RECIPE_DATACLASSES

        token = FRONT_DOOR_CHECKED.set(results)  # checked above: `GRPOExtConfig.__post_init__` checks nothing again
        try:
            run = _parse(hf_argument_parser(RECIPE_DATACLASSES), config, args, problems,
                         config_path=path and str(path), user_values=user_values)
        finally:
            FRONT_DOOR_CHECKED.reset(token)
    run.warnings = list(problems.warnings)
    return run


def _parse(parser, config: dict, args: list[str], problems, **run) -> RunArgs:
    """TrlParser's semantics (the file's values are defaults, the command line wins) into `RunArgs` (``run``: its
    other fields). A value argparse refuses (``learning_rate: 1e1x``: it types a string default), an argument no field
    takes (``--report_to wandb tensorboard``) or a dataclass's own refusal (a TypeError too: transformers' for an
    unknown ``accelerator_config`` key) is raised after the problems found before, as one line."""
    parser.set_defaults(**config)
    try:
        return RunArgs(*parser.parse_args_into_dataclasses(args=args), **run)
    except (argparse.ArgumentError, ValueError, TypeError) as err:  # a ConfigError; a ValueError subclass as it is
        problems.add(str(err) if type(err) in (ValueError, TypeError, argparse.ArgumentError) else err)
        problems.raise_if_any(ConfigError)
        raise
