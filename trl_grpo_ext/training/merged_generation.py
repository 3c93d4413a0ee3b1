"""`merge_adapter_for_generation`: the LoRA adapter merged into a float32 base for each generation, the base written
back exactly after it (docs/generation.md, "Merging the adapter for generation")."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from typing import Any

from ..validation.generation import MERGE_FOR_GENERATION, merge_problem


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
        vars(args), engine, quantized=f"a quantized base (adapted weights stored as {quantized})" if quantized else None,
        quantized_fix="load the base in float32 without quantization", dtype=floating[0] if floating else "float32",
        lora_bias=bias, lora_dropout=repr(dropout) if dropout > 0 else None)
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

