"""Which distributed engine a run uses (DDP, DeepSpeed ZeRO, FSDP), read without torch before any model loads
(docs/scaling.md); the refusals are in `validation.engines`."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .checks import world_size_from_env


@dataclass(frozen=True)
class Engine:
    """A run's engine: ``kind`` (``single``, ``ddp``, ``deepspeed`` or ``fsdp``), the ZeRO stage or FSDP version
    (None: not known), the counts its ``source`` gives (``num_processes``: over all machines) and accelerate's
    ``mixed_precision``."""

    kind: str = "single"
    zero_stage: int | None = None
    fsdp_version: int | None = None
    num_processes: int | None = None
    num_machines: int | None = None
    source: str = "default"
    mixed_precision: str | None = None

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


def _whole(value: Any) -> int | None:
    """``value`` as a whole number (``3``, ``"3"``), or None."""
    return int(value) if not isinstance(value, bool) and str(value).strip().isdigit() else None


def _deepspeed_engine(config: Any, source: str, zero_stage: Any = None, **counts) -> Engine:
    """A DeepSpeed engine; the stage is ``zero_stage``, else the one of ``config`` (a dict, a JSON file or JSON text).
    A config that does not read leaves the stage unknown: transformers refuses it when the run's config is built."""
    if zero_stage is None and isinstance(config, str):
        try:
            config = json.loads(Path(config).read_text(encoding="utf-8") if os.path.isfile(config) else config)
        except (OSError, ValueError):
            config = None
    if zero_stage is None and isinstance(config, Mapping):
        zero_stage = (config.get("zero_optimization") or {}).get("stage")
    return Engine("deepspeed", zero_stage=_whole(zero_stage), source=source, **counts)


def engine_from_run_values(values: Mapping[str, Any]) -> Engine | None:
    """The engine the run's ``deepspeed`` / ``fsdp`` fields name, or None."""
    if values.get("deepspeed"):
        return _deepspeed_engine(values["deepspeed"], "deepspeed")
    if values.get("fsdp") not in (None, "", False, [], ()):
        fsdp_config = values.get("fsdp_config")
        fsdp_config = fsdp_config if isinstance(fsdp_config, Mapping) else {}
        return Engine("fsdp", fsdp_version=_whole(fsdp_config.get("version", fsdp_config.get("fsdp_version", 1))),
                      source="fsdp")
    return None


def engine_from_env(environ: Mapping[str, str] | None = None) -> Engine | None:
    """The engine `accelerate launch` set up in ``environ`` (default ``os.environ``), or None (its mixed precision:
    `resolve_engine`)."""
    env = os.environ if environ is None else environ
    if _flag(env.get("ACCELERATE_USE_DEEPSPEED")):
        return _deepspeed_engine(env.get("ACCELERATE_DEEPSPEED_CONFIG_FILE"), "ACCELERATE_USE_DEEPSPEED",
                                 env.get("ACCELERATE_DEEPSPEED_ZERO_STAGE"))
    if _flag(env.get("ACCELERATE_USE_FSDP")):
        return Engine("fsdp", fsdp_version=_whole(env.get("FSDP_VERSION", "1")) or 1, source="ACCELERATE_USE_FSDP")
    return None


def engine_from_accelerate_config(config: Mapping[str, Any], source: str = "the accelerate config") -> Engine:
    """The engine and counts of an accelerate config's contents (a count that is not a whole number is not read:
    accelerate refuses it at launch)."""
    def section(key: str) -> Mapping:
        return config[key] if isinstance(config.get(key), Mapping) else {}

    kind = str(config.get("distributed_type", "NO")).upper()
    counts = {key: _whole(config.get(key)) or None for key in ("num_processes", "num_machines")}
    mixed = config.get("mixed_precision")
    if kind == "DEEPSPEED":
        ds = section("deepspeed_config")
        return _deepspeed_engine(ds.get("deepspeed_config_file"), source, ds.get("zero_stage"), mixed_precision=mixed,
                                 **counts)
    if kind == "FSDP":
        version = _whole(section("fsdp_config").get("fsdp_version", 1))
        return Engine("fsdp", fsdp_version=version, source=source, mixed_precision=mixed, **counts)
    multi = kind.startswith("MULTI_") or (counts["num_processes"] or 1) > 1
    return Engine("ddp" if multi else "single", source=source, mixed_precision=mixed, **counts)


def resolve_engine(values: Mapping[str, Any], environ: Mapping[str, str] | None = None,
                   accelerate_config: Engine | None = None) -> Engine:
    """The run's engine: its fields, else the launch environment, else ``accelerate_config``, else DDP when
    ``WORLD_SIZE`` > 1, else one process; accelerate's mixed precision from the environment where unnamed."""
    env = os.environ if environ is None else environ
    found = engine_from_run_values(values) or engine_from_env(env) or accelerate_config
    mixed = env.get("ACCELERATE_MIXED_PRECISION")
    if found is not None:
        return dataclasses.replace(found, mixed_precision=found.mixed_precision or mixed or None)
    world = world_size_from_env(env, strict=False)  # a bad value is the front door's refusal, not ours
    return Engine("ddp" if world > 1 else "single", source="ACCELERATE_MIXED_PRECISION" if mixed else "WORLD_SIZE",
                  mixed_precision=mixed)
