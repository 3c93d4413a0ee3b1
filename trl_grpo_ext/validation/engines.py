"""Engine settings the run cannot honour, refused before any model loads (docs/scaling.md, "Refused combinations")."""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

from ..config.checks import RunArgumentError
from ..config.engines import Engine


def check_engine_settings(engine: Engine, values: Mapping[str, Any]) -> None:
    """Refuse the combinations of ``engine`` and the run's ``values`` that fail after loading or are silently changed:
    :func:`check_engine_device` with ``use_cpu``, bf16 / fp16 against accelerate's ``mixed_precision``, and FSDP on a
    4-bit base whose ``bnb_4bit_quant_storage`` is not the compute dtype.

    Raises:
        RunArgumentError: naming the engine, the fields, the values and a fix."""
    from ..models.settings import bf16_available, compute_dtype_name

    check_engine_device(engine, accelerator_available=True, use_cpu=bool(values.get("use_cpu")))
    mixed = str(engine.mixed_precision or "").lower()  # accelerate lower-cases it
    bf16 = values.get("bf16")
    if bf16 is None and mixed in ("bf16", "fp16"):  # unset: what the machine supports (GRPOExtConfig._check_bf16)
        bf16 = bf16_available() and not values.get("use_cpu") and not values.get("fp16")
    run = "bf16" if bf16 else "fp16" if values.get("fp16") else "no"
    if mixed in ("bf16", "fp16") and run != mixed:
        launched = " that launched the run (or unset ACCELERATE_MIXED_PRECISION)" \
            if engine.source.startswith("ACCELERATE_") else ""
        unset = " (bf16 unset: false on this machine)" if values.get("bf16") is None else ""
        said, why = ((f"bf16 and fp16 are both false{unset}", f"transformers then trains in accelerate's {mixed} "
                      "autocast") if run == "no" else (f"{run}=True", "DeepSpeed refuses the two after the model loads"))
        raise RunArgumentError(
            f"{said}, but accelerate's mixed_precision={mixed!r} (from {engine.source}): {why}. Fix: set {mixed}: true"
            f"{f' and {run}: false' if run != 'no' else ''}, or set mixed_precision: {run!r} in the accelerate config"
            f"{launched}.")
    if engine.kind == "fsdp" and values.get("load_in_4bit"):
        compute = compute_dtype_name(SimpleNamespace(dtype=values.get("dtype")), SimpleNamespace(bf16=values.get("bf16")))
        storage = values.get("bnb_4bit_quant_storage") or "uint8"
        if storage != compute:
            raise RunArgumentError(
                f"load_in_4bit with {engine.describe()}: bnb_4bit_quant_storage={storage!r} differs from the compute "
                f"dtype {compute!r}, and FSDP shards the packed 4-bit weights beside the other parameters, which must "
                f"share one dtype (the FSDP-QLoRA rule of bitsandbytes and PEFT). Fix: set bnb_4bit_quant_storage: "
                f"{compute}.")


def check_engine_device(engine: Engine, accelerator_available: bool, use_cpu: bool = False) -> None:
    """Refuse DeepSpeed or FSDP with ``use_cpu`` (accelerate then sets up a CPU run without the engine), and FSDP
    without an accelerator: accelerate 1.15 runs FSDP only on GPU-like devices, and on a CPU its processes would train
    unsharded and unsynchronised (measured). The one place that judges the engine's device, so tests/fsdp_cpu.py
    lifts these refusals at once."""
    name = {"deepspeed": "DeepSpeed", "fsdp": "FSDP"}.get(engine.kind)
    if name and use_cpu:
        raise RunArgumentError(
            f"use_cpu=True with {engine.describe()}: accelerate then sets up a CPU run without {name}, so every process "
            f"would hold the whole model and train with plain DDP. Fix: set use_cpu: false (DeepSpeed on a CPU: also "
            f"ddp_backend: gloo, bf16: false and DS_ACCELERATOR=cpu in the environment), or launch without {name}.")
    if engine.kind == "fsdp" and not accelerator_available:
        raise RunArgumentError(
            f"{engine.describe()} on a machine without a GPU: accelerate runs FSDP only on GPUs; here its processes "
            "would train unsharded and unsynchronised. Fix: on a CPU launch DDP (torchrun) or DeepSpeed "
            "(recipes/accelerate_configs/zero2_cpu.yaml, zero3_cpu.yaml); run FSDP on GPUs (fsdp2.yaml).")
