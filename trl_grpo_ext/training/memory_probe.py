"""The longest-first memory probe: before optimizer step 1, the largest tensors a run will ever need, once.

A run that fits for 120 steps can still run out of memory when its longest prompt is drawn (unsloth#1624). The probe
runs, on the dataset's longest prompt (tokens, after the chat template), one generation batch at full length (every
completion forced to ``max_completion_length`` tokens) and one forward + backward of a full micro-batch at
prompt + ``max_completion_length`` tokens through TRL's own log-probability path. If either runs out of memory, the
run stops before step 1 with the measured peak, the forecast beside it (`plan.memory`) and the fix. It changes
nothing the run does: the gradients are zeroed and the random number generators restored.

``memory_probe`` (`GRPOExtConfig`): ``auto`` (on for a GPU run), ``on``, ``off``. Cost: about one generation batch
and one micro-batch's forward + backward; printed on the console.
"""

from __future__ import annotations

import logging
import resource
import time

import torch
from transformers import TrainerCallback

from .. import _trl_compat
from ..models.memory_shape import memory_settings
from ..plan.memory import MemorySettings, ModelShape, forecast_memory, format_bytes, memory_fix

logger = logging.getLogger(__name__)

__all__ = ["MemoryProbeCallback", "MemoryProbeError", "probe_enabled", "is_out_of_memory"]


class MemoryProbeError(RuntimeError):
    """The probe ran out of memory: the message holds the measured peak, the forecast and the fix."""


def probe_enabled(mode: str, device_type: str) -> bool:
    """``memory_probe`` ``mode`` (auto, on, off) on a device of ``device_type`` (``"cuda"``, ``"cpu"``, ...)."""
    return mode == "on" or (mode == "auto" and device_type == "cuda")


def is_out_of_memory(err: BaseException) -> bool:
    """A CUDA out-of-memory error, or a failed host allocation (``MemoryError``, torch's "can't allocate memory")."""
    if isinstance(err, (torch.OutOfMemoryError, MemoryError)):
        return True
    text = str(err)
    return isinstance(err, RuntimeError) and ("can't allocate memory" in text or "not enough memory" in text
                                              or "out of memory" in text.lower())


def _prompt_ids(tokenizer, prompt) -> list[int]:
    """Token ids of one prompt as TRL builds them (chat template with the generation prompt, or the plain text)."""
    if isinstance(prompt, list):
        ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True)
        ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
    else:
        ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    return list(ids)


def longest_prompt(trainer) -> tuple[int, list[int]]:
    """(row index, token ids) of the training set's longest prompt."""
    tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
    best, best_ids = 0, []
    for index, prompt in enumerate(trainer.train_dataset["prompt"]):
        ids = _prompt_ids(tokenizer, prompt)
        if len(ids) > len(best_ids):
            best, best_ids = index, ids
    return best, best_ids


class _Peak:
    """The peak of a phase [bytes]: CUDA's allocator peak, else the process's RSS high-water mark growth."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def __enter__(self):
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.start = torch.cuda.memory_allocated()
        else:
            self.start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        self.bytes = 0
        return self

    def __exit__(self, *exc):
        if self.cuda:
            self.bytes = torch.cuda.max_memory_allocated() - self.start
        else:
            self.bytes = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - self.start
        return False

    @property
    def what(self) -> str:
        return "allocated above the weights (torch.cuda.max_memory_allocated)" if self.cuda else \
            "growth of the process's peak RSS"


def device_memory(device: torch.device) -> int | None:
    """Memory of ``device`` [bytes]: the GPU's total, else the address-space limit (``RLIMIT_AS``) when one is set."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    return None if limit == resource.RLIM_INFINITY else limit


