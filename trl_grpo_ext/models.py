"""4-bit NF4 + LoRA loading settings for the QLoRA recipes (bitsandbytes and peft configs, no model code).

QLoRA (Dettmers et al. 2023, arXiv 2305.14314): the frozen base is stored in 4-bit NormalFloat (NF4) with double
quantisation of the quantisation constants; matrix products run in the compute dtype (bf16 on a GPU, float32 on a
CPU, where bf16 matmuls are slow); a LoRA adapter (Hu et al. 2021, arXiv 2106.09685) is trained on top.
"""

from __future__ import annotations

import os
from pathlib import Path

from . import smollm2, tiny
from .checks import check_choice

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


def torch_dtype(name: str, field: str = "dtype"):
    """The ``torch.dtype`` of a dtype name of `DTYPE_NAMES` (``"bfloat16"`` -> ``torch.bfloat16``).

    Raises:
        ValueError: ``name`` is not one of `DTYPE_NAMES` (the message names ``field``).
    """
    import torch

    return getattr(torch, check_choice(field, name, DTYPE_NAMES, error=ValueError))


def quantization_config(model_args, training_args):
    """A `BitsAndBytesConfig` for 4-bit NF4 with double quantisation, or None when ``load_in_4bit`` is False.

    Args:
        model_args (`trl.ModelConfig`): reads ``load_in_4bit``, ``load_in_8bit``, ``bnb_4bit_quant_type`` (``"nf4"``),
            ``use_bnb_nested_quant`` (double quantisation), ``bnb_4bit_quant_storage`` (the packed weights' dtype,
            default bitsandbytes' uint8) and ``dtype``.
        training_args (`GRPOExtConfig`): reads ``bf16`` to choose the compute dtype.
    """
    from transformers import BitsAndBytesConfig

    if model_args.load_in_8bit:
        return BitsAndBytesConfig(load_in_8bit=True)
    if not model_args.load_in_4bit:
        return None
    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type=model_args.bnb_4bit_quant_type,
        bnb_4bit_use_double_quant=model_args.use_bnb_nested_quant,
        bnb_4bit_compute_dtype=torch_dtype(compute_dtype_name(model_args, training_args)),
        # FSDP needs the packed weights stored in the compute dtype (validation.engines); unset: bitsandbytes' uint8
        **({"bnb_4bit_quant_storage": model_args.bnb_4bit_quant_storage}
           if getattr(model_args, "bnb_4bit_quant_storage", None) else {}),
    )


def lora_config(model_args):
    """TRL's `get_peft_config` (a `peft.LoraConfig` from the ``lora_*`` fields), or None when ``use_peft`` is False."""
    from trl import get_peft_config

    return get_peft_config(model_args)


def load_tokenizer(name: str, path: str, revision: str | None = None):
    """The tokenizer of model ``name`` (already resolved to the local ``path``), left-padded for generation.

    The embedded tiny model's character tokenizer goes through :func:`trl_grpo_ext.tiny.load_tokenizer` (AutoTokenizer
    would drop its spaces); every other model through ``AutoTokenizer.from_pretrained(path, revision=revision)``.
    """
    if name == tiny.TINY_MODEL_ID:
        return tiny.load_tokenizer(path)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path, revision=revision, padding_side="left")


def run_tokenizer(model_args, chat_template: str | None = None):
    """The tokenizer of a run: :func:`load_tokenizer` of ``model_args.model_name_or_path`` (resolved with
    `tiny.resolve_model_path`), with ``chat_template`` (open-r1's key, a Jinja template) replacing its own when given."""
    name = model_args.model_name_or_path
    tokenizer = load_tokenizer(name, tiny.resolve_model_path(name), revision=model_args.model_revision)
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    return tokenizer


def check_model_path(name: str | None) -> None:
    """Fail fast, before any model load, when ``name`` can be neither found locally nor downloaded.

    Args:
        name (`str`): ``model_name_or_path``: ``"embedded:tiny-qwen2"``, a local directory, or a Hub id.

    Raises:
        ValueError: unset; an ``embedded:`` name that does not exist; a path-like name that is not a directory; a
            Hub id not in the local cache while ``HF_HUB_OFFLINE=1`` (the message says how to run the embedded
            default instead).
    """
    hint = (
        "To try the recipe without a network, run the embedded default: `make demo`, or "
        "`accelerate launch recipes/grpo_qlora.py --config recipes/configs/tiny_cpu.yaml`."
    )
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
    looks_like_path = name.startswith((".", "/", "~")) or name.count("/") > 1 or os.sep + os.sep in name
    if looks_like_path:
        raise ValueError(f"model_name_or_path={name!r} is not an existing directory. {hint}")
    from huggingface_hub import try_to_load_from_cache

    if isinstance(try_to_load_from_cache(name, "config.json"), str):
        return
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        raise ValueError(
            f"model_name_or_path={name!r} is neither a local directory nor in the Hugging Face cache, and the Hub is "
            "unreachable offline (HF_HUB_OFFLINE=1). Download it on a machine with a network "
            f"(`hf download {name}`) and point model_name_or_path at that directory. {hint}"
        )


def keep_4bit_training_layout(model) -> int:
    """Stop bitsandbytes from repacking 4-bit weights for CPU inference while the model is being trained.

    On a CPU with AVX512-BF16, bitsandbytes 0.50's ``Linear4bit.forward`` converts its weight into a CPU inference
    layout the first time it runs in eval mode without gradients (``support_avx512bf16_for_cpu``), and only converts
    it back when the state dict is saved. A training step after an evaluation (TRL's eval loop, ``eval_strategy``)
    then fails inside ``bnb.matmul_4bit`` ("a view of a leaf Variable that requires grad is being used in an in-place
    operation"). Setting the flag to False on every 4-bit layer keeps the training layout; evaluation during training
    uses the same kernel as training.

    Args:
        model: any ``torch.nn.Module`` (PEFT-wrapped or not).

    Returns:
        `int`: the number of 4-bit layers changed (0 without bitsandbytes layers).
    """
    try:
        from bitsandbytes.nn import Linear4bit
    except ImportError:  # pragma: no cover - bitsandbytes is a dependency
        return 0
    changed = 0
    for module in model.modules():
        if isinstance(module, Linear4bit) and getattr(module, "support_avx512bf16_for_cpu", False):
            module.support_avx512bf16_for_cpu = False
            changed += 1
    return changed
