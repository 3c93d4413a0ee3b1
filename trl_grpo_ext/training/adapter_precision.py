"""Precision of trainable adapter weights on quantized models, and the lost-update measurement.

TRL casts every trainable adapter weight of a 4-bit / 8-bit model to bfloat16 (`trl/trainer/grpo_trainer.py`, "the
PEFT adapter weights are converted to bf16"). bfloat16 keeps 8 significant bits, so an optimizer update smaller than
about 2⁻⁹ of a weight's magnitude rounds back to the same value: the update is lost. At GRPO's learning rates
(1e-6 … 1e-5) most LoRA updates are that small. PEFT's own default keeps adapters in float32 (QLoRA, Dettmers et al.
2023, arXiv 2305.14314, computes in bf16 but stores the adapter in higher precision in its reference code).

This module keeps the *stored* trainable weights (and therefore the optimizer updates) in float32 while compute runs
in the model's compute dtype: LoRA layers already cast their input to the adapter's dtype (peft), and for plain
trainable modules such as a `modules_to_save` copy of `lm_head`, forward hooks cast the input to the weight's dtype and
the output back to the input's dtype. See `docs/adapter_precision.md`.
"""

from __future__ import annotations

import logging

import torch
from torch import nn

from ..models.loading import EXACT_VALUES_ATTRIBUTE, torch_dtype

logger = logging.getLogger(__name__)

def cast_trainable_to(model: nn.Module, dtype: str | torch.dtype = "float32", exclude: tuple[str, ...] = ()) -> int:
    """Store every trainable parameter of ``model`` in ``dtype`` and keep forward passes dtype-consistent.

    Args:
        model (`nn.Module`): usually a `peft.PeftModel` over a quantized base.
        dtype (`str` or `torch.dtype`, defaults to ``"float32"``): ``"float32"``, ``"bfloat16"`` or ``"float16"``.
        exclude (`tuple[str, ...]`, defaults to ``()``): parameters whose qualified name contains one of these
            substrings keep their dtype (TRL keeps DoRA's ``"lora_magnitude_vector"`` out of its bf16 cast).

    Returns:
        `int`: the number of parameter tensors whose dtype changed.

    Modules that own a trainable parameter directly and are not LoRA sub-layers (e.g. the ``modules_to_save`` copy of
    ``lm_head``) get a forward pre-hook casting floating inputs to ``dtype`` and a hook casting the output back to the
    input's dtype, so generation and the loss run with a bf16 compute dtype too (without it: "expected m1 and m2 to
    have the same dtype"). Calling it twice adds no second hook.

    Raises:
        ValueError: unknown ``dtype`` name.
    """
    if isinstance(dtype, str):
        dtype = torch_dtype(dtype, field="adapter dtype")
    exact = model.__dict__.pop(EXACT_VALUES_ATTRIBUTE, {})
    changed = 0
    for name, module in model.named_modules():
        own = [(name, pname, p) for pname, p in module.named_parameters(recurse=False) if p.requires_grad]
        if not own:
            continue
        for prefix, pname, param in own:
            qualified = f"{prefix}.{pname}" if prefix else pname
            if param.dtype != dtype and not any(part in qualified for part in exclude):
                original = exact.get(qualified)
                same = original is not None and original.dtype == dtype and original.shape == param.shape
                param.data = original if same else param.data.to(dtype)  # a remembered value comes back exact
                changed += 1
        if "lora_" in name:
            continue
        module._trl_grpo_ext_dtype = dtype  # fallback; the hook follows the weight's dtype at call time
        if not getattr(module, "_trl_grpo_ext_dtype_hooks", False):
            module.register_forward_pre_hook(_cast_inputs_hook)
            module.register_forward_hook(_cast_output_back_hook)
            module._trl_grpo_ext_dtype_hooks = True
    return changed


