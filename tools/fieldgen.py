"""Development tool (not part of the package): regenerate the generated part of ``docs/configuration.md`` from the
real dataclasses::

    python tools/fieldgen.py --docs    # rewrites the generated part of docs/configuration.md

``tests/test_fieldtable.py`` fails when it is stale.
"""

from __future__ import annotations

import enum
import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal

if __package__ in (None, ""):  # run as a script: the repository root holds trl_grpo_ext and tools
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

__all__ = ["type_text", "main"]


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



def main(argv: list[str] | None = None) -> int:
    """``python tools/fieldgen.py --docs``: rewrite the generated part of ``docs/configuration.md``."""
    argv = sys.argv[1:] if argv is None else argv
    if argv != ["--docs"]:
        print("usage: python tools/fieldgen.py --docs", file=sys.stderr)
        return 2
    from tools.fielddocs import write_docs

    print(f"wrote {write_docs()}", file=sys.stderr)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
