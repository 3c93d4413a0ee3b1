"""The model settings of a run, read before any weight loads: the compute and load dtypes, bf16 and fp16 on this
machine, and a model path that can be found; `models.loading` loads what they describe."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .embedded import smollm2, tiny

#: The floating-point dtypes a run may name (model ``dtype``, ``adapter_dtype``), as torch attribute names.
DTYPE_NAMES = ("float32", "bfloat16", "float16")


def compute_dtype_name(model_args, training_args) -> str:
    """The compute dtype: ``model_args.dtype`` when set (not "auto"), else ``"bfloat16"`` if bf16, else ``"float32"``."""
    if model_args.dtype not in (None, "auto"):
        return model_args.dtype
    return "bfloat16" if training_args.bf16 else "float32"


def load_dtype(model_args, training_args) -> str:
    """The ``dtype`` the recipe loads the base with (``model_init_kwargs["dtype"]``): ``model_args.dtype`` when set
    (not "auto"); else ``"auto"`` (the checkpoint's own dtype) when training in bf16, ``"float32"`` otherwise. The
    4-bit layers compute in :func:`compute_dtype_name`."""
    if model_args.dtype not in (None, "auto"):
        return model_args.dtype
    return "auto" if training_args.bf16 else "float32"


def cpu_bf16_warning(dtype_name: str, bf16: bool, bf16_supported: bool | None = None) -> str | None:
    """A warning for a CPU run in bf16 (``bf16``, or ``dtype_name`` bfloat16: `load_dtype`) on a CPU without bf16
    instructions (AVX512-BF16 or AMX: ``bf16_supported``, default oneDNN's answer), where torch emulates bf16 and a
    step is slower than in float32; None otherwise (docs/benchmarks.md, "bf16 on a CPU")."""
    setting = "bf16=true" if bf16 else "dtype=bfloat16" if dtype_name == "bfloat16" else None
    if setting is None:
        return None
    if bf16_supported is None:
        import torch

        try:
            bf16_supported = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
        except (AttributeError, RuntimeError):
            bf16_supported = False
    if bf16_supported:
        return None
    return (f"{setting} on a CPU without bf16 instructions (AVX512-BF16 or AMX): torch emulates bf16 matrix "
            "products, so each step is slower than in float32. Fix: --bf16 false --dtype float32.")


def looks_like_path(name: str) -> bool:
    """Whether ``model_name_or_path`` is written as a local path (``./x``, ``/x``, ``~/x``, ``a/b/c``), not a Hub id."""
    return name.startswith((".", "/", "~")) or name.count("/") > 1 or os.sep + os.sep in name


def check_model_path(name: str | None) -> None:
    """Refuse a ``model_name_or_path`` (embedded, a local directory or a Hub id) that can be neither found nor
    downloaded, before any model loads. Raises ValueError: unset, no such embedded model or directory, or a Hub id
    outside the cache with ``HF_HUB_OFFLINE=1``."""
    hint = (
        "To try the recipe without a network, run the embedded default: `make demo`, or "
        "`accelerate launch recipes/grpo_qlora.py --config recipes/configs/tiny_cpu.yaml`.")
    if not name:
        raise ValueError(f"model_name_or_path is not set. Set it to a Hub id or a local directory. {hint}")
    if tiny.is_embedded(name):
        if name not in tiny.EMBEDDED_MODELS:
            raise ValueError(f"model_name_or_path={name!r} is not an embedded model; use one of {list(tiny.EMBEDDED_MODELS)}.")
        if name == smollm2.SMOLLM2_MODEL_ID:
            smollm2.check_installed()
        return
    if Path(name).expanduser().is_dir():
        return
    if looks_like_path(name):
        raise ValueError(f"model_name_or_path={name!r} is not an existing directory. {hint}")
    from huggingface_hub import try_to_load_from_cache

    if isinstance(try_to_load_from_cache(name, "config.json"), str):
        return
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        raise ValueError(
            f"model_name_or_path={name!r} is neither a local directory nor in the Hugging Face cache, and the Hub is "
            "unreachable offline (HF_HUB_OFFLINE=1). Download it on a machine with a network "
            f"(`hf download {name}`) and point model_name_or_path at that directory. {hint}")


def check_fp16_machine(fp16: Any, use_cpu: Any) -> None:
    """Refuse ``fp16: true`` off the CPU on a machine without a GPU (ValueError with the fix): accelerate has no fp16
    autocast on a CPU, so the run would stay float32."""
    if fp16 is True and not use_cpu and not gpu_available():
        raise ValueError(
            "fp16=True, but this machine has no GPU: accelerate runs no fp16 autocast on a CPU, so the run would stay "
            "float32. Fix: remove fp16 (bf16: true with use_cpu: true runs bf16 autocast on a CPU).")


def gpu_available() -> bool:
    """Whether a CUDA, XPU or MPS device is present (imports torch)."""
    import torch

    return bool(torch.cuda.is_available() or (getattr(torch, "xpu", None) and torch.xpu.is_available())
                or torch.backends.mps.is_available())


def bf16_available() -> bool:
    """Whether a CUDA or XPU accelerator with bfloat16 support is present (imports torch)."""
    import torch

    if torch.cuda.is_available():
        return torch.cuda.is_bf16_supported()
    return bool(getattr(torch, "xpu", None) and torch.xpu.is_available())
