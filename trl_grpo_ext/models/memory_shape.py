"""The inputs of the memory forecast (`plan.memory`) for a run: the model's shape from its config alone (no weights
loaded) and the run's settings from its parsed arguments. Used by ``trl-grpo-ext plan`` and the longest-first probe.

The shape comes from the embedded models' own configs, a local folder's ``config.json``, or (for a Hub id)
``transformers.AutoConfig`` from the local cache (offline: nothing is downloaded here).
"""

from __future__ import annotations

import json
from pathlib import Path

from ..plan.memory import DEFAULT_LORA_TARGETS, MemorySettings, ModelShape

__all__ = ["model_shape", "memory_settings", "ASSUMED_PROMPT_TOKENS", "SMOLLM2_135M_CONFIG"]

#: Prompt tokens the forecast assumes when ``max_prompt_length`` is unset (TRL 1.16 does not truncate prompts).
ASSUMED_PROMPT_TOKENS = 512
#: SmolLM2-135M-Instruct's config.json (HuggingFaceTB/SmolLM2-135M-Instruct; the embedded GGUF converts to it).
SMOLLM2_135M_CONFIG = {"model_type": "llama", "hidden_size": 576, "num_hidden_layers": 30, "num_attention_heads": 9,
                       "num_key_value_heads": 3, "intermediate_size": 1536, "vocab_size": 49152,
                       "tie_word_embeddings": True, "attention_bias": False}


def model_shape(name: str | None) -> ModelShape | None:
    """The shape of ``model_name_or_path`` without loading weights; None when its config cannot be read offline."""
    if not isinstance(name, str) or not name:
        return None
    if name == "embedded:smollm2-135m-instruct":
        return ModelShape.from_config(SMOLLM2_135M_CONFIG)
    if name.startswith("embedded:"):
        from .embedded.tiny import ALPHABET, SPECIAL_TOKENS, TINY_CONFIG

        return ModelShape.from_config({**TINY_CONFIG, "model_type": "qwen2",
                                       "vocab_size": len(SPECIAL_TOKENS) + len(ALPHABET)})
    path = Path(name) / "config.json"
    if path.is_file():
        return ModelShape.from_config(json.loads(path.read_text(encoding="utf-8")))
    try:
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(name, local_files_only=True)
    except (OSError, ValueError):
        return None
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    return ModelShape.from_config(config.to_dict())


def _bytes(dtype_name: str | None) -> int:
    return 4 if dtype_name in (None, "float32", "auto") else 2


def memory_settings(plan, training, model_args, max_prompt_length: int | None, cuda: bool) -> MemorySettings:
    """`MemorySettings` of a run: ``plan`` (`RunPlan`), ``training`` (`GRPOExtConfig` or its twin), ``model_args``
    (TRL's `ModelConfig` or its twin), the recipe's ``max_prompt_length`` (None: `ASSUMED_PROMPT_TOKENS`), and
    whether the run is on CUDA (TRL's fused head then scores only completion tokens)."""
    from .settings import load_dtype

    mixed = bool(getattr(training, "bf16", False) or getattr(training, "fp16", False))  # autocast: 16-bit products
    loaded = load_dtype(model_args, training)  # "auto": the checkpoint's own dtype, 16-bit for the models here
    weight = 2 if loaded == "auto" else _bytes(loaded)
    compute = 2 if mixed else weight
    four_bit = bool(getattr(model_args, "load_in_4bit", False))
    targets = getattr(model_args, "lora_target_modules", None) or DEFAULT_LORA_TARGETS
    adapter = (4 if getattr(training, "adapter_dtype", "float32") == "float32" else 2) if four_bit else weight
    backend = "transformers"
    if getattr(training, "use_vllm", False):
        backend = "vllm_colocate" if getattr(training, "vllm_mode", "colocate") == "colocate" else "vllm_server"
    return MemorySettings(
        micro_batch_size=plan.micro_batch_size, generation_batch=plan.generation_batch_size // plan.world_size,
        max_prompt_length=max_prompt_length or ASSUMED_PROMPT_TOKENS,
        max_completion_length=plan.max_completion_length, compute_bytes=compute, weight_bytes=weight,
        load_in_4bit=four_bit, double_quant=bool(getattr(model_args, "use_bnb_nested_quant", False)),
        use_peft=bool(getattr(model_args, "use_peft", False)), lora_r=getattr(model_args, "lora_r", 16) or 16,
        lora_targets=targets if isinstance(targets, str) else tuple(targets),
        lora_dropout=getattr(model_args, "lora_dropout", 0.05) or 0.0, adapter_bytes=adapter,
        modules_to_save=tuple(getattr(model_args, "lora_modules_to_save", None) or ()),
        beta=getattr(training, "beta", 0.0) or 0.0,
        gradient_checkpointing=bool(getattr(training, "gradient_checkpointing", True)), compact_head=cuda,
        generation_backend=backend,
        vllm_gpu_memory_utilization=getattr(training, "vllm_gpu_memory_utilization", 0.3) or 0.3,
        attention="eager" if getattr(model_args, "attn_implementation", None) == "eager" else "sdpa")
