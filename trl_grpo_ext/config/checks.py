"""Numeric ranges and string choices, one-line messages naming the field, the value and a fix (no torch, no TRL)."""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import typing
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["RunArgumentError", "Range", "Choices", "check_choice", "as_number", "format_number",
           "world_size_from_env", "declared_checks"]


class RunArgumentError(ValueError):
    """A run argument that would fail late or cannot work; the message names field, value, fix."""


class IneffectiveSettingWarning(UserWarning):
    """A setting accepted but without effect in this run (docs/configuration.md); names the field, why, the fix."""


@dataclass(frozen=True)
class Range:
    """The valid values of one numeric field: ``low`` / ``high`` (None: unbounded; ``*_open`` excludes the bound),
    ``integer`` (``4.0`` read as 4), ``fix`` (appended to the message)."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    integer: bool = False
    fix: str = ""

    def describe(self) -> str:
        """The range in words, e.g. ``"an integer >= 1"``, ``"a number in (0, 1]"``."""
        kind = "an integer" if self.integer else "a number"
        if self.low is not None and self.high is not None:
            low, high = format_number(self.low), format_number(self.high)
            return f"{kind} in {'(' if self.low_open else '['}{low}, {high}{')' if self.high_open else ']'}"
        if self.low is not None:
            return f"{kind} {'>' if self.low_open else '>='} {format_number(self.low)}"
        if self.high is not None:
            return f"{kind} {'<' if self.high_open else '<='} {format_number(self.high)}"
        return f"a finite {kind.split()[-1]}"

    def check(self, name: str, value: Any, error: type[ValueError] = RunArgumentError, typed: bool = False) -> Any:
        """``value`` if valid (an `int` when :attr:`integer`; ``None`` passes: "unset"), else raise ``error``
        ("``name=value`` must be <the range in words>. Fix: <fix>"). A numeric string is read as TRL's parser would; with
        ``typed`` only an `int` or `float` is accepted (never a bool, a string or None)."""
        if value is None and not typed:
            return None
        number = as_number(value)
        ok = number is not None and math.isfinite(number) and not (typed and (
            isinstance(value, bool) or not isinstance(value, int if self.integer else (int, float))))
        if ok and self.integer:
            ok = float(number).is_integer()
        if ok and self.low is not None:
            ok = number > self.low if self.low_open else number >= self.low
        if ok and self.high is not None:
            ok = number < self.high if self.high_open else number <= self.high
        if not ok:
            fix = f" Fix: {self.fix}" if self.fix else ""
            raise error(f"{name}={value!r} must be {self.describe()}.{fix}")
        if self.integer:
            return int(number)
        return value if isinstance(value, (int, float)) else number


@dataclass(frozen=True)
class Choices:
    """The valid values of a string field, declared on its type: ``Annotated[str, Choices(("off", "mask"))]``."""

    values: tuple[str, ...]

    def check(self, name: str, value: Any, error: type[ValueError] = RunArgumentError) -> Any:
        return check_choice(name, value, self.values, error=error)


def declared_checks(cls) -> dict[str, dict[str, Any]]:
    """``{field: {"choices": (...)} and/or {"range": Range(...)}}`` of the init fields of dataclass ``cls``: from
    ``Annotated[..., Range | Choices]`` types, and for this package's fields a ``choices`` key of their metadata."""
    hints = typing.get_type_hints(cls, include_extras=True)
    ours = {name for klass in cls.__mro__ if klass.__module__.split(".")[0] == __name__.split(".")[0]
            for name in vars(klass).get("__annotations__", {})}
    out: dict[str, dict[str, Any]] = {}
    for f in dataclasses.fields(cls):
        checks: dict[str, Any] = {}
        if "choices" in f.metadata and f.name in ours:
            checks["choices"] = tuple(getattr(v, "value", v) for v in f.metadata["choices"])
        for extra in getattr(hints.get(f.name), "__metadata__", ()):
            if isinstance(extra, Choices):
                checks["choices"] = tuple(extra.values)
            elif isinstance(extra, Range):
                checks["range"] = extra
        if checks and f.init:
            out[f.name] = checks
    return out


def check_choice(name: str, value: Any, choices: Iterable[str], error: type[ValueError] = RunArgumentError,
                 fix: str = "") -> Any:
    """``value`` if one of ``choices``, else raise ``error`` naming the closest choice (by case, then spelling), all of
    them and ``fix``."""
    choices = tuple(choices)
    if isinstance(value, str) and value in choices:
        return value
    lowered = {choice.lower(): choice for choice in choices}  # the same letters in another case, else the closest
    close = difflib.get_close_matches(str(value).lower(), list(lowered), n=1)
    did_you_mean = f" Did you mean {lowered[close[0]]!r}?" if close else ""
    extra = f" {fix}" if fix else ""
    if isinstance(value, bool):  # no choice reads as this boolean (see choice_from_yaml)
        extra += (" (YAML 1.1 reads an unquoted on/off/yes/no/true/false as a boolean: write the value in quotes, "
                  "e.g. 'off'.)")
    raise error(f"{name}={value!r} is not valid.{did_you_mean} Choose one of {', '.join(map(repr, choices))}.{extra}")


def choice_from_yaml(value: Any, choices: Iterable[str]) -> Any:
    """The choice a YAML 1.1 boolean meant (PyYAML reads an unquoted ``off`` / ``no`` as False): False -> ``"off"``
    or ``"no"``, True -> ``"on"`` or ``"yes"``, where that word is a choice; any other value unchanged."""
    if not isinstance(value, bool):
        return value
    choices = tuple(choices)
    return next((word for word in (("off", "no"), ("on", "yes"))[value] if word in choices), value)


def format_number(x: Any) -> str:
    """A number as a person writes it: ``1`` for 1.0, else `repr`; not a number: `str`."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else repr(x)


def shown(value: Any) -> str:
    """A value as a message shows it: a whole float as an integer (TRL's parser types ``--save_steps 10`` as 10.0),
    anything else as `repr`."""
    return format_number(value) if isinstance(value, float) else repr(value)


def as_number(value: Any) -> float | None:
    """``value`` as a number (a numeric string cast as TRL's parser would), or None (booleans are not numbers)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        return float(value) if isinstance(value, str) else value
    except ValueError:
        return None


def world_size_from_env(environ=None, strict: bool = True) -> int:
    """``WORLD_SIZE`` of ``environ`` (default ``os.environ``); 1 when unset, or without ``strict`` when invalid.

    Raises:
        RunArgumentError: with ``strict``, not a whole number of 1 or more."""
    raw = (os.environ if environ is None else environ).get("WORLD_SIZE", "1")
    size = int(raw) if raw.strip().isdigit() else 0
    if size < 1 and strict:  # torchrun and accelerate set 1 or more; 0 or less was read as 1 process, silently
        raise RunArgumentError(f"WORLD_SIZE={raw!r} in the environment is not a whole number of processes (1 or more). "
                               "Fix: unset it (plan: or pass --num-processes P).")
    return max(size, 1)


def resumes(resume_from_checkpoint) -> bool:
    """Whether ``resume_from_checkpoint`` (None/False, True, ``"last"`` or a path) asks to resume."""
    return resume_from_checkpoint not in (None, False, "", "false", "False")
