"""The ``trl-grpo-ext`` command line: ``plan``, ``train``, ``eval``, ``rewards`` and ``push``.

Each sub-command lives next to the code it exposes and provides two functions: ``add_parser(subparsers)`` that
declares its arguments and ``run(args) -> int`` that executes it. Importing this module and the sub-command modules
must not import torch (``--help`` and ``rewards`` answer at once; ``plan`` imports TRL when it runs). A sub-command module that sets
``ACCEPTS_OVERRIDES = True`` (``plan``, ``train``) receives the arguments it does not declare — config overrides such
as ``--learning_rate 1e-5`` — as ``args.overrides``; the others refuse them.

Output cut short by the reader (``trl-grpo-ext rewards | head``) ends quietly, as a closed pipe should.
"""

from __future__ import annotations

import argparse
import os
import sys
from importlib import import_module

#: sub-command name -> module providing ``add_parser(subparsers)`` and ``run(args)``.
SUBCOMMANDS = {
    "plan": "trl_grpo_ext.cli.plan",
    "train": "trl_grpo_ext.cli.train",
    "eval": "trl_grpo_ext.cli.eval",
    "rewards": "trl_grpo_ext.rewards.cli",
    "push": "trl_grpo_ext.hub.cli",
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Build the top-level parser with one sub-parser per entry of :data:`SUBCOMMANDS`.

    With ``command`` (the sub-command about to run), only that sub-command's module is imported; the others get an
    empty placeholder, so that `plan` does not pay for importing `push`.
    """
    from trl_grpo_ext._version import __version__

    parser = argparse.ArgumentParser(prog="trl-grpo-ext", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"trl-grpo-ext {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="{" + ",".join(SUBCOMMANDS) + "}")
    for name, module in SUBCOMMANDS.items():
        if command in SUBCOMMANDS and name != command:
            subparsers.add_parser(name)
            continue
        sub = import_module(module).add_parser(subparsers)
        sub.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``trl-grpo-ext`` console script; returns the process exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv[0] if argv else None)
    args, overrides = parser.parse_known_args(argv)
    module = import_module(args._module)
    takes_overrides = getattr(module, "ACCEPTS_OVERRIDES", False) or args.command == "eval"
    if overrides and not takes_overrides:
        parser.error(f"unrecognized arguments: {' '.join(overrides)}")
    args.overrides = overrides
    try:
        # eval takes the overrides as its second argument
        code = int((module.run(args, overrides) if args.command == "eval" else module.run(args)) or 0)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader closed the pipe (`| head`): stop writing, and keep Python from reporting the failed flush at exit
        # (https://docs.python.org/3/library/signal.html#note-on-sigpipe).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
