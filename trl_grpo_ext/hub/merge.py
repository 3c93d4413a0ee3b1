"""Merged export of a QLoRA run: the LoRA adapter merged into a de-quantized copy of its base.

An adapter trained on a 4-bit NF4 base (QLoRA, Dettmers et al. 2023, https://huggingface.co/papers/2305.14314) learned
a correction to the *quantized* weights. There are three ways to fold it into one plain model:

- merge into the 4-bit weights (what ``merge_and_unload()`` does on a bitsandbytes model): PEFT de-quantizes, adds the
  update and re-quantizes to NF4, so the update is rounded away to NF4's 16 levels, and the result still needs
  bitsandbytes to load. Not offered.
- ``method="dequantized"`` (default): quantize the original checkpoint exactly as training did (same
  ``BitsAndBytesConfig``, same load dtype), de-quantize it to float32 with transformers' ``dequantize()`` (which calls
  ``bitsandbytes.functional.dequantize_4bit``: the very weights the 4-bit forward multiplies by), add the adapter
  update in float32 with PEFT's ``merge_and_unload``, cast to ``dtype`` and save. The merged model computes what the
  trained model computed, up to the final cast.
- ``method="original"``: load the original checkpoint in float32 and add the adapter update. The adapter was trained
  against the NF4-rounded weights, so this model differs from the trained one by the whole quantization error.

Measured on the tiny model (``python benchmarks/merge_tolerance.py``: CPU, float32 load/compute dtype, logits of 2
prompts compared with the 4-bit base + adapter, largest |logit| 1.5; each export reloaded in its own dtype):
``dequantized`` differs by at most 7.2e-7 saved in float32, 1.1e-2 in bfloat16 and 1.4e-3 in float16; ``original``
differs by 9.7e-2, about 10^5 times the float32 figure.

bitsandbytes (0.50) repacks a 4-bit weight in place the first time it runs an inference forward on a CPU with
AVX512-BF16 (eval mode, no grad), after which ``dequantize_4bit`` returns wrong values. This module loads a fresh
4-bit base and de-quantizes it before any forward, so it never sees a repacked weight.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from ..config.checks import check_choice
from ..config.push_settings import MERGE_DTYPES, PUSH_MODES  # noqa: F401 (hub/__init__ lends them)

#: Files that make up a saved PEFT adapter; both are required.
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
#: Tokenizer files copied next to an export when present in ``output_dir``.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "vocab.json",
    "merges.txt",
    "vocab.txt",
    "tokenizer.model",
    "spiece.model",
)
#: How the adapter is folded into its base (see the module docstring); the first is the default.
MERGE_METHODS = ("dequantized", "original")
#: The modes a push uploads (and a model card is written for): :data:`PUSH_MODES` without ``"none"``.
UPLOAD_MODES = PUSH_MODES[1:]
#: Written next to the merged weights: how they were made, and which files they are.
MERGE_INFO_FILE = "merge_info.json"


def check_adapter_dir(output_dir: str | Path) -> Path:
    """Return ``output_dir`` as a `Path` after checking it holds a saved PEFT adapter.

    Raises:
        ValueError: ``output_dir`` is no folder, or ``adapter_config.json`` or ``adapter_model.safetensors`` is
            missing.
    """
    path = Path(output_dir)
    if not path.is_dir():
        raise ValueError(f"output_dir={str(path)!r} is no folder{' (a file)' if path.exists() else ''}. Fix: pass the "
                         "output_dir of a finished run, e.g. outputs/smollm2-arithmetic.")
    missing = [name for name in ADAPTER_FILES if not (path / name).is_file()]
    if missing:
        raise ValueError(
            f"output_dir={str(path)!r} holds no PEFT adapter (missing {', '.join(missing)}). Point it at the output_dir "
            "of a finished run, where the recipe saved the adapter with trainer.save_model()."
        )
    return path


def read_json(path: Path) -> dict:
    """The JSON object in ``path``, or ``{}`` when the file does not exist."""
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def base_model_of(output_dir: str | Path) -> str:
    """The base model a run's adapter was trained on (a Hub id or a local path).

    Looked up in ``run_config.json`` (``model_args.model_name_or_path``, then ``script_args.model_name_or_path``),
    then in ``adapter_config.json`` (``base_model_name_or_path``).

    Raises:
        ValueError: when none of them names a base model.
    """
    path = Path(output_dir)
    config = read_json(path / "run_config.json")
    for section in ("model_args", "script_args"):
        name = (config.get(section) or {}).get("model_name_or_path")
        if name:
            return name
    name = read_json(path / "adapter_config.json").get("base_model_name_or_path")
    if not name:
        raise ValueError(
            f"No base model recorded in {str(path)!r}: run_config.json has no model_name_or_path and "
            "adapter_config.json no base_model_name_or_path. Pass base_model= explicitly."
        )
    return name


def quantization_settings(output_dir: str | Path, device: str) -> dict:
    """How the run loaded its base, from ``run_config.json``'s ``model_args`` (TRL's ``ModelConfig`` fields).

    Returns a dict with ``load_in_4bit`` (default `True`), ``bnb_4bit_quant_type`` (default ``"nf4"``),
    ``bnb_4bit_use_double_quant`` (from ``use_bnb_nested_quant``, default `True`), ``bnb_4bit_quant_storage``
    (default `None`) and ``dtype``: ``model_args.dtype`` when it names a float type, else ``"bfloat16"`` on a GPU and
    ``"float32"`` on a CPU (the recipe's rule). The dtype is both the load dtype and the 4-bit compute dtype.
    """
    model_args = read_json(Path(output_dir) / "run_config.json").get("model_args") or {}
    dtype = model_args.get("dtype") or model_args.get("torch_dtype")
    if dtype not in MERGE_DTYPES:
        dtype = "bfloat16" if device.startswith("cuda") else "float32"
    return {
        "load_in_4bit": bool(model_args.get("load_in_4bit", True)),
        "bnb_4bit_quant_type": model_args.get("bnb_4bit_quant_type") or "nf4",
        "bnb_4bit_use_double_quant": bool(model_args.get("use_bnb_nested_quant", True)),
        "bnb_4bit_quant_storage": model_args.get("bnb_4bit_quant_storage"),
        "dtype": dtype,
    }


def merge_info(output_dir: str | Path, dtype: str, method: str, base_model: str | None = None) -> dict:
    """What a merged export of ``output_dir`` with these settings records in ``merge_info.json`` (without ``files``).

    Two exports with equal ``merge_info`` are the same model, which lets a retried push reuse an earlier export.
    """
    path = check_adapter_dir(output_dir)
    return {
        "method": method,
        "dtype": dtype,
        "base_model": base_model or base_model_of(path),
        "adapter_sha256": file_sha256(path / "adapter_model.safetensors"),
        "adapter_config_sha256": file_sha256(path / "adapter_config.json"),
    }


def merged_export_is_current(output_dir: str | Path, dest_dir: str | Path, dtype: str, method: str) -> bool:
    """Whether ``dest_dir`` already holds a complete merged export of this adapter with this dtype and method."""
    dest = Path(dest_dir)
    recorded = read_json(dest / MERGE_INFO_FILE)
    files = recorded.pop("files", None)
    if not files or not all((dest / name).is_file() for name in files):
        return False
    expected = merge_info(output_dir, dtype, method)
    return all(recorded.get(key) == value for key, value in expected.items())


def export_merged(
    output_dir: str | Path,
    dest_dir: str | Path,
    dtype: str = "bfloat16",
    *,
    method: str = "dequantized",
    base_model: str | None = None,
    device: str | None = None,
) -> Path:
    """Merge a run's LoRA adapter into its base and save a plain transformers model (safetensors) plus tokenizer.

    Args:
        output_dir (`str` or `Path`): a finished run's directory: ``adapter_config.json``,
            ``adapter_model.safetensors``, tokenizer files and, optionally, ``run_config.json`` (base model and 4-bit
            settings, see :func:`quantization_settings`).
        dest_dir (`str` or `Path`): where to write; created if missing. Earlier weight files there are replaced.
        dtype (`str`, defaults to ``"bfloat16"``): dtype of the saved weights: ``"bfloat16"``, ``"float16"`` or
            ``"float32"``. The merge itself is done in float32.
        method (`str`, defaults to ``"dequantized"``): ``"dequantized"`` merges into the de-quantized NF4 base (the
            weights training saw); ``"original"`` into the original checkpoint. See the module docstring for the
            measured difference. For a run whose base was not quantized both are the same.
        base_model (`str`, *optional*): base model id or path; defaults to the one the run recorded
            (:func:`base_model_of`). ``"embedded:tiny-qwen2"`` resolves to the local tiny model.
        device (`str`, *optional*): where to load and merge: defaults to ``"cuda"`` when available, else ``"cpu"``.
            The merge holds the base in float32 (4 bytes per parameter); pass ``"cpu"`` when it does not fit the GPU.

    Returns:
        `Path` of ``dest_dir``, holding ``model.safetensors`` (or shards and their index), ``config.json`` (no
        ``quantization_config``), ``generation_config.json``, the tokenizer files and ``merge_info.json``. It loads with
        ``AutoModelForCausalLM.from_pretrained(dest_dir)``; neither peft nor bitsandbytes is needed.

    Raises:
        ValueError: on an unknown ``dtype`` or ``method``, or when ``output_dir`` holds no adapter.
    """
    check_choice("dtype", dtype, MERGE_DTYPES, error=ValueError)
    check_choice("method", method, MERGE_METHODS, error=ValueError)
    source = check_adapter_dir(output_dir)
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    from trl_grpo_ext._version import __version__
    from trl_grpo_ext.models.embedded import tiny

    info = merge_info(source, dtype, method, base_model)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    quant = quantization_settings(source, device)
    base_path = tiny.resolve_model_path(info["base_model"])
    if method == "dequantized" and quant["load_in_4bit"]:
        bnb_config = BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type=quant["bnb_4bit_quant_type"],
            bnb_4bit_use_double_quant=quant["bnb_4bit_use_double_quant"],
            bnb_4bit_quant_storage=quant["bnb_4bit_quant_storage"],
            bnb_4bit_compute_dtype=getattr(torch, quant["dtype"]),
        )
        base = AutoModelForCausalLM.from_pretrained(
            base_path, quantization_config=bnb_config, dtype=getattr(torch, quant["dtype"]), device_map={"": device}
        )
        # No forward before this line: see the module docstring (bitsandbytes' CPU repacking).
        base = base.dequantize(dtype=torch.float32)
        info["base_quantization"] = quant
    else:
        base = AutoModelForCausalLM.from_pretrained(base_path, dtype=torch.float32, device_map={"": device})
        info["base_quantization"] = None
    base = base.to(torch.float32)
    merged = PeftModel.from_pretrained(base, str(source), is_trainable=False).merge_and_unload(safe_merge=True)
    merged = merged.to(getattr(torch, dtype))
    dest = Path(dest_dir)
    dest.mkdir(parents=True, exist_ok=True)
    previous = read_json(dest / MERGE_INFO_FILE).get("files") or []
    # Save into a fresh sibling directory first, so the file list is exactly this export's files.
    staging = Path(tempfile.mkdtemp(dir=dest.parent, prefix=dest.name + ".tmp"))
    try:
        merged.save_pretrained(staging)
        files = sorted(p.name for p in staging.iterdir() if p.is_file())
        for name in files:
            os.replace(staging / name, dest / name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    for name in previous:  # weight files of an earlier export that this one did not overwrite
        if name not in files and name.endswith((".safetensors", ".safetensors.index.json")):
            (dest / name).unlink(missing_ok=True)
    for name in TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copy2(source / name, dest / name)
            files.append(name)
    info["files"] = sorted(files)
    info["trl_grpo_ext_version"] = __version__
    (dest / MERGE_INFO_FILE).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    return dest
