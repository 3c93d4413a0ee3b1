"""Generation for a 4-bit QLoRA policy on one GPU: what is refused, what is measured, what is kept intact.

Three generation back ends exist in TRL 1.16 (`trl/trainer/grpo_trainer.py`, `_generate_single_turn`):

- vLLM (`use_vllm: true`). Before each generation batch TRL pushes the policy's weights to the vLLM engine
  (`trl/generation/vllm_generation.py`, `VLLMGeneration._iter_named_params`); for a PEFT model it calls
  ``merge_adapter()`` and then ``unmerge_adapter()``. On a 4-bit NF4 base every merge and unmerge de-quantizes the
  frozen weight, adds or subtracts the LoRA delta and quantizes again (peft ``lora/bnb.py``, ``Linear4bit.merge``), so
  the frozen base drifts a little further from where it started at every sync. :func:`check_vllm_quantization`
  refuses the combination unless ``allow_vllm_4bit_merge`` is set; then :class:`BaseDriftMonitor` measures the drift.
- transformers' continuous batching (`use_transformers_continuous_batching: true`, ``model.generate_batch``). TRL
  casts the whole model to bf16 before it (``unwrapped_model.to(torch.bfloat16)`` when ``bf16``) and never casts it
  back, which would leave a float32 adapter in bf16 for the rest of training; :func:`preserved_dtypes` restores the
  exact float32 tensors afterwards. Its model runner calls ``model.eval()``; on a CPU with AVX512-BF16,
  bitsandbytes then repacks 4-bit weights for inference and the next training forward fails;
  ``models.keep_4bit_training_layout`` (called by the trainer) turns that repacking off.
- ``model.generate`` (the default), with any transformers cache (`cache_implementation: static`).

The settings that would fail generation are refused by ``validation.generation`` (see ``docs/generation.md``).
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Iterator

from ..validation.generation import DRIFT_METRIC, check_vllm_quantization, quantized_bits  # noqa: F401 (trainer.py imports DRIFT_METRIC here)

logger = logging.getLogger(__name__)

#: Relative drift above which the trainer warns once (1%).
DRIFT_WARNING_THRESHOLD = 0.01


def check_vllm_before_loading(model, args, quantization_config) -> None:
    """`check_vllm_quantization` on what a trainer was given, before TRL loads anything: a model id with the
    ``quantization_config=`` argument, or an already loaded (possibly 4-bit) model."""
    if isinstance(model, str):
        bits = quantized_bits(quantization_config)
        check_vllm_quantization(args, bits == 4, bits == 8, source="quantization_config")
        return
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    check_vllm_quantization(args, bool(getattr(base, "is_loaded_in_4bit", False)),
                            bool(getattr(base, "is_loaded_in_8bit", False)), source="the model passed")


class BaseDriftMonitor:
    """How far the frozen 4-bit base of a few fixed LoRA-adapted layers has moved since the monitor was created.

    drift = ‖W_t − W_0‖_F / ‖W_0‖_F over the chosen layers together, where W is the de-quantized weight
    (``bitsandbytes.functional.dequantize_4bit``) of each layer's ``bnb.nn.Linear4bit`` base, W_0 at creation and
    W_t now. A frozen base that is never re-quantized gives exactly 0.

    Args:
        model (`nn.Module`): a PEFT model over a 4-bit bitsandbytes base.
        num_layers (`int`, defaults to `3`): how many adapted 4-bit layers to follow: the first, the middle and the
            last in module order (fewer if the model has fewer).

    Attributes:
        layer_names (`list[str]`): qualified names of the followed base layers.
        history (`list[float]`): every value returned by :meth:`measure`.

    Memory: one copy of the packed 4-bit weights (0.5 byte per weight) and quantization state per followed layer.

    Raises:
        ValueError: the model has no LoRA-adapted 4-bit layer.
    """

    def __init__(self, model, num_layers: int = 3):
        import bitsandbytes as bnb
        from peft.tuners.tuners_utils import BaseTunerLayer

        adapted = [
            (f"{name}.base_layer", module.get_base_layer())
            for name, module in model.named_modules()
            if isinstance(module, BaseTunerLayer) and isinstance(module.get_base_layer(), bnb.nn.Linear4bit)
        ]
        if not adapted:
            raise ValueError("BaseDriftMonitor needs a PEFT model with LoRA on 4-bit (bnb.nn.Linear4bit) layers.")
        picks = sorted({0, len(adapted) // 2, len(adapted) - 1})[:num_layers]
        self._layers = [adapted[i][1] for i in picks]
        self.layer_names = [adapted[i][0] for i in picks]
        self._initial = [(layer.weight.data.clone(), copy.deepcopy(layer.weight.quant_state)) for layer in self._layers]
        self.history: list[float] = []
        self.warned = False  # the drift warning was given

    def measure(self, warn_at_step: int | None = None) -> float:
        """The relative Frobenius drift now (a float ≥ 0; 0.3 = 30%); also appended to :attr:`history`. With
        ``warn_at_step`` (the optimizer step), a warning the first time it exceeds :data:`DRIFT_WARNING_THRESHOLD`."""
        import torch
        from bitsandbytes.functional import dequantize_4bit

        diff = base = 0.0
        with torch.no_grad():
            for layer, (data, state) in zip(self._layers, self._initial):
                w0 = dequantize_4bit(data, state).double()  # float64 sums: 1e6-element float32 sums lose ~1e-5
                w = dequantize_4bit(layer.weight.data, layer.weight.quant_state).double()
                diff += float((w - w0).pow(2).sum())
                base += float(w0.pow(2).sum())
        drift = (diff / base) ** 0.5 if base > 0 else 0.0
        if warn_at_step is not None and drift > DRIFT_WARNING_THRESHOLD and not self.warned:
            self.warned = True
            logger.warning("The 4-bit base has drifted %.1f%% (relative Frobenius norm of layers %s) since the start, at "
                           "optimizer step %d: TRL's vLLM weight sync re-quantizes it at every generation batch "
                           "(allow_vllm_4bit_merge=True). See docs/generation.md.",
                           100 * drift, ", ".join(self.layer_names), warn_at_step)
        self.history.append(drift)
        return drift


@contextlib.contextmanager
def preserved_dtypes(model) -> Iterator[None]:
    """Undo any dtype change made to ``model``'s parameters, gradients and buffers inside the block.

    TRL's continuous-batching generation casts the whole model to bf16 (``model.to(torch.bfloat16)``) and never back,
    which would store a float32 adapter in bf16 from then on (see `docs/adapter_precision.md`). ``nn.Module.to``
    replaces ``param.data`` by a new tensor, so keeping a reference to the old one and putting it back restores the
    exact values at no copy cost. Tensors whose dtype did not change are left alone.
    """
    # `nn.Module._apply` sets `param.data` and `param.grad.data` to new tensors: keep the old ones
    params = [(p, p.data, p.grad, None if p.grad is None else p.grad.data) for p in model.parameters()]
    buffers = [(m, name, b) for m in model.modules() for name, b in m.named_buffers(recurse=False)]
    try:
        yield
    finally:
        for param, data, grad, grad_data in params:
            if param.data.dtype != data.dtype:
                param.data = data
            if grad is not None and grad.data.dtype != grad_data.dtype:
                grad.data = grad_data
        for module, name, buffer in buffers:
            current = getattr(module, name, None)
            if current is not None and current.dtype != buffer.dtype:
                setattr(module, name, buffer)  # a registered buffer: nn.Module.__setattr__ keeps it one