def _cast_inputs_hook(module, args):
    # The dtype the module's own trainable weight has now: TRL's continuous-batching generation casts the whole model
    # to bf16 with `model.to(...)`, which does not update `_trl_grpo_ext_dtype` (see generation.preserved_dtypes).
    dtype = next((p.dtype for p in module.parameters(recurse=False) if p.is_floating_point()),
                 module._trl_grpo_ext_dtype)
    first = next((a for a in args if torch.is_tensor(a) and a.is_floating_point()), None)
    module._trl_grpo_ext_input_dtype = None if first is None else first.dtype
    return tuple(a.to(dtype) if torch.is_tensor(a) and a.is_floating_point() else a for a in args)


def _cast_output_back_hook(module, args, output):
    input_dtype = getattr(module, "_trl_grpo_ext_input_dtype", None)
    if input_dtype is not None and torch.is_tensor(output) and output.dtype != input_dtype:
        return output.to(input_dtype)
    return output


class LostUpdateTracker:
    """Measures, every ``every`` optimizer steps, the fraction of "lost updates".

    A lost update is a trainable weight element whose gradient was non-zero at an optimizer step but whose value did
    not change: the update was smaller than half a unit in the last place of its storage dtype. Measured with
    optimizer step pre/post hooks (`torch.optim.Optimizer.register_step_pre_hook`); on a measured step it keeps one
    copy of the trainable weights (the adapter: small), otherwise it costs nothing.

    Args:
        every (`int`): measure on optimizer steps 1, every+1, 2·every+1, … (0 disables).
        threshold (`float`): warn when the fraction exceeds this.
        record (`callable`): ``record(fraction)`` receives each measurement (the trainer logs it as
            ``adapter/lost_update_frac``).

    Attributes:
        history (`list[float]`): every measured fraction, in order.
    """

    def __init__(self, every: int, threshold: float, record=None):
        self.every = every
        self.threshold = threshold
        self.record = record
        self.history: list[float] = []
        self._optimizer_steps = 0
        self._before: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] | None = None
        self._warned = False

    def attach(self, optimizer: torch.optim.Optimizer) -> None:
        """Register the hooks on ``optimizer`` (the unwrapped torch optimizer)."""
        if self.every > 0:
            optimizer.register_step_pre_hook(self._pre)
            optimizer.register_step_post_hook(self._post)

    def _pre(self, optimizer, args, kwargs):
        self._optimizer_steps += 1
        if (self._optimizer_steps - 1) % self.every:
            return
        self._before = [
            (p, p.detach().clone(), p.grad.detach() != 0)
            for group in optimizer.param_groups
            for p in group["params"]
            if p.grad is not None
        ]

    def _post(self, optimizer, args, kwargs):
        if self._before is None:
            return
        with torch.no_grad():  # per tensor: (elements with a non-zero gradient, of those unchanged); one device sync
            counts = [torch.stack([nonzero.sum(), ((p == before) & nonzero).sum()]) for p, before, nonzero in self._before]
            self._before = None
            if not counts:
                return
            moved_grad, lost = torch.stack([c.to(counts[0].device) for c in counts]).sum(0).tolist()
        if moved_grad == 0:
            return
        fraction = lost / moved_grad
        self.history.append(fraction)
        if self.record is not None:
            self.record(fraction)
        if fraction > self.threshold and not self._warned:
            self._warned = True
            logger.warning(_warning_text(fraction, self._optimizer_steps, self.threshold, optimizer))


def _warning_text(fraction: float, step: int, threshold: float, optimizer: torch.optim.Optimizer) -> str:
    dtypes = {p.dtype for group in optimizer.param_groups for p in group["params"] if p.requires_grad}
    names = ", ".join(sorted(str(d).replace("torch.", "") for d in dtypes))
    head = (
        f"{100 * fraction:.0f}% of the trainable weights with a non-zero gradient did not change at optimizer step "
        f"{step} (trainable dtype: {names}; lost_update_warning_threshold={threshold}): their updates were smaller than "
        "half a unit in the last place of the stored value and were rounded away. "
    )
    if dtypes & {torch.bfloat16, torch.float16}:
        return head + 'Store the adapter in float32: set `adapter_dtype: float32` (GRPOExtConfig(adapter_dtype="float32")).'
    return head + "The weights are already float32, so the learning rate is too small for them: raise `learning_rate`."
