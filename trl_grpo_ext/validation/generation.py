"""The generation settings a back end would refuse, checked before any model loads (docs/generation.md): vLLM on a
quantized base, ``cache_implementation``, ``generation_kwargs`` and the merged adapter. `training.generation` runs the
generation these settings describe."""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

from ..config.checks import RunArgumentError
from .mappings import as_mapping

#: Name of the logged drift metric (training.generation.BaseDriftMonitor).
DRIFT_METRIC = "vllm/base_drift"
#: Name of the merged-generation opt-in.
MERGE_FOR_GENERATION = "merge_adapter_for_generation"
#: ``generation_kwargs`` keys that fail TRL 1.16's generation at the first step (each tried): more sequences per
#: prompt than num_generations break torch.cat; the others change what generate returns, or need a tokenizer, an
#: assistant model or constrained beam search.
BROKEN_GENERATION_KWARGS = ("num_return_sequences", "n", "return_dict_in_generate", "output_scores", "output_logits",
                            "output_attentions", "output_hidden_states", "stop_strings", "prompt_lookup_num_tokens",
                            "assistant_early_exit", "force_words_ids", "constraints")


def quantized_bits(config: Any) -> int | None:
    """4 or 8: the bits a quantization config (a `BitsAndBytesConfig`, its dict form) loads weights in; None: not
    quantized (or no config)."""
    get = config.get if isinstance(config, Mapping) else lambda flag: getattr(config, flag, False)
    return 4 if get("load_in_4bit") else 8 if get("load_in_8bit") else None


def check_vllm_quantization(args, load_in_4bit: bool, load_in_8bit: bool = False, source: str | None = None) -> None:
    """Refuse `use_vllm` (read from ``args`` with ``allow_vllm_4bit_merge``) on a quantized base, before it loads;
    ``source``: where the quantization was requested (default: the recipe's ``load_in_4bit``).

    Raises:
        ValueError: 4 bit without ``allow_vllm_4bit_merge``; 8 bit (TRL refuses it only after loading)."""
    if not getattr(args, "use_vllm", False):
        return
    where = "" if source is None else f"{source}: "
    if load_in_8bit:
        raise ValueError(f"use_vllm=True with an 8-bit base ({where}load_in_8bit=True): vLLM cannot load an 8-bit "
                         "bitsandbytes model (TRL raises this only after loading the model). Fix: set `use_vllm: "
                         "false`, or use `load_in_4bit: true` (docs/generation.md), or load the base unquantized.")
    if load_in_4bit and not getattr(args, "allow_vllm_4bit_merge", False):
        raise ValueError(
            f"use_vllm=True with a 4-bit base ({where}load_in_4bit=True) is refused: at every weight sync TRL 1.16 "
            "calls merge_adapter() and unmerge_adapter(), which on NF4 re-quantize the frozen base, so it drifts (30% "
            "after 50 syncs, docs/generation.md). Fix: set `use_vllm: false` and generate with transformers "
            "(`use_transformers_continuous_batching: true`, or `cache_implementation: static`), or `load_in_4bit: "
            f"false`, or set `allow_vllm_4bit_merge: true` to run anyway and watch the logged metric `{DRIFT_METRIC}`.")


def check_vllm_settings(values) -> None:
    """`check_vllm_quantization` on a run's fields: ``model_init_kwargs.quantization_config``, then the recipe's
    ``load_in_4bit`` / ``load_in_8bit``."""
    args = SimpleNamespace(use_vllm=values.get("use_vllm"), allow_vllm_4bit_merge=values.get("allow_vllm_4bit_merge"))
    quantization = as_mapping("model_init_kwargs", values.get("model_init_kwargs")).get("quantization_config")
    bits = quantized_bits(quantization)
    check_vllm_quantization(args, bits == 4, bits == 8, source="model_init_kwargs.quantization_config")
    check_vllm_quantization(args, bool(values.get("load_in_4bit")), bool(values.get("load_in_8bit")))


def check_generation_settings(values) -> None:
    """The ``generation`` rule on a `RunView`: refuses a ``cache_implementation`` transformers does not know (its
    `GenerationConfig` refuses it after the model loads) and the ``generation_kwargs`` of `BROKEN_GENERATION_KWARGS`.

    Raises:
        RunArgumentError: naming the field, its value and a fix."""
    cache = values.get("cache_implementation")
    if cache is not None:
        from transformers.generation.configuration_utils import ALL_CACHE_IMPLEMENTATIONS  # imports no torch

        if cache not in ALL_CACHE_IMPLEMENTATIONS:
            raise RunArgumentError(f"cache_implementation={cache!r} is not a transformers cache; choose one of "
                                   f"{', '.join(map(repr, ALL_CACHE_IMPLEMENTATIONS))} (`static` for a static KV "
                                   "cache).")
    kwargs = as_mapping("generation_kwargs", values.get("generation_kwargs"))
    broken = sorted(set(kwargs) & set(BROKEN_GENERATION_KWARGS))
    if broken:
        raise RunArgumentError(
            f"generation_kwargs {broken}: TRL's generation fails on them at the first step (more sequences per "
            "prompt than num_generations, or another return type, a tokenizer, an assistant model or beam "
            "constraints). Fix: remove them from generation_kwargs (num_generations sets the completions per prompt).")


