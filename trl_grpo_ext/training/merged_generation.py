"""`merge_adapter_for_generation`: the LoRA adapter merged into a float32 base for each generation, the base written
back exactly after it (docs/generation.md, "Merging the adapter for generation")."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from typing import Any

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
    from .generation import as_dict, is_4bit, is_8bit

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


def check_merge_target(model, args: Any, engine) -> None:
    """:func:`merge_problem` of a loaded ``model`` and the trainer's ``args`` (for a model built in Python; the rule
    checks the recipe's settings before loading). Only the active adapters are judged.

    Args:
        model: the trainer's model. args (`GRPOExtConfig`): reads ``use_vllm``, the continuous batching flag, ``bf16``
            and ``fp16``. engine (`config.engines.Engine`): the run's engine (``resolve_engine(vars(args))``: its
            fields, else the launch environment, with accelerate's ``mixed_precision``).

    Raises:
        ValueError: not a PEFT model, or the problem's line (a quantized or not float32 adapted base weight ...)."""
    import torch
    from peft.tuners.tuners_utils import BaseTunerLayer

    if not hasattr(model, "merge_adapter"):
        raise ValueError(f"{MERGE_FOR_GENERATION}=True needs a LoRA adapter to merge, but the model is a "
                         f"{type(model).__name__}. Fix: remove {MERGE_FOR_GENERATION}, or pass peft_config= "
                         "(use_peft: true).")
    layers = [layer for layer in model.modules() if isinstance(layer, BaseTunerLayer)]
    dtypes = {layer.get_base_layer().weight.dtype for layer in layers}
    quantized = next((str(d).removeprefix("torch.") for d in dtypes if not d.is_floating_point), None)
    floating = sorted(str(d).removeprefix("torch.") for d in dtypes if d.is_floating_point and d != torch.float32)
    active = [(layer, name) for layer in layers for name in layer.active_adapters
              if name in getattr(layer, "lora_A", {})]
    dropout = max((float(getattr(layer.lora_dropout[name], "p", 0.0)) for layer, name in active), default=0.0)
    bias = any(getattr(layer, "lora_bias", {}).get(name) and getattr(layer.get_base_layer(), "bias", None) is None
               for layer, name in active)
    problem = merge_problem(
        quantized=f"a quantized base (adapted weights stored as {quantized})" if quantized else None,
        quantized_fix="load the base in float32 without quantization", dtype=floating[0] if floating else "float32",
        use_vllm=bool(getattr(args, "use_vllm", False)), **_engine_problem(vars(args), engine), lora_bias=bias,
        lora_dropout=repr(dropout) if dropout > 0 else None)
    if problem:
        raise ValueError(problem)


@contextlib.contextmanager
def merged_adapter(model) -> Iterator[int]:
    """The active LoRA adapter of ``model`` merged into its base for the block (each layer's PEFT ``merge``: W +
    (lora_alpha / r) B A): generation then runs one matrix product per adapted layer instead of three. After the
    block (an error inside it or in a merge included) each merged layer is unmerged and its base weight set back to a
    copy taken before, so no rounding of W + ΔW − ΔW is left (memory: one copy of the merged base weights).

    A base weight shared with another module (tied input and output embeddings) is not merged: merging it would change
    the other module too (its adapter then runs unmerged, as without this block).

    Args:
        model: a PEFT model over a float32 base that is not quantized (:func:`check_merge_target`).

    Yields:
        int: how many adapted layers were merged (layers without an active adapter merge nothing)."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    owners = Counter(id(param) for module in model.modules() for param in module.parameters(recurse=False))
    layers = [layer for layer in model.modules() if isinstance(layer, BaseTunerLayer)
              and owners[id(layer.get_base_layer().weight)] == 1]
    saved = [(layer.get_base_layer().weight, layer.get_base_layer().weight.detach().clone()) for layer in layers]
    try:
        for layer in layers:
            layer.merge()
        yield sum(bool(layer.merged) for layer in layers)
    finally:
        for layer in layers:
            if layer.merged:
                layer.unmerge()
        for weight, copy_ in saved:  # `.data =`: PEFT's unmerge of some variants (DoRA) replaces the tensor
            weight.data = copy_

