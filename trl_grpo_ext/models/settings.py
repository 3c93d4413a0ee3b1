"""4-bit NF4 + LoRA loading settings for the QLoRA recipes (bitsandbytes and peft configs, no model code).

QLoRA (Dettmers et al. 2023, arXiv 2305.14314): the frozen base is stored in 4-bit NormalFloat (NF4) with double
quantisation of the quantisation constants; matrix products run in the compute dtype (bf16 on a GPU; float32 on a
CPU unless the run sets ``bf16: true`` or ``dtype: bfloat16``: see `cpu_bf16_warning`); a LoRA adapter (Hu et al.
2021, arXiv 2106.09685) is trained on top.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..config.checks import check_choice
from .embedded import smollm2, tiny
from .source import LORA_FIELDS, ModelSource, lora_differences, read_json, resolve_model_source

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
    """A warning for a CPU run that computes in bf16 (``bf16: true``, or the base loaded with ``dtype: bfloat16``) on
    a CPU without bf16 instructions (AVX512-BF16 or AMX), where torch emulates bf16 matrix products and a step is
    slower than in float32; None otherwise (docs/benchmarks.md, "bf16 on a CPU").

    Args:
        dtype_name (`str`): the dtype the base loads in (`load_dtype`).
        bf16 (`bool`): the run's ``bf16`` (mixed precision: float32 weights, bf16 matrix products under autocast).
        bf16_supported (`bool`, *optional*): whether the CPU has bf16 instructions; defaults to oneDNN's own answer
            (``torch.ops.mkldnn._is_mkldnn_bf16_supported``, False if torch cannot tell).
    """
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

    The embedded tiny model's character tokenizer goes through :func:`trl_grpo_ext.models.embedded.tiny.load_tokenizer` (AutoTokenizer
    would drop its spaces); every other model through ``AutoTokenizer.from_pretrained(path, revision=revision)``.
    Raises ValueError: a tokenizer that cannot be loaded (transformers' OSError), naming ``name`` and a fix.
    """
    if name == tiny.TINY_MODEL_ID:
        return tiny.load_tokenizer(path)
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path, revision=revision, padding_side="left")
    except OSError as err:  # not found, no network, gated: one line before any weight loads
        reason = " ".join(str(err).split())[:240]
        raise ValueError(f"model_name_or_path={name!r}: its tokenizer could not be loaded ({reason}). Fix: check the "
                         "id, the network and your access (`hf auth login` for a gated model); without a network, "
                         f"download it first (`hf download {name}`) and set HF_HUB_OFFLINE=1.") from None


def run_tokenizer(model_args, chat_template: str | None = None):
    """The tokenizer of a run: :func:`load_tokenizer` of ``model_args.model_name_or_path`` (resolved with
    `tiny.resolve_model_path`), with ``chat_template`` (open-r1's key, a Jinja template) replacing its own when given.
    For an adapter being continued (`model_source`), the tokenizer the earlier run saved next to it, else its base's.
    """
    name = model_args.model_name_or_path
    source = resolve_model_source(name)
    if source.continued:
        saved = Path(source.adapter, "tokenizer_config.json").is_file()
        folder = source.adapter if saved else tiny.resolve_model_path(source.base)
        tokenizer = load_tokenizer(source.base, folder, revision=None if saved else model_args.model_revision)
    else:
        tokenizer = load_tokenizer(name, tiny.resolve_model_path(name), revision=model_args.model_revision)
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    return tokenizer


def looks_like_path(name: str) -> bool:
    """Whether ``model_name_or_path`` is written as a local path (``./x``, ``/x``, ``~/x``, ``a/b/c``), not a Hub id."""
    return name.startswith((".", "/", "~")) or name.count("/") > 1 or os.sep + os.sep in name


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
    if looks_like_path(name):
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


def continued_lora_differences(model_args, adapter_dir: str) -> list[str]:
    """The config's LoRA fields that differ from the adapter being continued (whose own settings apply), as
    ``"lora_r: 16 in the config, 8 in the adapter"``; empty when they agree."""
    adapter = read_json(Path(adapter_dir) / "adapter_config.json")
    mine = {field: getattr(model_args, field, None) for field in LORA_FIELDS}
    return [f"{field}: {value} in the config, {theirs} in the adapter"
            for field, theirs, value in lora_differences(mine, adapter)]