def merge_problem(values, engine, *, quantized: str | None = None, quantized_fix: str = "", dtype: str = "float32",
                  lora_dropout: str | None = None, lora_bias: bool = False) -> str | None:
    """Why the adapter cannot be merged for generation, one line with its fix, or None (shared by the rule
    ``merged_generation`` and `training.merged_generation.check_merge_target`). ``values``: the run's fields (``bf16``,
    ``fp16``, continuous batching); ``engine``: its `config.engines.Engine` (sharded, or casting the whole model).
    Each other argument names a cause as the message shows it (None or False: absent; ``dtype``: the base's load
    dtype); ``quantized_fix``: how to undo the quantization."""
    fix = f"Fix: remove {MERGE_FOR_GENERATION}"
    precision, cast_fix = next(((f"{name}=True", f"set {name}: false") for name in ("bf16", "fp16")
                                if values.get(name)), (None, ""))
    if precision is None and engine.mixed_precision in ("bf16", "fp16"):
        precision = f"mixed_precision={engine.mixed_precision!r} (from {engine.source})"
        cast_fix = "set mixed_precision: 'no' in the accelerate config"
    caster = (engine.describe() if engine.kind == "deepspeed" else "use_transformers_continuous_batching=True"
              if values.get("use_transformers_continuous_batching") else None)
    if quantized:
        return (f"{MERGE_FOR_GENERATION}=True with {quantized}: PEFT would de-quantize, add the adapter and "
                f"re-quantize the base at every generation, and the base would drift (docs/generation.md). {fix}, or "
                f"{quantized_fix}.")
    if dtype != "float32":
        loaded = (f"bf16=True and dtype={dtype!r} (the checkpoint's own dtype)" if dtype == "auto" and values.get("bf16")
                  else f"the base loaded as {dtype!r}")
        return (f"{MERGE_FOR_GENERATION}=True with {loaded}: in bf16 or float16 a LoRA delta smaller than half a "
                f"weight's rounding step vanishes from the merged weight, so generation would ignore it. {fix}, or "
                "load the base with dtype: float32.")
    if engine.kind == "fsdp" or engine.zero_stage == 3:
        return (f"{MERGE_FOR_GENERATION}=True with {engine.describe()}: the base is sharded across processes and cannot "
                f"be merged in place. {fix}.")
    if caster and precision:
        return (f"{MERGE_FOR_GENERATION}=True with {caster} and {precision}: the whole model is cast to that precision, "
                f"and the cast rounds away a small merged LoRA delta. {fix}, or {cast_fix}.")
    if lora_dropout:
        return (f"{MERGE_FOR_GENERATION}=True with lora_dropout={lora_dropout}: TRL generates in training mode, so "
                "unmerged generation applies the adapter's dropout and merged generation would not: the completions "
                f"would be sampled from another policy than TRL's. {fix}, or set lora_dropout: 0 (or disable_dropout: "
                "true).")
    if lora_bias:
        return (f"{MERGE_FOR_GENERATION}=True with lora_bias=True on a layer that has no bias: PEFT cannot merge such "
                f"an adapter. {fix}, or lora_bias=False.")
    return None


def check_merged_generation(values, engine) -> None:
    """:func:`merge_problem` of a run's fields before any model loads (the rule ``merged_generation``); a
    ``model_init_kwargs`` quantization counts. A continued adapter's own ``lora_dropout`` is judged by the trainer
    (`training.merged_generation.check_merge_target`), once loaded.

    Raises:
        RunArgumentError: the problem's line."""
    from ..models.settings import load_dtype
    from .trainer_settings import continued_adapter

    if not values.get(MERGE_FOR_GENERATION):
        return
    quantization = as_mapping("model_init_kwargs", values.get("model_init_kwargs")).get("quantization_config")
    quantized = next((f"{name}=True" for name in ("load_in_4bit", "load_in_8bit") if values.get(name)), None)
    quantized_fix = "load the base unquantized (load_in_4bit: false, load_in_8bit: false)"
    if quantized is None and quantized_bits(quantization):
        quantized = "a quantized base (model_init_kwargs.quantization_config)"
        quantized_fix = "remove quantization_config from model_init_kwargs"
    dropout = float(values.get("lora_dropout") or 0.0) if values.get("use_peft") and not continued_adapter(values) \
        else 0.0
    problem = merge_problem(
        values, engine, quantized=quantized, quantized_fix=quantized_fix,
        dtype=load_dtype(SimpleNamespace(dtype=values.get("dtype")), SimpleNamespace(bf16=values.get("bf16"))),
        lora_dropout=repr(dropout) if dropout > 0 and not values.get("disable_dropout") else None)
    if problem:
        raise RunArgumentError(problem)
