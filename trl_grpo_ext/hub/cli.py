"""``trl-grpo-ext push OUTPUT_DIR --repo-id ID [--merge] [--revision BRANCH] [--private | --public]``.

Pushes a finished run after the fact, with :func:`trl_grpo_ext.hub.push_run`: the card (and, with ``--merge``, the
merged model) is written into OUTPUT_DIR first, then uploaded. The token comes from ``HF_TOKEN`` or the login stored
by ``hf auth login``; there is deliberately no ``--token`` option, so a token never lands in shell history or ``ps``.
This module imports neither torch nor huggingface_hub until the command runs.
"""

from __future__ import annotations

import argparse
import sys

from .merge import MERGE_DTYPES


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Declare the ``push`` sub-command on ``subparsers`` (from ``ArgumentParser.add_subparsers``) and return it."""
    parser = subparsers.add_parser(
        "push",
        help="push a finished run (adapter or merged model, card, plan, config) to the Hugging Face Hub",
        description="Push a finished run to the Hugging Face Hub: its model card (and, with --merge, the merged "
                    "model) is written into OUTPUT_DIR first, then uploaded with the adapter, plan and config. The "
                    "token comes from HF_TOKEN or `hf auth login` (there is no --token option, so that a token never "
                    "lands in shell history).",
    )
    parser.add_argument("output_dir", metavar="OUTPUT_DIR", help="the finished run's output_dir")
    parser.add_argument("--repo-id", required=True, help="target repository, 'user/name' or 'org/name'")
    parser.add_argument(
        "--merge",
        action="store_true",
        help="push the adapter merged into the de-quantized base (a plain transformers model) instead of the adapter",
    )
    parser.add_argument("--revision", default=None, help="branch to push to (created if missing); default: main")
    visibility = parser.add_mutually_exclusive_group()
    visibility.add_argument(
        "--private", dest="private", action="store_true", default=True, help="create the repository private (default)"
    )
    visibility.add_argument("--public", dest="private", action="store_false", help="create the repository public")
    parser.add_argument(
        "--merge-dtype", default="bfloat16", choices=MERGE_DTYPES, help="dtype of the merged weights (with --merge)"
    )
    return parser


def run(args: argparse.Namespace) -> int:
    """Run ``push``: print the repository URL and return 0; on failure print the reason (with the retry command) to
    stderr and return 1 (the push failed, local files intact), 2 (bad input, nothing written) or 130 (interrupted
    during the upload, local files intact)."""
    from .push import HubPushError, HubPushInterrupted, push_run

    mode = "merged" if args.merge else "adapter"
    try:
        url = push_run(
            args.output_dir,
            args.repo_id,
            mode=mode,
            revision=args.revision,
            private=args.private,
            merge_dtype=args.merge_dtype,
        )
    except HubPushError as err:
        print(f"trl-grpo-ext push: {err}", file=sys.stderr)
        return 1
    except HubPushInterrupted as err:
        print(f"trl-grpo-ext push: {err}", file=sys.stderr)
        return 130
    except ValueError as err:
        print(f"trl-grpo-ext push: {err}", file=sys.stderr)
        return 2
    print(f"Pushed the {mode} of {args.output_dir} to {url}")
    return 0
