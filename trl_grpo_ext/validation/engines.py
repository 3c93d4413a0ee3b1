"""Engine settings the run cannot honour, refused before any model loads (docs/scaling.md, "Refused combinations")."""

from __future__ import annotations

from collections.abc import Mapping
from importlib import metadata
from types import SimpleNamespace
from typing import Any

from ..config.checks import RunArgumentError
from ..config.engines import Engine
from .mappings import as_mapping

#: The first DeepSpeed release with both fixes of DeepSpeed #8072 (ZeRO-3 all-gather buffers sized by the first
#: parameter's dtype, so float32 adapters beside a bf16 base fail at the first step): PRs #8073 and #8113. Checked in
#: the released sources: 0.19.2 has neither, 0.19.3 to 0.19.8 have both.
DEEPSPEED_MIXED_DTYPE_FIX = "0.19.3"


def installed_deepspeed() -> str | None:
    """The installed DeepSpeed version (package metadata; nothing imported), or None."""
    try:
        return metadata.version("deepspeed")
    except metadata.PackageNotFoundError:
        return None


def _release(version: str) -> tuple[int, ...]:
    parts = version.split("+")[0].split(".")[:3]
    return tuple(int("".join(ch for ch in part if ch.isdigit()) or 0) for part in parts)


def _compute_dtype(values: Mapping[str, Any]) -> str:
    from ..models.settings import compute_dtype_name

    return compute_dtype_name(SimpleNamespace(dtype=values.get("dtype")), SimpleNamespace(bf16=values.get("bf16")))


def check_engine_settings(engine: Engine, values: Mapping[str, Any], deepspeed_version: str | None = "installed") -> None:
    """Refuse the combinations of ``engine`` and the run's ``values`` that fail after loading or are silently changed
    (RunArgumentError naming the engine, the fields, the values and a fix); ``deepspeed_version``: None when not
    installed, ``"installed"`` to read it."""
    where = engine.describe()
    if engine.kind == "deepspeed":
        if engine.config_problem:
            raise RunArgumentError(
                f"{where}: {engine.config_problem}, and transformers would fail reading it after the model loads. "
                "Fix: point deepspeed_config_file (or the deepspeed field) at a JSON file, e.g. "
                '{"zero_optimization": {"stage": 2}}, or set zero_stage in the accelerate config instead.')
        if values.get("use_cpu"):
            raise RunArgumentError(
                f"use_cpu=True with {where}: accelerate drops DeepSpeed when use_cpu is set and trains with plain DDP. "
                "Fix: set use_cpu: false (on a CPU-only machine also ddp_backend: gloo, bf16: false and DS_ACCELERATOR=cpu "
                "in the environment), or launch without DeepSpeed.")
        version = installed_deepspeed() if deepspeed_version == "installed" else deepspeed_version
        if version is None:
            raise RunArgumentError(f"{where}: deepspeed is not installed. Fix: pip install 'trl-grpo-ext[deepspeed]'.")
        if engine.optimizer_section:
            needs = [f"{name}={values[name]!r}" for name, off in (("zero_variance_filter", "off"), ("lost_update_steps", 0))
                     if values.get(name, off) not in (off, None)]
            if needs:
                raise RunArgumentError(
                    f"{', '.join(needs)} with {where}, whose DeepSpeed config has an `optimizer` section: DeepSpeed then "
                    "builds the optimizer itself and the trainer never sees it, so the zero-variance filter's skipped "
                    "step (or the lost-update measurement) would silently not happen. Fix: remove the `optimizer` "
                    "section (the trainer's AdamW, with learning_rate, weight_decay, adam_beta1/2 and adam_epsilon, is "
                    "used), or set zero_variance_filter: off and lost_update_steps: 0.")
        if engine.zero_stage == 3:
            _check_zero3(where, values, version)
    check_engine_device(engine, accelerator_available=True, use_cpu=bool(values.get("use_cpu")))
    mixed = str(engine.mixed_precision or "").lower()  # accelerate lower-cases it
    bf16 = values.get("bf16")
    if bf16 is None and mixed in ("bf16", "fp16"):  # unset: what the machine supports (GRPOExtConfig._check_bf16)
        from ..models.settings import bf16_available

        bf16 = bf16_available() and not values.get("use_cpu") and not values.get("fp16")
    run = "bf16" if bf16 else "fp16" if values.get("fp16") else "no"
    if mixed in ("bf16", "fp16") and run != mixed:
        where = f"set mixed_precision: {run if run != 'no' else repr('no')} in the accelerate config" + (
            " that launched the run (or unset ACCELERATE_MIXED_PRECISION)" if engine.source.startswith("ACCELERATE_")
            else "")
        why = (f"transformers takes accelerate's when bf16 and fp16 are false: the run would train in {mixed} autocast"
               if run == "no" else "the two disagree, which DeepSpeed refuses after the model loads")
        raise RunArgumentError(
            f"{'bf16 and fp16 are both false' if run == 'no' else f'{run}=True'}"
            f"{' (bf16 unset: false on this machine)' if values.get('bf16') is None and run == 'no' else ''}, but "
            "accelerate's mixed_precision="
            f"{mixed!r} (from {engine.source}): {why}. Fix: set {mixed}: true"
            f"{f' and {run}: false' if run != 'no' else ''}, or {where}.")
    if engine.kind == "fsdp" and values.get("load_in_4bit"):
        compute = _compute_dtype(values)
        storage = values.get("bnb_4bit_quant_storage") or "uint8"
        if storage != compute:
            raise RunArgumentError(
                f"load_in_4bit with {where}: bnb_4bit_quant_storage={storage!r} differs from the compute dtype "
                f"{compute!r}: FSDP shards the packed 4-bit weights as tensors of that dtype beside the other parameters, "
                "which must share one dtype (the FSDP-QLoRA rule of bitsandbytes and PEFT). Fix: set "
                f"bnb_4bit_quant_storage: {compute}.")


