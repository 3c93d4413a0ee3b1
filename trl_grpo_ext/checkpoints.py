"""Which checkpoint a resume uses, and whether its saved plan allows it (no trainer import).

A checkpoint is *complete* when transformers wrote its ``trainer_state.json``, which happens last in
`Trainer._save_checkpoint`: a folder killed mid-save lacks it and is never picked by ``resume_from_checkpoint:
last``.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from .quantifiers import RunPlan, check_resume_compatible

PLAN_FILE = "run_plan.json"
ZERO_VARIANCE_STATE_FILE = "zero_variance_state.json"
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def last_complete_checkpoint(output_dir: str | os.PathLike) -> str | None:
    """The ``checkpoint-N`` folder of ``output_dir`` with the largest N that holds ``trainer_state.json``, or None."""
    root = Path(output_dir)
    if not root.is_dir():
        return None
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := _CHECKPOINT.match(p.name)) and p.is_dir()]
    for _, path in sorted(found, reverse=True):
        if (path / "trainer_state.json").is_file():
            return str(path)
    return None


def resolve_resume_checkpoint(resume_from_checkpoint, output_dir: str) -> str | None:
    """Map ``resume_from_checkpoint`` (None/False, True, ``"last"`` or a path) to a checkpoint folder or None.

    Raises:
        ValueError: ``True``/``"last"`` with no complete checkpoint in ``output_dir``, or a path that is not a
            folder holding ``trainer_state.json``; the message says what to do instead.
    """
    if resume_from_checkpoint in (None, False, "", "false", "False"):
        return None
    if resume_from_checkpoint is True or str(resume_from_checkpoint).lower() in ("last", "true"):
        checkpoint = last_complete_checkpoint(output_dir)
        if checkpoint is None:
            raise ValueError(
                f"resume_from_checkpoint={resume_from_checkpoint!r}, but {output_dir} holds no complete checkpoint-* "
                "folder (one with trainer_state.json). Start without it, or point it at a checkpoint folder."
            )
        return checkpoint
    path = Path(resume_from_checkpoint)
    if not (path / "trainer_state.json").is_file():
        raise ValueError(
            f"resume_from_checkpoint={str(path)!r} is not a complete checkpoint folder (no trainer_state.json). "
            f"Use resume_from_checkpoint: last to take the newest complete one in {output_dir}."
        )
    return str(path)


def check_output_dir(output_dir: str | os.PathLike, resuming: bool) -> None:
    """Refuse to start a new run in an ``output_dir`` that holds checkpoints of another: they would be overwritten.

    Raises:
        ValueError: ``output_dir`` is a file, or holds a complete ``checkpoint-*`` folder and ``resuming`` is False;
            the message offers resuming, another ``output_dir``, or deleting the old run.
    """
    root = Path(output_dir)
    if root.exists() and not root.is_dir():
        raise ValueError(f"output_dir={str(root)!r} is a file, not a directory. Choose another output_dir.")
    newest = last_complete_checkpoint(root)
    if newest is not None and not resuming:
        raise ValueError(
            f"output_dir={str(root)!r} already holds a run ({Path(newest).name}); starting a new one would overwrite "
            "it. Resume it with --resume_from_checkpoint last, choose another --output_dir, or delete the folder."
        )


def check_checkpoint_plan(checkpoint: str | None, plan: RunPlan) -> None:
    """Refuse (`QuantityError`) a checkpoint whose saved plan differs from ``plan`` (see `check_resume_compatible`)."""
    if checkpoint is None:
        return
    saved = Path(checkpoint) / PLAN_FILE
    if saved.is_file():
        check_resume_compatible(json.loads(saved.read_text()), plan)


def write_json(directory: str | os.PathLike, name: str, values: dict) -> None:
    """Write ``values`` as ``directory/name`` (JSON, indented)."""
    Path(directory, name).write_text(json.dumps(values, indent=2))
