"""The generation settings a back end would refuse or ignore, checked before any model loads (docs/generation.md):
vLLM on a quantized base, continuous batching, caches, ``generation_kwargs`` and the merged adapter.
`training.generation` runs the generation these settings describe."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..config.checks import RunArgumentError, as_number
from .mappings import as_mapping

#: Name of the logged drift metric (training.generation.BaseDriftMonitor).
DRIFT_METRIC = "vllm/base_drift"
#: Name of the opt-in that lets `use_vllm` run on a 4-bit base.
VLLM_4BIT_OPT_IN = "allow_vllm_4bit_merge"
#: Name of the merged-generation opt-in.
MERGE_FOR_GENERATION = "merge_adapter_for_generation"
#: Generation kwargs whose logits processors continuous batching drops (``supports_continuous_batching = False``).
CB_UNSUPPORTED_GENERATION_KWARGS = ("min_new_tokens", "min_length", "encoder_repetition_penalty")
#: ``generation_kwargs`` keys that override a field TRL 1.16 builds its generation arguments from, with that field.
SHADOWED_GENERATION_KWARGS = {
    "max_new_tokens": "max_completion_length", "max_length": "max_completion_length",
    "max_tokens": "max_completion_length", "num_return_sequences": "num_generations", "n": "num_generations",
    **{name: name for name in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "cache_implementation")},
}
#: Keys that fail TRL 1.16's generation at the first step (each tried): more sequences per prompt than
#: num_generations break torch.cat; the others change what generate returns, or need a tokenizer, an assistant model
#: or constrained beam search.
BREAKING_GENERATION_KWARGS = ("num_return_sequences", "n")
UNUSABLE_GENERATION_KWARGS = ("return_dict_in_generate", "output_scores", "output_logits", "output_attentions",
                              "output_hidden_states", "stop_strings", "prompt_lookup_num_tokens",
                              "assistant_early_exit", "force_words_ids", "constraints")


def vllm_4bit_refusal(what: str) -> str:
    """The refusal of `use_vllm` on a 4-bit base; ``what`` names how the base is quantized."""
    return (f"use_vllm=True with a 4-bit base ({what}) is refused: at every weight sync TRL 1.16 calls merge_adapter() "
            "and unmerge_adapter(), which on NF4 de-quantize, add or subtract the LoRA delta and re-quantize the "
            "frozen base, so it drifts (30% relative norm after 50 syncs, one 1024 x 1024 layer, r 16). Fix: set "
            "`use_vllm: false` and generate with transformers (`use_transformers_continuous_batching: true`, or "
            "`cache_implementation: static`; docs/generation.md), or `load_in_4bit: false`, or set "
            f"`{VLLM_4BIT_OPT_IN}: true` to run anyway and watch the logged metric `{DRIFT_METRIC}`.")


def is_4bit(quantization_config: Any) -> bool:
    """Whether a quantization config (a `BitsAndBytesConfig`, its dict form, or None) loads weights in 4 bit."""
    return _loads_in(quantization_config, "load_in_4bit")


def is_8bit(quantization_config: Any) -> bool:
    """Whether a quantization config (a `BitsAndBytesConfig`, its dict form, or None) loads weights in 8 bit."""
    return _loads_in(quantization_config, "load_in_8bit")


def _loads_in(quantization_config: Any, flag: str) -> bool:
    if isinstance(quantization_config, Mapping):
        return bool(quantization_config.get(flag))
    return bool(getattr(quantization_config, flag, False))


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
    if load_in_4bit and not getattr(args, VLLM_4BIT_OPT_IN, False):
        raise ValueError(vllm_4bit_refusal(f"{where}load_in_4bit=True"))


def check_vllm_settings(values) -> None:
    """`check_vllm_quantization` on a run's fields: ``model_init_kwargs.quantization_config``, then the recipe's
    ``load_in_4bit`` / ``load_in_8bit``."""
    from types import SimpleNamespace

    args = SimpleNamespace(use_vllm=values.get("use_vllm"), allow_vllm_4bit_merge=values.get(VLLM_4BIT_OPT_IN))
    quantization = as_mapping("model_init_kwargs", values.get("model_init_kwargs")).get("quantization_config")
    if is_4bit(quantization) or is_8bit(quantization):
        check_vllm_quantization(args, is_4bit(quantization), is_8bit(quantization),
                                source="model_init_kwargs.quantization_config")
    check_vllm_quantization(args, bool(values.get("load_in_4bit")), bool(values.get("load_in_8bit")))


def check_generation_settings(values, on_cpu: bool) -> None:
    """The ``generation`` rule on a `RunView`: refuses what fails the run (an unknown ``cache_implementation``, the
    ``generation_kwargs`` of :func:`_check_generation_kwargs`, continuous batching on a CPU without ``num_blocks``:
    its KV cache is then sized from free host memory, 6.8 GB for the tiny model) and warns about settings the chosen
    back end ignores.

    Raises:
        RunArgumentError: naming the field, its value and a fix."""
    use_vllm = bool(values.get("use_vllm"))
    cb = bool(values.get("use_transformers_continuous_batching") or values.get("use_transformers_paged"))  # an alias
    cache, kwargs = values.get("cache_implementation"), as_mapping("generation_kwargs", values.get("generation_kwargs"))
    backend = "use_vllm" if use_vllm else "use_transformers_continuous_batching" if cb else None
    if values.get(VLLM_4BIT_OPT_IN) and not use_vllm:
        values.warn(f"{VLLM_4BIT_OPT_IN}=True has no effect without use_vllm=True (it only lets vLLM run on a 4-bit "
                    f"base). Fix: remove {VLLM_4BIT_OPT_IN}.")
    if use_vllm and cb:
        values.warn("use_transformers_continuous_batching=True has no effect with use_vllm=True: TRL generates with "
                    "vLLM. Fix: keep one of them (`use_vllm: false` for continuous batching).")
    if cache is not None and backend:
        values.warn(f"cache_implementation={cache!r} has no effect with {backend}=True: that back end manages its own KV "
                    f"cache. Fix: remove cache_implementation, or set {backend}: false.")
    elif cache is not None:
        from transformers.generation.configuration_utils import ALL_CACHE_IMPLEMENTATIONS  # imports no torch

        if cache not in ALL_CACHE_IMPLEMENTATIONS:
            raise RunArgumentError(f"cache_implementation={cache!r} is not a transformers cache; choose one of "
                                   f"{', '.join(map(repr, ALL_CACHE_IMPLEMENTATIONS))} (`static` for a static KV "
                                   "cache).")
    _check_generation_kwargs(kwargs, use_vllm, values)
    if not cb or use_vllm:
        return
    dropped = [f"repetition_penalty={values.get('repetition_penalty')}"] if \
        as_number(values.get("repetition_penalty", 1.0)) not in (None, 1.0) else []
    dropped += [f"generation_kwargs {key}" for key in sorted(set(kwargs) & set(CB_UNSUPPORTED_GENERATION_KWARGS))]
    if dropped:
        values.warn(f"{', '.join(dropped)} has no effect with use_transformers_continuous_batching=True: it drops "
                    "those logits processors. Fix: remove it, or set use_transformers_continuous_batching: false.")
    cb_config = as_mapping("transformers_continuous_batching_config",
                           values.get("transformers_continuous_batching_config"))
    if on_cpu and cb_config.get("num_blocks") is None:
        raise RunArgumentError(
            "use_transformers_continuous_batching=True on a CPU without `num_blocks` in "
            f"transformers_continuous_batching_config ({dict(cb_config)}): transformers then sizes the KV cache from "
            "free host memory (6.8 GB resident for the 81k-parameter tiny model, measured). Fix: set e.g. "
            "`transformers_continuous_batching_config: {num_blocks: 8, page_size: 64, max_batch_tokens: 512}`.")


def _check_generation_kwargs(kwargs: Mapping, use_vllm: bool, view) -> None:
    """``generation_kwargs`` as TRL 1.16 applies them (over its own generation arguments). Refused: the keys of
    `BREAKING_GENERATION_KWARGS` and `UNUSABLE_GENERATION_KWARGS`, and ``do_sample`` other than true (greedy makes every
    group uniform). Warned: a key that duplicates a field the user set too (the key wins), a completion-length key
    (the plan counts ``max_completion_length``), and without vLLM a key `GenerationConfig` does not have."""
    broken = [key for key in kwargs if key in BREAKING_GENERATION_KWARGS]
    if broken:
        fields = ", ".join(f"{key} -> {SHADOWED_GENERATION_KWARGS[key]}: {kwargs[key]!r}" for key in broken)
        raise RunArgumentError(
            f"generation_kwargs {sorted(broken)}: TRL generates num_generations completions per prompt itself, so more "
            f"sequences per prompt break its batch shapes at the first step. Fix: set the field instead ({fields}) and "
            "remove the key from generation_kwargs.")
    unusable = sorted(set(kwargs) & set(UNUSABLE_GENERATION_KWARGS))
    if unusable:
        raise RunArgumentError(
            f"generation_kwargs {unusable}: TRL's generation cannot use them (they change what generate returns, or "
            "need a tokenizer, an assistant model or constrained beam search, and the first step fails). Fix: remove "
            "them from generation_kwargs.")
    if kwargs.get("do_sample", True) is not True:  # True is TRL's own setting
        raise RunArgumentError(
            f"generation_kwargs do_sample={kwargs['do_sample']!r}: GRPO samples G completions per prompt (TRL sets "
            "do_sample=True); greedy decoding makes all G alike, so every group would be uniform. Fix: remove "
            "do_sample from generation_kwargs (temperature sets how much the completions differ).")
    for key in sorted(set(kwargs) & set(SHADOWED_GENERATION_KWARGS)):
        field = SHADOWED_GENERATION_KWARGS[key]
        if field == "max_completion_length":
            view.warn(f"generation_kwargs {key}={kwargs[key]!r} sets the completion length (TRL applies "
                      "generation_kwargs over its own settings); the plan counts tokens with max_completion_length="
                      f"{view.get(field)!r}. Fix: set max_completion_length instead.")
        elif view.is_set(field):
            view.warn(f"generation_kwargs {key}={kwargs[key]!r} and {field}={view.get(field)!r} are both set: TRL "
                      f"applies generation_kwargs over its own settings, so {key}={kwargs[key]!r} is used. Fix: keep "
                      "one.")
    if not use_vllm:
        from transformers import GenerationConfig

        unknown = sorted(set(kwargs) - set(GenerationConfig().to_dict()))
        if unknown:
            view.warn(f"generation_kwargs {unknown}: not a transformers GenerationConfig setting, so generation ignores "
                      "them. Fix: remove them, or use a GenerationConfig name (e.g. no_repeat_ngram_size).")


def merge_problem(*, quantized: str | None = None, quantized_fix: str = "", dtype: str = "float32",
                  bf16: bool = False, use_vllm: bool = False, sharded: str | None = None, cast: str | None = None,
                  cast_fix: str = "", lora_dropout: str | None = None,
                  dropout_fix: str = "set lora_dropout: 0 (or disable_dropout: true)", lora_bias: bool = False,
                  ) -> str | None:
    """Why the adapter cannot be merged for generation, one line with its fix, or None (shared by the rule
    ``merged_generation`` and `training.merged_generation.check_merge_target`). Each argument names a cause as the
    message shows it (None or False: absent; ``dtype``: the base's load dtype) and each ``*_fix`` how to undo it."""
    fix = f"Fix: remove {MERGE_FOR_GENERATION}"
    if quantized:
        return (f"{MERGE_FOR_GENERATION}=True with {quantized}: PEFT would de-quantize, add the adapter and "
                f"re-quantize the base at every generation, and the base would drift (docs/generation.md). {fix}, or "
                f"{quantized_fix}.")
    if dtype != "float32":
        loaded = (f"bf16=True and dtype={dtype!r} (the checkpoint's own dtype)" if dtype == "auto" and bf16
                  else f"the base loaded as {dtype!r}")
        return (f"{MERGE_FOR_GENERATION}=True with {loaded}: in bf16 or float16 a LoRA delta smaller than half a "
                f"weight's rounding step vanishes from the merged weight, so generation would ignore it. {fix}, or "
                "load the base with dtype: float32.")
    if use_vllm:
        return f"{MERGE_FOR_GENERATION}=True with use_vllm=True: TRL already hands vLLM the merged weights. {fix}."
    if sharded:
        return (f"{MERGE_FOR_GENERATION}=True with {sharded}: the base is sharded across processes and cannot be "
                f"merged in place. {fix}.")
    if cast:
        return (f"{MERGE_FOR_GENERATION}=True with {cast}: the whole model is cast to that precision, and the cast "
                f"rounds away a small merged LoRA delta. {fix}, or {cast_fix}.")
    if lora_dropout:
        return (f"{MERGE_FOR_GENERATION}=True with lora_dropout={lora_dropout}: TRL generates in training mode, so "
                "unmerged generation applies the adapter's dropout and merged generation would not: the completions "
                f"would be sampled from another policy than TRL's. {fix}, or {dropout_fix}.")
    if lora_bias:
        return (f"{MERGE_FOR_GENERATION}=True with lora_bias=True on a layer that has no bias: PEFT cannot merge such "
                f"an adapter. {fix}, or lora_bias=False.")
    return None


def _engine_problem(values, engine) -> dict[str, Any]:
    """`merge_problem`'s engine arguments from a run's fields and its `config.engines.Engine`."""
    precision, cast_fix = next(((f"{name}=True", f"set {name}: false") for name in ("bf16", "fp16")
                                if values.get(name)), (None, ""))
    if precision is None and engine.mixed_precision in ("bf16", "fp16"):
        precision = f"mixed_precision={engine.mixed_precision!r} (from {engine.source})"
        cast_fix = "set mixed_precision: 'no' in the accelerate config"
    caster = (engine.describe() if engine.kind == "deepspeed" else "use_transformers_continuous_batching=True"
              if values.get("use_transformers_continuous_batching") else None)
    return {"sharded": engine.describe() if engine.kind == "fsdp" or engine.zero_stage == 3 else None,
            "cast": f"{caster} and {precision}" if caster and precision else None, "cast_fix": cast_fix}


def _adapter_dropout(values) -> float | None:
    """``lora_dropout`` of the adapter a run continues (`models.source`), or None when it continues none."""
    import json
    from pathlib import Path

    from ..models.source import resolve_model_source

    name = values.get("model_name_or_path")
    try:
        source = resolve_model_source(name) if isinstance(name, str) and name else None
        if source is not None and source.continued:
            return float(json.loads(Path(source.adapter, "adapter_config.json").read_text()).get("lora_dropout") or 0)
    except (ValueError, OSError, TypeError):
        pass
    return None


def check_merged_generation(values, engine, user=None) -> None:
    """:func:`merge_problem` of a run's fields before any model loads (the rule ``merged_generation``): a
    ``model_init_kwargs`` quantization counts, a continued adapter's own ``lora_dropout`` is judged, and ``user`` (the
    keys set; None: unknown) tells when ``lora_dropout`` is TRL's default.

    Raises:
        RunArgumentError: the problem's line."""
    from types import SimpleNamespace

    from ..models.settings import load_dtype

    if not values.get(MERGE_FOR_GENERATION):
        return
    quantization = as_mapping("model_init_kwargs", values.get("model_init_kwargs")).get("quantization_config")
    quantized = next((f"{name}=True" for name in ("load_in_4bit", "load_in_8bit") if values.get(name)), None)
    quantized_fix = "load the base unquantized (load_in_4bit: false, load_in_8bit: false)"
    if quantized is None and (is_4bit(quantization) or is_8bit(quantization)):
        quantized = "a quantized base (model_init_kwargs.quantization_config)"
        quantized_fix = "remove quantization_config from model_init_kwargs"
    bf16 = bool(values.get("bf16"))
    dropout, dropout_fix = _adapter_dropout(values), "set disable_dropout: true (it keeps its own lora_dropout)"
    if dropout is None:
        dropout_fix = "set lora_dropout: 0 (or disable_dropout: true)"
        dropout = float(values.get("lora_dropout") or 0.0) if values.get("use_peft") else 0.0
        default = user is not None and "lora_dropout" not in user
        shown = f"{dropout!r} (TRL's ModelConfig default)" if default else repr(dropout)
    else:
        shown = f"{dropout!r} (the continued adapter's, in its adapter_config.json)"
    problem = merge_problem(
        quantized=quantized, quantized_fix=quantized_fix, bf16=bf16,
        dtype=load_dtype(SimpleNamespace(dtype=values.get("dtype")), SimpleNamespace(bf16=bf16)),
        use_vllm=bool(values.get("use_vllm")), **_engine_problem(values, engine),
        lora_dropout=shown if dropout > 0 and not values.get("disable_dropout") else None, dropout_fix=dropout_fix)
    if problem:
        raise RunArgumentError(problem)
