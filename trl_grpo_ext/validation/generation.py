"""The generation settings a back end would refuse or silently ignore, checked before any model loads
(docs/generation.md): vLLM on a 4-bit base, continuous batching, caches and ``generation_kwargs``.
`training.generation` runs the generation these settings describe."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

#: Name of the logged drift metric (training.generation.BaseDriftMonitor).
DRIFT_METRIC = "vllm/base_drift"
#: Name of the opt-in that lets `use_vllm` run on a 4-bit base.
VLLM_4BIT_OPT_IN = "allow_vllm_4bit_merge"
#: Generation kwargs that continuous batching drops (transformers marks their logits processors
#: ``supports_continuous_batching = False``); the top-level field is named where one exists.
CB_UNSUPPORTED_GENERATION_KWARGS = ("min_new_tokens", "min_length", "encoder_repetition_penalty")
# (repetition_penalty in generation_kwargs is refused for every back end: SHADOWED_GENERATION_KWARGS)

#: ``generation_kwargs`` keys that would override a setting TRL builds from a field (TRL 1.16 updates its own
#: ``GenerationConfig`` / vLLM ``SamplingParams`` arguments with ``generation_kwargs``), with that field.
SHADOWED_GENERATION_KWARGS = {
    "max_new_tokens": "max_completion_length", "max_length": "max_completion_length",
    "max_tokens": "max_completion_length", "num_return_sequences": "num_generations", "n": "num_generations",
    **{name: name for name in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "cache_implementation")},
}

#: ``generation_kwargs`` keys of `SHADOWED_GENERATION_KWARGS` that break the run: more sequences per prompt than TRL's
#: own broke torch.cat at the first step (measured); the others are applied, as TRL applies them.
BREAKING_GENERATION_KWARGS = ("num_return_sequences", "n")
#: TRL 1.16's defaults of the fields a ``generation_kwargs`` key may duplicate ("also set" means another value).
_TRL_GENERATION_DEFAULTS = {"max_completion_length": 512, "temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": None,
                            "repetition_penalty": 1.0, "cache_implementation": None, "num_generations": 8}

#: ``generation_kwargs`` keys that fail TRL 1.16's generation at the first step (a breaker's finding, each tried):
#: a dict return, stop strings (generate needs the tokenizer), assisted or constrained generation.
UNUSABLE_GENERATION_KWARGS = ("return_dict_in_generate", "output_scores", "output_logits", "output_attentions",
                              "output_hidden_states", "stop_strings", "prompt_lookup_num_tokens",
                              "assistant_early_exit", "force_words_ids", "constraints")


def vllm_4bit_refusal(what: str) -> str:
    """The one-paragraph refusal for `use_vllm` on a 4-bit base. ``what`` names how the base is quantized."""
    return (
        f"use_vllm=True with a 4-bit base ({what}) is refused: TRL 1.16 hands the weights to vLLM by calling "
        "merge_adapter() and then unmerge_adapter() on the PEFT model at every weight sync (once per generation "
        "batch), and on a 4-bit NF4 base each merge and unmerge de-quantizes the frozen weights, adds or subtracts "
        "the LoRA delta and quantizes them again, so rounding errors pile up in the frozen base: on one 1024 x 1024 "
        "NF4 layer with LoRA r 16, the de-quantized base moved 30% (relative Frobenius norm) from its start after "
        "50 syncs with lora_B of std 1e-4, and 253% with 1e-3, and the model you train is no longer the base you "
        "loaded plus the adapter you save. Fix: set `use_vllm: false` and generate with transformers "
        "(`use_transformers_continuous_batching: true`, or `cache_implementation: static`; see docs/generation.md), "
        f"or load the base unquantized (`load_in_4bit: false`), or set `{VLLM_4BIT_OPT_IN}: true` to run anyway "
        f"and watch the logged metric `{DRIFT_METRIC}`."
    )


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
    """Refuse `use_vllm` on a quantized base, before any model loads.

    Args:
        args (`GRPOExtConfig`): reads ``use_vllm`` and ``allow_vllm_4bit_merge``.
        load_in_4bit (`bool`): the base is (or will be) loaded in 4 bit.
        load_in_8bit (`bool`, defaults to `False`): the base is (or will be) loaded in 8 bit.
        source (`str`, *optional*): where the quantization was requested, for the message (e.g.
            ``"model_init_kwargs.quantization_config"``); the recipe's ``load_in_4bit`` field when unset.

    Raises:
        ValueError: 4 bit without ``allow_vllm_4bit_merge`` (the paragraph of :func:`vllm_4bit_refusal`); 8 bit in
            any case (TRL's `VLLMGeneration` refuses it too, but only after loading the model).
    """
    if not getattr(args, "use_vllm", False):
        return
    where = "" if source is None else f"{source}: "
    if load_in_8bit:
        raise ValueError(
            f"use_vllm=True with an 8-bit base ({where}load_in_8bit=True): vLLM cannot load an 8-bit "
            "bitsandbytes model (TRL raises this only after loading the model). Fix: set `use_vllm: false`, or use "
            "`load_in_4bit: true` (see docs/generation.md), or load the base unquantized."
        )
    if load_in_4bit and not getattr(args, VLLM_4BIT_OPT_IN, False):
        raise ValueError(vllm_4bit_refusal(f"{where}load_in_4bit=True"))



def check_vllm_settings(values) -> None:
    """`check_vllm_quantization` on a run's fields (anything with ``.get``): ``model_init_kwargs.quantization_config``,
    then the recipe's ``load_in_4bit`` / ``load_in_8bit``."""
    from types import SimpleNamespace

    args = SimpleNamespace(use_vllm=bool(values.get("use_vllm")), allow_vllm_4bit_merge=bool(values.get(VLLM_4BIT_OPT_IN)))
    quantization = as_dict(values.get("model_init_kwargs")).get("quantization_config")
    if is_4bit(quantization) or is_8bit(quantization):
        check_vllm_quantization(args, is_4bit(quantization), is_8bit(quantization),
                                source="model_init_kwargs.quantization_config")
    check_vllm_quantization(args, bool(values.get("load_in_4bit")), bool(values.get("load_in_8bit")))


def check_generation_settings(values, on_cpu: bool) -> None:
    """Refuse generation settings that TRL 1.16 would silently ignore or that cannot work (`validation.rules`'s
    ``generation`` rule).

    Args:
        values: the run's fields (anything with ``.get``: a `validation.rules.RunView` or a mapping).
        on_cpu (`bool`): training runs on the CPU.

    Raises:
        RunArgumentError: naming the field, its value and a fix, when
            - ``use_vllm`` and ``use_transformers_continuous_batching`` are both set (TRL uses vLLM);
            - ``cache_implementation`` is set with vLLM or continuous batching (TRL passes it only to
              ``model.generate``), or is not a cache transformers knows;
            - continuous batching with ``repetition_penalty`` != 1 or a ``generation_kwargs`` key it drops
              (:data:`CB_UNSUPPORTED_GENERATION_KWARGS`);
            - continuous batching on a CPU without ``num_blocks`` in ``transformers_continuous_batching_config``
              (its cache is then sized from free host memory: 6.8 GB resident for the 81k-parameter tiny model);
            - ``allow_vllm_4bit_merge`` without ``use_vllm``;
            - a ``generation_kwargs`` key that overrides a field, ``do_sample``, or one generation would ignore
              (`_check_generation_kwargs`).
    """
    from ..config.checks import RunArgumentError, as_number

    def get(name, default=None):
        return getattr(values.get(name, default), "value", values.get(name, default))

    use_vllm = bool(get("use_vllm"))
    cb = bool(get("use_transformers_continuous_batching") or get("use_transformers_paged"))  # TRL's alias
    cache = get("cache_implementation")
    if get(VLLM_4BIT_OPT_IN) and not use_vllm:
        raise RunArgumentError(f"{VLLM_4BIT_OPT_IN}=True does nothing without use_vllm=True (it only lets vLLM run on "
                               f"a 4-bit base). Fix: remove `{VLLM_4BIT_OPT_IN}`.")
    if use_vllm and cb:
        raise RunArgumentError(
            "use_vllm=True and use_transformers_continuous_batching=True: TRL generates with vLLM and ignores "
            "continuous batching. Fix: keep one of them (`use_vllm: false` for continuous batching).")
    if cache is not None:
        if use_vllm or cb:
            backend = "use_vllm=True" if use_vllm else "use_transformers_continuous_batching=True"
            raise RunArgumentError(
                f"cache_implementation={cache!r} with {backend}: that back end manages its own KV cache and TRL passes "
                "cache_implementation only to model.generate. Fix: remove `cache_implementation`, or set "
                f"`{backend.split('=')[0]}: false`.")
        from transformers.generation.configuration_utils import ALL_CACHE_IMPLEMENTATIONS  # imports no torch

        if cache not in ALL_CACHE_IMPLEMENTATIONS:
            raise RunArgumentError(f"cache_implementation={cache!r} is not a transformers cache; choose one of "
                                   f"{', '.join(map(repr, ALL_CACHE_IMPLEMENTATIONS))} (`static` for a static KV "
                                   "cache).")
    _check_generation_kwargs(as_dict(get("generation_kwargs")), use_vllm, get)
    if not cb:
        return
    penalty = as_number(get("repetition_penalty", 1.0))
    if penalty is not None and penalty != 1.0:
        raise RunArgumentError(
            f"repetition_penalty={get('repetition_penalty')} with use_transformers_continuous_batching=True: "
            "continuous batching drops the repetition-penalty logits processor, so it would not apply. Fix: set "
            "`repetition_penalty: 1.0`, or `use_transformers_continuous_batching: false`.")
    dropped = sorted(set(as_dict(get("generation_kwargs"))) & set(CB_UNSUPPORTED_GENERATION_KWARGS))
    if dropped:
        raise RunArgumentError(
            f"generation_kwargs {dropped} with use_transformers_continuous_batching=True: continuous batching drops "
            "these logits processors, so they would not apply. Fix: remove them from `generation_kwargs`, or set "
            "`use_transformers_continuous_batching: false`.")
    cb_config = as_dict(get("transformers_continuous_batching_config"))
    if on_cpu and cb_config.get("num_blocks") is None:
        raise RunArgumentError(
            "use_transformers_continuous_batching=True on a CPU without `num_blocks` in "
            f"transformers_continuous_batching_config ({cb_config}): transformers then sizes the KV cache from "
            "free host memory (6.8 GB resident for the 81k-parameter tiny model, measured). Fix: set e.g. "
            "`transformers_continuous_batching_config: {num_blocks: 8, page_size: 64, max_batch_tokens: 512}`.")


def _check_generation_kwargs(kwargs: dict, use_vllm: bool, get=None) -> None:
    """Check ``generation_kwargs`` as TRL 1.16 applies them (it updates its own ``GenerationConfig`` / vLLM
    ``SamplingParams`` arguments with them, so a key wins over the field it duplicates).

    Refused (`RunArgumentError` naming the key and the fix), each breaking the run: ``num_return_sequences`` / ``n``
    (`BREAKING_GENERATION_KWARGS`: TRL's batch shapes), keys its generation cannot use (`UNUSABLE_GENERATION_KWARGS`),
    ``do_sample`` other than true (GRPO samples: greedy makes every group uniform). Accepted with a warning: without
    vLLM, keys `transformers.GenerationConfig` does not have (generation ignores them: `IneffectiveSettingWarning`); a
    key that duplicates a field (`SHADOWED_GENERATION_KWARGS`) when that field is set too (``get(field)`` differs from
    TRL's default: the key's value is the one used), and a completion-length key always (the plan counts tokens with
    ``max_completion_length``)."""
    import warnings

    from ..config.checks import IneffectiveSettingWarning, RunArgumentError

    broken = {key: SHADOWED_GENERATION_KWARGS[key] for key in kwargs if key in BREAKING_GENERATION_KWARGS}
    if broken:
        fields = ", ".join(f"{key} -> {field}: {kwargs[key]!r}" for key, field in broken.items())
        raise RunArgumentError(
            f"generation_kwargs {sorted(broken)}: TRL generates num_generations completions per prompt itself, so more "
            f"sequences per prompt break its batch shapes at the first step. Fix: set the field instead ({fields}) and "
            "remove the key from generation_kwargs.")
    for key in sorted(set(kwargs) & set(SHADOWED_GENERATION_KWARGS)):
        field = SHADOWED_GENERATION_KWARGS[key]
        value = get(field) if get is not None else None
        also_set = value is not None and value != _TRL_GENERATION_DEFAULTS.get(field)
        if field == "max_completion_length":
            warnings.warn(f"generation_kwargs {key}={kwargs[key]!r} sets the completion length (TRL applies "
                          "generation_kwargs over its own settings); the plan counts tokens with "
                          f"max_completion_length={value!r}. Set max_completion_length instead to keep them equal.",
                          UserWarning, stacklevel=2)
        elif also_set:
            warnings.warn(f"generation_kwargs {key}={kwargs[key]!r} and {field}={value!r} are both set: TRL applies "
                          f"generation_kwargs over its own settings, so {key}={kwargs[key]!r} is used. Keep one.",
                          UserWarning, stacklevel=2)
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
    if not use_vllm:
        from transformers import GenerationConfig

        unknown = sorted(set(kwargs) - set(GenerationConfig().to_dict()))
        if unknown:  # TRL accepts them and the run trains: they have no effect
            warnings.warn(
                f"generation_kwargs {unknown}: not a transformers GenerationConfig setting, so generation ignores "
                "them. Fix: remove them, or use a GenerationConfig name (e.g. no_repeat_ngram_size, "
                "suppress_tokens).", IneffectiveSettingWarning, stacklevel=2)


def as_dict(value) -> dict:
    """A dict field as TRL will see it: a JSON string from the command line is parsed only later, in
    `TrainingArguments.__post_init__`; anything unparsable is left for TRL to report."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return dict(value) if isinstance(value, Mapping) else {}


#: Name of the opt-in field.
MERGE_FOR_GENERATION = "merge_adapter_for_generation"


def merge_problem(*, quantized: str | None = None, quantized_fix: str = "", dtype: str = "float32",
                  bf16: bool = False, use_vllm: bool = False, sharded: str | None = None, cast: str | None = None,
                  cast_fix: str = "", lora_dropout: str | None = None,
                  dropout_fix: str = "set lora_dropout: 0 (or disable_dropout: true)", lora_bias: bool = False,
                  ) -> str | None:
    """Why the adapter cannot be merged for generation, as one line with its fix, or None (the rule
    ``merged_generation`` and :func:`check_merge_target` share it).

    Args:
        quantized: how the base is quantized (e.g. ``"load_in_4bit=True"``), or None; quantized_fix: how to undo it.
        dtype: the dtype the base loads in (``models.settings.load_dtype``: ``"auto"`` is the checkpoint's own).
        bf16: the run's ``bf16``. use_vllm: TRL generates with vLLM. sharded: the engine that shards the base (ZeRO-3,
        FSDP), or None. cast: what casts the whole model to bf16/fp16 after loading (DeepSpeed, or TRL's continuous
        batching) and under which setting, or None; cast_fix: how to turn that setting off. lora_dropout: the adapter's
        dropout probability as written (e.g. ``"0.05 (TRL's ModelConfig default)"``) when above 0, else None;
        dropout_fix: how to zero it.
        lora_bias: an adapter with ``lora_bias`` on a layer without a bias (PEFT cannot merge it)."""
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


def _precision(values, engine) -> tuple[str | None, str]:
    """The bf16/fp16 setting under which the model is cast, and how to turn it off."""
    for name in ("bf16", "fp16"):
        if values.get(name):
            return f"{name}=True", f"set {name}: false"
    if engine.mixed_precision in ("bf16", "fp16"):
        return (f"mixed_precision={engine.mixed_precision!r} (from {engine.source})",
                "set mixed_precision: 'no' in the accelerate config")
    return None, ""


def _engine_problem(values, engine) -> dict[str, Any]:
    """`merge_problem`'s engine arguments of a run's fields and `config.engines.Engine`: the sharding engine (ZeRO-3,
    FSDP), and what casts the model to bf16/fp16 (DeepSpeed, continuous batching) with the fix."""
    precision, cast_fix = _precision(values, engine)
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
    if not isinstance(name, str) or not name:
        return None
    try:
        source = resolve_model_source(name)
        if source.continued:
            return float(json.loads(Path(source.adapter, "adapter_config.json").read_text()).get("lora_dropout") or 0)
    except (ValueError, OSError, TypeError):
        return None
    return None


def check_merged_generation(values, engine, user=None) -> None:
    """:func:`merge_problem` of a run's fields before any model loads (the rule ``merged_generation``; ``use_peft``
    is `tables.REQUIRES`'s). A quantization in ``model_init_kwargs`` counts as the recipe's own; a continued adapter's
    own ``lora_dropout`` is judged, not the field's; ``disable_dropout`` zeroes it.

    Args:
        values: the run's fields (anything with ``.get``). engine (`config.engines.Engine`): the run's engine. user:
            the keys the user set (None: unknown), to say when ``lora_dropout`` is TRL's default.

    Raises:
        RunArgumentError: the problem's line."""
    from types import SimpleNamespace

    from ..config.checks import RunArgumentError
    from ..models.settings import load_dtype

    if not values.get(MERGE_FOR_GENERATION):
        return
    quantization = as_dict(values.get("model_init_kwargs")).get("quantization_config")
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