def _check_zero3(where: str, values: Mapping[str, Any], version: str) -> None:
    if values.get("load_in_4bit") and values.get("use_peft") and values.get("adapter_dtype", "float32") == "float32":
        compute = _compute_dtype(values)
        if compute != "float32" and _release(version) < _release(DEEPSPEED_MIXED_DTYPE_FIX):
            raise RunArgumentError(
                f"adapter_dtype='float32' with {where} and a {compute} base: deepspeed {version} sizes ZeRO-3's "
                "all-gather buffers by the first parameter's dtype and fails at the first step with mixed dtypes "
                f"(DeepSpeed #8072, fixed in {DEEPSPEED_MIXED_DTYPE_FIX} by PRs #8073 and #8113). Fix: pip install "
                f"'deepspeed>={DEEPSPEED_MIXED_DTYPE_FIX}', or set adapter_dtype: bfloat16.")


def engine_warnings(engine: Engine, values: Mapping[str, Any]) -> list[str]:
    """The engine settings without effect in this run, one line each (arguments as `check_engine_settings`)."""
    where, found = engine.describe(), []
    zero3 = engine.kind == "deepspeed" and engine.zero_stage == 3
    maybe_zero3 = engine.kind == "deepspeed" and engine.zero_stage not in (0, 1, 2)  # a stage not known: may be 3
    if values.get("ds3_gather_for_generation") is False and not maybe_zero3:
        found.append(f"ds3_gather_for_generation=False with {where}: TRL reads it only under DeepSpeed ZeRO-3 "
                     "(generation then runs on the sharded weights), so it has no effect. Fix: remove "
                     "ds3_gather_for_generation, or launch with ZeRO-3 (recipes/accelerate_configs/zero3.yaml).")
    name = "gradient_checkpointing_kwargs" if values.get("gradient_checkpointing_kwargs") else \
        "activation_checkpointing_kwargs"
    if zero3 and values.get("use_peft") and as_mapping(name, values.get(name)).get("use_reentrant") is False:
        found.append(f"gradient_checkpointing_kwargs={{'use_reentrant': False}} with {where} and use_peft: TRL forces "
                     "use_reentrant=True there (ZeRO-3 + PEFT needs reentrant checkpointing), so it has no effect. "
                     "Fix: remove use_reentrant from gradient_checkpointing_kwargs (or set it to true).")
    return found


def check_engine_device(engine: Engine, accelerator_available: bool, use_cpu: bool = False) -> None:
    """Refuse FSDP with ``use_cpu`` or without an accelerator: accelerate 1.15 runs FSDP only on GPU-like devices, and
    on a CPU its processes would train unsharded and unsynchronised (measured). The one place that judges FSDP's
    device, so tests/fsdp_cpu.py lifts both refusals at once."""
    if engine.kind == "fsdp" and use_cpu:
        raise RunArgumentError(
            f"use_cpu=True with {engine.describe()}: accelerate then sets up a CPU run and skips FSDP, so every process "
            "would hold the whole model and train with plain DDP. Fix: set use_cpu: false, or launch without FSDP.")
    if engine.kind == "fsdp" and not accelerator_available:
        raise RunArgumentError(
            f"{engine.describe()} on a machine without a GPU: accelerate runs FSDP only on GPUs; here its processes "
            "would train unsharded and unsynchronised. Fix: on a CPU launch DDP (torchrun) or DeepSpeed "
            "(recipes/accelerate_configs/zero2_cpu.yaml, zero3_cpu.yaml); run FSDP on GPUs (fsdp2.yaml).")
