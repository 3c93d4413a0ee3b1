"""Models: loading settings (quantisation, adapters, tokenizers), the model cache and source, and the embedded
models (``models.embedded``).

The public names of ``settings`` (``trl_grpo_ext.models`` was one module before the package was laid out by concern)
load from here on first use, so importing a sibling module stays light.
"""

from .._lazy import _lazy_exports

#: Names re-exported from ``settings``.
_EXPORTS = frozenset({
    "DTYPE_NAMES",
    "EXACT_VALUES_ATTRIBUTE",
    "LORA_FIELDS",
    "bf16_available",
    "check_model_path",
    "compute_dtype_name",
    "continued_lora_differences",
    "is_4bit_model",
    "is_quantized_model",
    "keep_4bit_training_layout",
    "load_continued_model",
    "load_dtype",
    "load_tokenizer",
    "lora_config",
    "quantization_config",
    "remember_trainable_values",
    "run_tokenizer",
    "torch_dtype",
})

__getattr__ = _lazy_exports(__name__, ".settings", _EXPORTS)
