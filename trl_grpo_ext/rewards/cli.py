"""``trl-grpo-ext rewards [--json]``: list the reward registry (built-ins and entry points) without importing torch."""

from __future__ import annotations

import argparse
import json
import sys


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Declare the ``rewards`` sub-command on the dispatcher's ``subparsers``; returns its parser."""
    parser = subparsers.add_parser(
        "rewards",
        help="list the registered reward functions",
        description="List the reward functions selectable by name in `rewards:` (name, aliases, parameters, "
        "description). Third-party rewards come from the entry-point group `trl_grpo_ext.rewards`.",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    return parser


def _format_params(info) -> str:
    if info.parameters is None:
        return "(known once loaded)"
    return ", ".join(str(p) for p in info.parameters) or "-"


def run(args: argparse.Namespace) -> int:
    """List the registry on stdout (a table, or JSON with ``--json``); returns 0."""
    from .registry import list_rewards

    infos = list_rewards()
    if getattr(args, "json", False):
        print(json.dumps([info.to_dict() for info in infos], indent=2, default=repr))
        return 0
    for info in infos:
        aliases = f" (alias: {', '.join(info.aliases)})" if info.aliases else ""
        print(f"{info.name}{aliases}")
        print(f"    {info.description}")
        print(f"    parameters: {_format_params(info)}")
        if info.example_kwargs:
            print(f"    example: {{name: {info.name}, kwargs: {json.dumps(info.example_kwargs)}}}")
    print(f"\n{len(infos)} rewards. Select them in YAML under `rewards:`; see docs/rewards.md.")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run this sub-command alone: ``python -m trl_grpo_ext.rewards.cli [--json]``."""
    parser = argparse.ArgumentParser(prog="trl-grpo-ext")
    sub = parser.add_subparsers(dest="command", required=True)
    add_parser(sub)
    return run(parser.parse_args(["rewards", *(sys.argv[1:] if argv is None else argv)]))


if __name__ == "__main__":
    sys.exit(main())