#: Where :func:`remember_trainable_values` keeps the values that `adapter_precision.cast_trainable_to` restores.
EXACT_VALUES_ATTRIBUTE = "_trl_grpo_ext_exact_trainable_values"


def remember_trainable_values(model) -> int:
    """Keep the trainable parameters' values of ``model`` (a loaded `torch.nn.Module` adapter), so that after TRL's
    bf16 cast of a quantized model's adapter `adapter_precision.cast_trainable_to` restores them exactly, instead of
    up-casting bf16-rounded values (which would move each weight of a trained adapter by up to 2^-9 of itself).

    Returns:
        `int`: the number of tensors remembered (released by the next `adapter_precision.cast_trainable_to`).
    """
    values = {name: param.data for name, param in model.named_parameters() if param.requires_grad}
    model.__dict__[EXACT_VALUES_ATTRIBUTE] = values
    return len(values)


def load_continued_model(source: ModelSource, training_args, quantization_config=None):
    """The base of ``source`` loaded as the run configures it, with the earlier run's adapter on top, trainable.

    Args:
        source (`ModelSource`): a continued source (``source.adapter`` set).
        training_args (`GRPOExtConfig`): ``model_init_kwargs`` (dtype, revision, attention) and ``trust_remote_code``,
            used as TRL uses them for a model id (`trl_grpo_ext._trl_compat.create_model`: the same device placement).
        quantization_config (`BitsAndBytesConfig`, *optional*): the run's 4-bit (or 8-bit) settings; None loads the
            base unquantized.

    Returns:
        `peft.PeftModel` with the adapter ``"default"`` trainable (``is_trainable=True``): the trainer gets it with
        no ``peft_config``, and TRL adds its frozen reference copy when ``beta`` > 0.
    """
    from peft import PeftModel

    from .._trl_compat import create_model

    kwargs = dict(training_args.model_init_kwargs or {})
    if quantization_config is not None:
        kwargs["quantization_config"] = quantization_config
    if training_args.distributed_state.distributed_type in ("MULTI_GPU", "DEEPSPEED"):
        kwargs["device_map"] = None  # as TRL does for a model id: each process holds its own copy
    kwargs.setdefault("trust_remote_code", training_args.trust_remote_code)
    base = create_model(tiny.resolve_model_path(source.base), **kwargs)
    model = PeftModel.from_pretrained(base, source.adapter, is_trainable=True)
    remember_trainable_values(model)  # TRL rounds a quantized model's adapter to bf16; the trainer restores it
    return model


def is_4bit_model(model) -> bool:
    """Whether ``model`` (or the base of a PEFT model) was loaded in 4 bits."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return bool(getattr(base, "is_loaded_in_4bit", False))


def is_quantized_model(model) -> bool:
    """Whether ``model`` (or the base of a PEFT model) was loaded in 4 or 8 bits."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return bool(getattr(base, "is_loaded_in_4bit", False) or getattr(base, "is_loaded_in_8bit", False))


def check_bf16_machine(bf16: Any, use_cpu: Any) -> None:
    """Refuse ``bf16: true`` off the CPU on a machine without a bfloat16 accelerator (`ValueError` with the fix);
    the recipe runs it with the config's other checks, before `GRPOExtConfig` is built (`launch`), and
    `GRPOExtConfig` itself."""
    if bf16 is True and not use_cpu and not bf16_available():
        raise ValueError(
            "bf16=True, but this machine has no accelerator with bfloat16 support. Fix: set `bf16: false` "
            "(training then runs in float32), or `use_cpu: true` to run bf16 autocast on the CPU."
        )


def check_fp16_machine(fp16: Any, use_cpu: Any) -> None:
    """Refuse ``fp16: true`` off the CPU on a machine without a GPU (`ValueError` with the fix): accelerate runs fp16
    autocast on CUDA/XPU/MPS-like devices only, so on a CPU the run would silently stay float32 (``use_cpu: true``
    with fp16: the rule table's ``fp16`` row)."""
    if fp16 is True and not use_cpu and not gpu_available():
        raise ValueError(
            "fp16=True, but this machine has no GPU: accelerate runs no fp16 autocast on a CPU, so the run would stay "
            "float32. Fix: remove fp16 (bf16: true with use_cpu: true runs bf16 autocast on a CPU)."
        )


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
