"""The ``trl-grpo-ext`` command line: ``plan``, ``eval``, ``rewards`` and ``push``.

Each sub-command lives next to the code it exposes and provides two functions: ``add_parser(subparsers)`` that
declares its arguments and ``run(args) -> int`` that executes it. Importing this module and the sub-command modules
must not import torch, so ``trl-grpo-ext plan`` answers in well under a second.
"""

from __future__ import annotations

import argparse
import sys
from importlib import import_module

#: sub-command name -> module providing ``add_parser(subparsers)`` and ``run(args)``.
SUBCOMMANDS = {
    "plan": "trl_grpo_ext.plan_cli",
    "eval": "trl_grpo_ext.eval_cli",
    "rewards": "trl_grpo_ext.rewards.cli",
    "push": "trl_grpo_ext.hub_cli",
}


def build_parser() -> argparse.ArgumentParser:
    """Build the top-level parser with one sub-parser per entry of :data:`SUBCOMMANDS`."""
    from trl_grpo_ext import __version__

    parser = argparse.ArgumentParser(prog="trl-grpo-ext", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"trl-grpo-ext {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="{" + ",".join(SUBCOMMANDS) + "}")
    for module in SUBCOMMANDS.values():
        sub = import_module(module).add_parser(subparsers)
        sub.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``trl-grpo-ext`` console script; returns the process exit code."""
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if args.command == "eval":  # the remaining `--key value` pairs override the run's config
        return int(import_module(args._module).run(args, rest) or 0)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    return int(import_module(args._module).run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
