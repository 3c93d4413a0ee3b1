"""Advice on a plan: the tutorial's rules of thumb as warnings that say how to fix them (pure Python: no torch, no TRL
import). The note printed under the table in ``zero_variance_filter: resample`` mode is the zero-variance unit's
(`trl_grpo_ext.zero_variance.report.resample_note`)."""

from __future__ import annotations

from fractions import Fraction

from ..config.checks import format_number
from ..config.loss_settings import bnpo_accumulation_warning
from .resolve import _divisors
from .run_plan import RunPlan

__all__ = ["plan_warnings", "memory_note"]

#: Vocabulary assumed by the memory estimate of :func:`plan_warnings` (Qwen2.5's, 151,936 tokens).
ASSUMED_VOCAB_SIZE = 151_936
#: Bytes per completion token the estimate counts: the bf16 logits of one token over the vocabulary (2 bytes each).
LOGIT_BYTES_PER_TOKEN = 2 * ASSUMED_VOCAB_SIZE
#: Bytes per model parameter the estimate counts: 4-bit NF4 weights, the smallest any recipe here loads.
WEIGHT_BYTES_PER_PARAM = 0.5


def _estimate_micro_batch_gib(micro_batch_size: int, max_completion_length: int, model_params: float | None) -> float:
    """Lower-bound memory [GiB] of one micro-batch: 4-bit weights + bf16 logits of its completion tokens."""
    weights = (model_params or 0.0) * WEIGHT_BYTES_PER_PARAM
    return (weights + micro_batch_size * max_completion_length * LOGIT_BYTES_PER_TOKEN) / 2**30


