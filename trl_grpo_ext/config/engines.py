"""Which distributed engine a run uses (DDP, DeepSpeed ZeRO, FSDP), read before any model loads.

Three places name an engine, and `resolve_engine` reads them in this order (the first that names one wins):

1. the run's own fields ``deepspeed`` (a DeepSpeed JSON path or dict: ``zero_optimization.stage``) and ``fsdp``
   (with ``fsdp_config.version``), which transformers turns into accelerate plugins;
2. the environment `accelerate launch` sets from its config file: ``ACCELERATE_USE_DEEPSPEED``,
   ``ACCELERATE_DEEPSPEED_ZERO_STAGE`` (or the stage inside ``ACCELERATE_DEEPSPEED_CONFIG_FILE``),
   ``ACCELERATE_USE_FSDP``, ``FSDP_VERSION``;
3. an accelerate config file given to ``trl-grpo-ext plan --accelerate-config`` (`engine_from_accelerate_config`:
   ``distributed_type``, ``deepspeed_config.zero_stage``, ``fsdp_config.fsdp_version``, ``num_processes`` — the total
   over all machines, as accelerate counts it — and ``num_machines``).

Nothing here imports torch, DeepSpeed or accelerate: ``trl-grpo-ext plan`` uses it. The refusals of engine and run
settings that do not work together are in `validation.engines`; docs/scaling.md explains them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: Engine kinds: one process, plain data parallel, DeepSpeed ZeRO, FSDP.
KINDS = ("single", "ddp", "deepspeed", "fsdp")


@dataclass(frozen=True)
class Engine:
    """A run's engine.

    Attributes:
        kind (`str`): one of `KINDS`.
        zero_stage (`int` or `None`): the ZeRO stage (``deepspeed`` only; None when the DeepSpeed config leaves it out).
        fsdp_version (`int` or `None`): 1 or 2 (``fsdp`` only).
        num_processes (`int` or `None`): all processes over all machines, when the source says (accelerate config).
        num_machines (`int` or `None`): machines, when the source says.
        source (`str`): where it was read, for messages (e.g. ``"ACCELERATE_USE_DEEPSPEED"``).
        optimizer_section (`bool`): the DeepSpeed config (JSON) has its own ``optimizer`` section, so DeepSpeed builds
            the optimizer and the trainer's ``create_optimizer`` (with the zero-variance guard) is never called.
    """

    kind: str = "single"
    zero_stage: int | None = None
    fsdp_version: int | None = None
    num_processes: int | None = None
    num_machines: int | None = None
    source: str = "default"
    optimizer_section: bool = False

    def describe(self) -> str:
        """``"DeepSpeed ZeRO-3 (from ACCELERATE_USE_DEEPSPEED)"`` and the like."""
        name = {"single": "one process", "ddp": "DDP", "deepspeed": "DeepSpeed", "fsdp": "FSDP"}[self.kind]
        if self.kind == "deepspeed" and self.zero_stage is not None:
            name += f" ZeRO-{self.zero_stage}"
        if self.kind == "fsdp" and self.fsdp_version is not None:
            name += str(self.fsdp_version)
        return f"{name} (from {self.source})"


def _flag(value: Any) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def _deepspeed_json(config: Any) -> Mapping:
    """A DeepSpeed config (a dict, a JSON string or a JSON file path) as a mapping; {} when unreadable."""
    if isinstance(config, str):
        try:
            if os.path.isfile(config):
                with open(config, encoding="utf-8") as f:
                    config = json.load(f)
            else:
                config = json.loads(config)
        except (OSError, ValueError):
            return {}
    return config if isinstance(config, Mapping) else {}


def _deepspeed_engine(config: Any, source: str, zero_stage: Any = None, **counts) -> Engine:
    """The DeepSpeed engine of a DeepSpeed config (its ``zero_optimization.stage`` unless ``zero_stage`` is given)."""
    ds = _deepspeed_json(config)
    if zero_stage is None:
        zero_stage = (ds.get("zero_optimization") or {}).get("stage")
    stage = int(zero_stage) if str(zero_stage).isdigit() else None
    return Engine("deepspeed", zero_stage=stage, source=source, optimizer_section="optimizer" in ds, **counts)


def engine_from_run_values(values: Mapping[str, Any]) -> Engine | None:
    """The engine the run's ``deepspeed`` / ``fsdp`` fields name, or None."""
    if values.get("deepspeed"):
        return _deepspeed_engine(values["deepspeed"], "deepspeed")
    fsdp = values.get("fsdp")
    if fsdp not in (None, "", False, [], ()):
        fsdp_config = values.get("fsdp_config") or {}
        version = fsdp_config.get("version", fsdp_config.get("fsdp_version", 1)) if isinstance(fsdp_config, Mapping) else 1
        return Engine("fsdp", fsdp_version=int(version), source="fsdp")
    return None


def engine_from_env(environ: Mapping[str, str] | None = None) -> Engine | None:
    """The engine `accelerate launch` set up in ``environ`` (default ``os.environ``), or None."""
    env = os.environ if environ is None else environ
    if _flag(env.get("ACCELERATE_USE_DEEPSPEED", "false")):
        return _deepspeed_engine(env.get("ACCELERATE_DEEPSPEED_CONFIG_FILE"), "ACCELERATE_USE_DEEPSPEED",
                                 env.get("ACCELERATE_DEEPSPEED_ZERO_STAGE"))
    if _flag(env.get("ACCELERATE_USE_FSDP", "false")):
        version = env.get("FSDP_VERSION", "1")
        return Engine("fsdp", fsdp_version=int(version) if version.isdigit() else 1, source="ACCELERATE_USE_FSDP")
    return None


def engine_from_accelerate_config(config: Mapping[str, Any], source: str = "the accelerate config") -> Engine:
    """The engine and process counts of an accelerate config file's contents (a parsed YAML mapping).

    ``num_processes`` is accelerate's: all processes over all machines (``accelerate launch --num_machines 2
    --num_processes 16`` runs 8 per machine), which is the world size the plan counts.
    """
    kind = str(config.get("distributed_type", "NO")).upper()
    counts = {"num_processes": config.get("num_processes"), "num_machines": config.get("num_machines")}
    counts = {k: int(v) for k, v in counts.items() if v is not None}
    if kind == "DEEPSPEED":
        ds = config.get("deepspeed_config") or {}
        return _deepspeed_engine(ds.get("deepspeed_config_file"), source, ds.get("zero_stage"), **counts)
    if kind == "FSDP":
        version = (config.get("fsdp_config") or {}).get("fsdp_version", 1)
        return Engine("fsdp", fsdp_version=int(version), source=source, **counts)
    multi = kind.startswith("MULTI_") or counts.get("num_processes", 1) > 1
    return Engine("ddp" if multi else "single", source=source, **counts)


def resolve_engine(values: Mapping[str, Any], environ: Mapping[str, str] | None = None,
                   accelerate_config: Engine | None = None) -> Engine:
    """The run's engine: its own fields, else the launch environment, else ``accelerate_config``, else one process
    (or DDP when ``WORLD_SIZE`` > 1)."""
    env = os.environ if environ is None else environ
    found = engine_from_run_values(values) or engine_from_env(env) or accelerate_config
    if found is not None:
        return found
    world = env.get("WORLD_SIZE", "1")
    return Engine("ddp" if world.isdigit() and int(world) > 1 else "single", source="WORLD_SIZE")