def run_settings(trainer, prompt_length: int) -> tuple[ModelShape, MemorySettings]:
    """The forecast's inputs for ``trainer``'s model and plan (the model's config, its adapter and quantisation) with
    prompts of ``prompt_length`` tokens."""
    from types import SimpleNamespace

    from ..models.loading import is_4bit_model

    model, args = trainer.model, trainer.args
    peft = getattr(model, "peft_config", {}).get("default")
    config = model.config.to_dict()
    dtype = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}.get(
        getattr(model, "dtype", torch.float32), "float32")
    model_args = SimpleNamespace(
        dtype=dtype, load_in_4bit=is_4bit_model(model), use_peft=peft is not None,
        use_bnb_nested_quant=bool((config.get("quantization_config") or {}).get("bnb_4bit_use_double_quant")),
        lora_r=getattr(peft, "r", 16), lora_dropout=getattr(peft, "lora_dropout", 0.0),
        lora_target_modules=sorted(peft.target_modules) if peft is not None and not isinstance(
            peft.target_modules, str) else getattr(peft, "target_modules", None))  # attention: sdpa assumed
    settings = memory_settings(trainer.plan, args, model_args, prompt_length, trainer.accelerator.device.type == "cuda")
    return ModelShape.from_config(config), settings


def probe_generation(trainer, prompt: list[int], completions: int, length: int) -> torch.Tensor:
    """Generate ``completions`` sequences of ``prompt`` (token ids) + exactly ``length`` new tokens (EOS suppressed
    until then) with the trainer's generation config and its KV cache; returns the (completions, P + length) ids."""
    import copy

    model = trainer.model
    was_training = model.training
    tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
    config = copy.deepcopy(trainer.generation_config)
    config.max_new_tokens = config.min_new_tokens = length
    config.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids = torch.tensor([prompt] * completions, device=trainer.accelerator.device)
    try:
        model.eval()  # a checkpointed model in train mode generates without its KV cache
        with torch.no_grad():
            return trainer.accelerator.unwrap_model(model).generate(
                input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=config)
    finally:
        model.train(was_training)


def probe_training(trainer, batch: torch.Tensor, length: int) -> None:
    """One forward + backward of ``batch`` (B, S) through TRL's log-probability path (its fused LM head, the last
    ``length`` tokens scored, as the loss computes them; no gradient through the entropy, as without an entropy
    bonus); the gradients are left for the caller."""
    model = trainer.model
    was_training = model.training
    model.train()  # as Trainer.training_step does: gradient checkpointing and dropout act in train mode only
    try:
        logps, _ = _trl_compat.per_token_logps(trainer, model, batch, torch.ones_like(batch), length)
        logps.sum().backward()
    finally:
        model.train(was_training)


def run_probe(trainer) -> str:
    """Run the probe on ``trainer`` (before step 1); return the console line.

    Raises:
        MemoryProbeError: a phase ran out of memory (the message says which, with the forecast and the fix).
    """
    start = time.perf_counter()
    args, model, device = trainer.args, trainer.model, trainer.accelerator.device
    index, prompt = longest_prompt(trainer)
    shape, settings = run_settings(trainer, len(prompt))
    forecast = forecast_memory(shape, settings, device_memory(device))
    generation_batch, micro, length = settings.generation_batch, settings.micro_batch_size, args.max_completion_length
    rng = torch.get_rng_state(), torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    was_training, peaks, phase = model.training, {}, "generation"
    try:
        if getattr(args, "use_vllm", False):  # vLLM holds its own preallocated share: only the sequences are needed
            completion = torch.randint(0, shape.vocab_size, (micro, length), device=device)
            out = torch.cat([torch.tensor([prompt] * micro, device=device), completion], dim=1)
        else:
            with _Peak(device) as peak:
                out = probe_generation(trainer, prompt, generation_batch, length)
            peaks["generation"] = peak.bytes
        phase = "forward + backward"
        with _Peak(device) as peak:
            probe_training(trainer, out[:micro], length)
        peaks["training"] = peak.bytes
        del out
    except Exception as err:  # noqa: BLE001 - only out-of-memory is turned into the probe's error
        if not is_out_of_memory(err):
            raise
        raise MemoryProbeError(_failure(trainer, phase, index, len(prompt), forecast, shape, settings, device,
                                        peak, err)) from err
    finally:
        model.train(was_training)
        model.zero_grad(set_to_none=True)
        torch.set_rng_state(rng[0])
        if rng[1] is not None:
            torch.cuda.set_rng_state_all(rng[1])
    seconds = time.perf_counter() - start
    return (f"memory probe ({seconds:.1f} s, before step 1): longest prompt (row {index}, {len(prompt)} tokens) + "
            f"{length} completion tokens; " + (
                f"generation of {generation_batch} completions {format_bytes(peaks['generation'])} (forecast "
                f"{format_bytes(forecast.phase_bytes('generation'))})" if "generation" in peaks else
                "generation by vLLM not probed") + f", forward + backward of {micro} completions "
            f"{format_bytes(peaks['training'])} (forecast {format_bytes(forecast.phase_bytes('training'))}); "
            f"measured as {peak.what}; forecast peak {format_bytes(forecast.peak_bytes)}")


