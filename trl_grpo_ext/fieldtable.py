"""Torch-free twins of the recipe's argument dataclasses, for `trl-grpo-ext plan`, with the checks their fields declare.

`plan` must answer without importing torch (and faster than ``import trl``), yet read a config exactly as the recipe
does. The recipe's dataclasses (``RecipeArguments``, ``GRPOExtConfig``, ``trl.ModelConfig``, ``HubPushArguments``)
cannot be imported without torch (``GRPOConfig`` subclasses transformers' ``TrainingArguments``) or without TRL's
import-time package scan. So this module keeps, for each of them, a table of its fields — name, a torch-free type,
default, argparse metadata other than the help text — in the generated file ``_fields.py``, and builds plain
dataclasses from it. TRL's ``HfArgumentParser`` turns them into the same command-line options as the real classes.

The table is generated from the real dataclasses by :mod:`trl_grpo_ext.fieldgen`::

    python -m trl_grpo_ext.fieldgen        # rewrites trl_grpo_ext/_fields.py

and ``tests/test_fieldtable.py`` fails when it is stale (a TRL upgrade, a new field) and checks that both versions
give the parser identical options. Type mapping: an ``Enum`` becomes a ``Literal`` of its values (the parser offers
the same choices and keeps the string); any other class that is not a builtin becomes ``dict`` (only
``accelerate.ParallelismConfig``, never set from a YAML file here).

The twins have no ``__post_init__``: they carry the values as given, before ``GRPOExtConfig`` resolves them.

Declared checks. A field of ours states its valid values on its type, with :class:`~typing.Annotated`::

    max_resample_rounds: Annotated[int, Range(low=0, integer=True, fix="use e.g. 3.")] = field(default=3, ...)
    adapter_dtype: Annotated[str, Choices(ADAPTER_DTYPES)] = field(default="float32", ...)

(not in ``field(metadata=...)``: TRL's and transformers' ``HfArgumentParser`` pass every metadata key to
``argparse.add_argument``, which refuses an unknown one; ``typing.get_type_hints`` strips ``Annotated`` for them).
:func:`declared_checks` reads them, plus the ``choices`` of a field's argparse metadata (``final_eval``); the table
carries them as a fifth column, so that ``trl_grpo_ext.validation`` and the generated ``docs/configuration.md``
(:mod:`trl_grpo_ext.fielddocs`) read them without importing the dataclasses.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from .checks import Range, RunArgumentError, check_choice

#: The generated table, next to this module.
TABLE_FILE = Path(__file__).with_name("_fields.py")
_NAMESPACE = {"Literal": Literal, "Any": Any}


@dataclass(frozen=True)
class Choices:
    """The valid values of a string field, declared on its type: ``Annotated[str, Choices(("off", "mask"))]``.

    >>> Choices(("off", "mask")).check("zero_variance_filter", "mask")
    'mask'
    """

    values: tuple[str, ...]

    def check(self, name: str, value: Any, error: type[ValueError] = RunArgumentError) -> Any:
        """Return ``value`` if it is one of :attr:`values`, else raise ``error`` (see `checks.check_choice`)."""
        return check_choice(name, value, self.values, error=error)


def plain_value(value: Any) -> Any:
    """``value`` as plain data for the generated table: enum members as their values, sequences as lists."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (list, tuple, type({}.keys()), type({}.values()))):
        return [plain_value(v) for v in value]
    if isinstance(value, dict):
        return {k: plain_value(v) for k, v in value.items()}
    return value