def plan_warnings(plan: RunPlan, *, instruct_model: bool | None = None, gpu_memory_gib: float | None = None,
                  model_params: float | None = None, loss_type: str | None = None) -> list[str]:
    """Advice from the tutorial's rules of thumb, each saying how to fix it.

    Args:
        plan (`RunPlan`): the resolved plan.
        instruct_model (`bool`, *optional*): True for an instruct/chat model (G >= 8 advised), False for a base model
            (G 4–5 is enough), None if unknown (only G < 4 is flagged).
        gpu_memory_gib (`float`, *optional*): memory of one device [GiB]; enables the micro-batch memory check.
        model_params (`float`, *optional*): number of model parameters (e.g. ``0.5e9``), used by that check.
        loss_type (`str`, *optional*): TRL's ``loss_type``; ``"bnpo"`` with several micro-batches per step is warned
            about (`loss_settings.bnpo_accumulation_warning`: the loss then changes with ``micro_batch_size``).

    The memory check is a deliberately rough **lower bound**: 4-bit weights (0.5 byte/parameter) plus the bf16 logits
    of every completion token of one micro-batch over a 151,936-token vocabulary (2 × 151,936 bytes per token ≈ 0.29
    MiB), ignoring prompts, activations, optimizer state and the KV cache. It warns only when even that exceeds
    ``gpu_memory_gib``, i.e. when the micro-batch cannot fit; fitting the estimate does not promise the run fits.

    Returns:
        `list[str]`: one sentence per warning (empty when nothing looks wrong).
    """
    out: list[str] = []
    g, pps = plan.num_generations, plan.prompts_per_step
    if instruct_model and g < 8:
        out.append(f"num_generations={g} is below 8 for an instruct model: its confident completions often score "
                   "alike, so many groups have σ = 0 and give no learning signal; set num_generations=8 or more")
    elif not instruct_model and g < 4:
        out.append(f"num_generations={g} is small: groups of {g} often score alike (σ = 0, no signal); use 4–5 "
                   "for a base model, 8 or more for an instruct model")
    if not isinstance(pps, int):
        out.append(f"{Fraction(plan.completions_per_step, g)} prompts per optimizer step is not a whole number: a "
                   "prompt group spans optimizer steps; set prompts_per_step (or make per_device_train_batch_size × "
                   "processes × gradient_accumulation_steps a multiple of num_generations)")
    if pps < 2:
        out.append(f"prompts_per_step={format_number(pps)}: one hard prompt dominates each step and a group with σ = 0 "
                   "wastes the whole step; use at least 2–4 prompts per step (8+ where memory allows)")
    if plan.epochs_covered is not None and plan.epochs_covered > 5:
        out.append(f"the run covers {plan.epochs_covered:.3g} epochs (more than 5): GRPO overfits little but 2–5 "
                   "passes are usually enough; lower total_epochs/total_training_steps or use more prompts")
    limit_steps = plan.epoch_limit_steps
    if plan.stop_semantics == "first_reached":
        if plan.stop_reason == "step_limit" and limit_steps is not None and plan.epochs_covered < 1:
            out.append(f"total_training_steps={plan.step_limit} stops after {plan.epochs_covered:.3g} of an epoch, "
                       f"before total_epochs={format_number(plan.epoch_limit)} matters: part of the data is never seen; "
                       f"raise total_training_steps to {plan.steps_per_epoch} or more for one full pass")
        if plan.epoch_limit is not None and plan.steps_per_epoch is None:
            out.append(f"total_epochs={format_number(plan.epoch_limit)} cannot be checked without the dataset size: the "
                       f"plan stops at the step limit ({plan.step_limit}); pass the dataset size (--dataset-size N)")
    elif plan.step_limit is not None and limit_steps is not None and limit_steps < plan.step_limit:
        # (max_steps stopping before num_train_epochs, TRL's default 3 included, is the usual short run: no advice)
        out.append(f"max_steps={plan.step_limit} overrides num_train_epochs={format_number(plan.epoch_limit)} (TRL's "
                   f"rule; the epoch limit would stop earlier, at step {limit_steps}): the run covers "
                   f"{plan.epochs_covered:.3g} epochs; for whichever-comes-first use total_training_steps and "
                   "total_epochs instead")
    bnpo = bnpo_accumulation_warning(loss_type or "", plan.gradient_accumulation_steps, plan.micro_batch_size,
                                     plan.completions_per_step, plan.world_size)
    if bnpo:
        out.append(bnpo)
    if gpu_memory_gib is not None:
        need = _estimate_micro_batch_gib(plan.micro_batch_size, plan.max_completion_length, model_params)
        if need > gpu_memory_gib:
            per_process = plan.completions_per_step // plan.world_size
            fit = [d for d in _divisors(per_process) if _estimate_micro_batch_gib(
                d, plan.max_completion_length, model_params) <= gpu_memory_gib]
            fix = (f"set micro_batch_size={fit[-1]} (gradient accumulation grows, prompts_per_step stays)" if fit
                   else "lower max_completion_length or use a device with more memory")
            out.append(f"micro_batch_size={plan.micro_batch_size} × max_completion_length={plan.max_completion_length}"
                       f" tokens needs at least {need:.1f} GiB (weights at 4 bits + bf16 logits over a "
                       f"{ASSUMED_VOCAB_SIZE}-token vocabulary), more than the {gpu_memory_gib:g} GiB stated; {fix}")
    return out


def memory_note(plan: RunPlan, gpu_memory_gib: float, model_params: float | None = None) -> str | None:
    """The memory check's figure when it does not warn (:func:`plan_warnings`: the same lower bound), so that
    ``--gpu-memory-gib`` always says what it found; None when :func:`plan_warnings` warns instead."""
    need = _estimate_micro_batch_gib(plan.micro_batch_size, plan.max_completion_length, model_params)
    if need > gpu_memory_gib:
        return None
    weights = "" if model_params else " (no --model-params: the weights not counted)"
    return (f"--gpu-memory-gib {gpu_memory_gib:g}: one micro-batch of {plan.micro_batch_size} × "
            f"{plan.max_completion_length} tokens needs at least {need:.2f} GiB{weights}, within it; a lower bound "
            "(4-bit weights + bf16 logits), not a promise that the run fits")