def _failure(trainer, phase, index, prompt_tokens, forecast, shape, settings, device, peak, err) -> str:
    total, plan = device_memory(device), trainer.plan
    fix = memory_fix(shape, settings, total, plan.completions_per_step // plan.world_size, plan.num_generations,
                     plan.world_size) if total else None
    if fix is None:  # the forecast fits (or no limit is known): the quantities that set the phase that failed
        lower = [f"max_prompt_length below {prompt_tokens} (the recipe drops longer prompts)"]
        lower += [f"prompts_per_step below {plan.prompts_per_step}"] if phase == "generation" else (
            [f"micro_batch_size below {settings.micro_batch_size}"] +
            ([] if settings.gradient_checkpointing else ["gradient_checkpointing: true"]))
        fix = ", ".join(lower) + f", or max_completion_length below {settings.max_completion_length}"
    if peak.cuda:
        measured = f"{format_bytes(torch.cuda.max_memory_allocated() - peak.start)} allocated above the weights"
    else:
        measured = f"the peak RSS grew {format_bytes(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - peak.start)}"
    limit = f" (device memory {format_bytes(total)})" if peak.cuda and total else \
        (f" (address-space limit {format_bytes(total)})" if total else "")
    name = "generation" if phase == "generation" else "training"
    return (f"memory probe: out of memory before step 1, in the {phase} of the longest prompt (row {index}, "
            f"{prompt_tokens} tokens) + {settings.max_completion_length} completion tokens{limit}: measured, "
            f"{measured} before the failed allocation; forecast, {name} phase "
            f"{format_bytes(forecast.phase_bytes(name))} on top of {format_bytes(forecast.phase_bytes('always'))} "
            f"(weights, adapter, optimizer state). Fix: {fix}. (memory_probe: off skips this check; the run would fail "
            f"when that prompt is drawn.) [{type(err).__name__}: {str(err)[:200]}]")


class MemoryProbeCallback(TrainerCallback):
    """Runs the probe at ``on_train_begin`` (after the optimizer and the wrapped model exist, before step 1) when
    ``args.memory_probe`` enables it on this device; prints its line on the main process. A resumed run probes too."""

    def __init__(self, trainer):
        self.trainer = trainer

    def on_train_begin(self, args, state, control, **kwargs):
        trainer = self.trainer
        if not probe_enabled(getattr(args, "memory_probe", "off"), trainer.accelerator.device.type):
            return
        if trainer.is_deepspeed_enabled or trainer.is_fsdp_enabled:  # sharded parameters: not probed (yet)
            if state.is_world_process_zero:
                print("memory probe: skipped under DeepSpeed / FSDP (the probe runs the unsharded model)", flush=True)
            return
        line = run_probe(trainer)
        if state.is_world_process_zero:
            print(line, flush=True)