def declared_checks(cls) -> dict[str, dict[str, Any]]:
    """``{field: {"choices": (...)} or {"range": Range(...)}}`` for the fields of dataclass ``cls`` that declare one.

    Read from ``Annotated[..., Range(...)]`` / ``Annotated[..., Choices(...)]`` on the field's type, and, for the
    fields this package declares, from a ``choices`` key of the metadata (which argparse also enforces on the command
    line; TRL's and transformers' own argparse choices are left to them).
    """
    hints = typing.get_type_hints(cls, include_extras=True)
    ours = {name for klass in cls.__mro__ if klass.__module__.split(".")[0] == __package__
            for name in vars(klass).get("__annotations__", {})}
    out: dict[str, dict[str, Any]] = {}
    for f in dataclasses.fields(cls):
        checks: dict[str, Any] = {}
        if "choices" in f.metadata and f.name in ours:
            checks["choices"] = tuple(plain_value(list(f.metadata["choices"])))
        for extra in getattr(hints.get(f.name), "__metadata__", ()):
            if isinstance(extra, Choices):
                checks["choices"] = tuple(extra.values)
            elif isinstance(extra, Range):
                checks["range"] = extra
        if checks and f.init:
            out[f.name] = checks
    return out


def type_text(tp: Any) -> str:
    """A torch-free Python expression for the field type ``tp`` (evaluated with ``Literal`` and ``Any`` in scope).

    >>> type_text(int | None)
    'int | None'
    """
    if tp is type(None) or tp is None:
        return "None"
    if tp is Any:
        return "Any"
    if isinstance(tp, typing.NewType):  # e.g. config.RewardEntry: the parser calls it on a word and gets the word
        return "str"
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        return " | ".join(type_text(arg) for arg in typing.get_args(tp))
    if origin is Literal:
        return f"Literal[{', '.join(repr(v) for v in typing.get_args(tp))}]"
    if origin in (list, dict, tuple):
        return f"{origin.__name__}[{', '.join(type_text(arg) for arg in typing.get_args(tp))}]"
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return f"Literal[{', '.join(repr(member.value) for member in tp)}]"
    if tp in (int, float, str, bool, dict, list):
        return tp.__name__
    return "dict"


def _field(default: Any, meta: dict) -> dataclasses.Field:
    if default == "<required>":
        return dataclasses.field(metadata=meta)
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda d=default: _copy(d), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def _copy(value):
    import copy

    return copy.deepcopy(value)


@functools.lru_cache(maxsize=1)
def light_dataclasses() -> tuple[type, ...]:
    """Plain dataclasses with the fields of ``RECIPE_DATACLASSES``, in the same order, built from ``_fields.py``
    (once per process)."""
    from ._fields import TABLES

    types_: dict[str, Any] = {}
    classes = []
    for name, rows in TABLES.items():
        spec = []
        for fname, text, default, meta, _checks in rows:
            if text not in types_:
                types_[text] = eval(text, dict(_NAMESPACE))  # noqa: S307 (the generated file, see write_table)
            spec.append((fname, types_[text], _field(default, dict(meta))))
        classes.append(dataclasses.make_dataclass(name, spec, repr=False, eq=False))
    return tuple(classes)


def table_checks() -> dict[str, dict[str, Any]]:
    """:func:`declared_checks` of every recipe dataclass, read from ``_fields.py`` (no torch, no TRL)."""
    from ._fields import TABLES

    return {row[0]: row[4] for rows in TABLES.values() for row in rows if row[4]}


def table_argparse_choices() -> dict[str, tuple]:
    """``{field: choices}`` of every recipe dataclass field whose argparse metadata lists ``choices`` (``log_level``,
    ``dtype``, ...), read from ``_fields.py``. The command line refuses other values; a value from a YAML file reaches
    the dataclass without argparse, so validation checks it against the same list."""
    from ._fields import TABLES

    choices: dict[str, tuple] = {}
    for rows in TABLES.values():
        for row in rows:
            if "choices" in row[3]:
                choices.setdefault(row[0], tuple(row[3]["choices"]))
    return choices


def table_defaults() -> dict[str, Any]:
    """``{field: default}`` of every recipe dataclass field (the first class holding a name wins, as in the parser),
    read from ``_fields.py``: plain values, enum members as their values, ``"<required>"`` for a required field."""
    from ._fields import TABLES

    defaults: dict[str, Any] = {}
    for rows in TABLES.values():
        for row in rows:
            defaults.setdefault(row[0], row[2])
    return defaults
