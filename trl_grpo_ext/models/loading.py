"""Loading a run's model and tokenizer as its settings say: bitsandbytes and peft configs, the tokenizer, a continued
adapter on its base, and what a loaded model is (QLoRA: Dettmers et al. 2023, arXiv 2305.14314; LoRA: Hu et al. 2021,
arXiv 2106.09685). The settings themselves (dtypes, model path) are read in `models.settings`."""

from __future__ import annotations

from pathlib import Path

from ..config.checks import check_choice
from .embedded import tiny
from .settings import DTYPE_NAMES, compute_dtype_name
from .source import LORA_FIELDS, ModelSource, lora_differences, read_json, resolve_model_source


def torch_dtype(name: str, field: str = "dtype"):
    """The ``torch.dtype`` of a name of `DTYPE_NAMES`. Raises ValueError (naming ``field``) for another name."""
    import torch

    return getattr(torch, check_choice(field, name, DTYPE_NAMES, error=ValueError))


def quantization_config(model_args, training_args):
    """The `BitsAndBytesConfig` of ``model_args``' ``load_in_8bit`` / ``load_in_4bit`` and ``bnb_4bit_*`` fields
    (computing in :func:`compute_dtype_name`), or None when neither is set."""
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
        **({"bnb_4bit_quant_storage": model_args.bnb_4bit_quant_storage}
           if getattr(model_args, "bnb_4bit_quant_storage", None) else {}),
    )


def lora_config(model_args):
    """TRL's `get_peft_config` (a `peft.LoraConfig` from the ``lora_*`` fields), or None when ``use_peft`` is False."""
    from trl import get_peft_config

    return get_peft_config(model_args)


def load_tokenizer(name: str, path: str, revision: str | None = None):
    """The tokenizer of model ``name`` (resolved to the local ``path``), left-padded; the tiny model's own (AutoTokenizer
    would drop its spaces). Raises ValueError: it cannot be loaded, naming ``name`` and a fix."""
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
    """The run's tokenizer (a continued adapter's saved one, else its base's), with ``chat_template`` (a Jinja
    template) replacing its own when given."""
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


def keep_4bit_training_layout(model) -> int:
    """Stop bitsandbytes 0.50 from repacking 4-bit weights into its CPU inference layout (``Linear4bit`` with
    ``support_avx512bf16_for_cpu``, in eval mode without gradients), after which a training step fails in
    ``bnb.matmul_4bit`` (docs/generation.md). Returns the number of 4-bit layers of ``model`` changed."""
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
    """Keep ``model``'s trainable values, which `adapter_precision.cast_trainable_to` restores after TRL's bf16 cast
    of a quantized model's adapter (instead of bf16-rounded ones). Returns the number of tensors kept."""
    values = {name: param.data for name, param in model.named_parameters() if param.requires_grad}
    model.__dict__[EXACT_VALUES_ATTRIBUTE] = values
    return len(values)


def load_continued_model(source: ModelSource, training_args, quantization_config=None):
    """A continued ``source``'s base, loaded as TRL loads a model id (``training_args.model_init_kwargs``,
    ``quantization_config``), with the earlier adapter on top: a `peft.PeftModel` whose ``"default"`` adapter trains."""
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
