"""Which distributed engine a run uses (DDP, DeepSpeed ZeRO, FSDP), read without torch before any model loads
(docs/scaling.md); the refusals are in `validation.engines`."""

from __future__ import annotations

import base64
import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .checks import RunArgumentError, world_size_from_env


@dataclass(frozen=True)
class Engine:
    """A run's engine: ``kind`` (``single``, ``ddp``, ``deepspeed`` or ``fsdp``), the counts its ``source`` gives,
    ``optimizer_section`` (the DeepSpeed JSON builds its own optimizer: the trainer's ``create_optimizer`` never runs),
    accelerate's ``mixed_precision`` and ``config_problem`` (a DeepSpeed config that does not read as JSON)."""

    kind: str = "single"
    zero_stage: int | None = None
    fsdp_version: int | None = None
    num_processes: int | None = None
    num_machines: int | None = None
    source: str = "default"
    optimizer_section: bool = False
    mixed_precision: str | None = None
    config_problem: str | None = None

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


def _deepspeed_json(config: Any) -> tuple[Mapping, str | None]:
    """A DeepSpeed config (a dict, a JSON file, JSON or base64-JSON text, as transformers' `HfDeepSpeedConfig` reads
    it) as a mapping, and what is wrong with it (None when it reads)."""
    if not isinstance(config, str) or config.strip().lower() in ("", "none"):
        return (config if isinstance(config, Mapping) else {}), None
    try:
        if os.path.isfile(config):
            with open(config, encoding="utf-8") as f:
                data = json.load(f)
        else:
            try:
                data = json.loads(config)
            except ValueError:
                data = json.loads(base64.urlsafe_b64decode(config).decode("utf-8"))
    except OSError as err:
        return {}, f"the DeepSpeed config {config!r} cannot be read ({err.strerror or err})"
    except (ValueError, UnicodeDecodeError):
        what = "is not JSON (DeepSpeed reads a JSON file)" if os.path.isfile(config) else "is no such file"
        return {}, f"the DeepSpeed config {config!r} {what}"
    if not isinstance(data, Mapping):
        return {}, f"the DeepSpeed config {config!r} is not a JSON object"
    return data, None


def _deepspeed_engine(config: Any, source: str, zero_stage: Any = None, **counts) -> Engine:
    ds, problem = _deepspeed_json(config)
    if zero_stage is None:
        zero_stage = (ds.get("zero_optimization") or {}).get("stage")
    stage = int(zero_stage) if str(zero_stage).isdigit() else None
    return Engine("deepspeed", zero_stage=stage, source=source, optimizer_section="optimizer" in ds,
                  config_problem=problem, **counts)


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
                                 env.get("ACCELERATE_DEEPSPEED_ZERO_STAGE"),
                                 mixed_precision=env.get("ACCELERATE_MIXED_PRECISION"))
    if _flag(env.get("ACCELERATE_USE_FSDP", "false")):
        version = env.get("FSDP_VERSION", "1")
        return Engine("fsdp", fsdp_version=int(version) if version.isdigit() else 1, source="ACCELERATE_USE_FSDP",
                      mixed_precision=env.get("ACCELERATE_MIXED_PRECISION"))
    return None


def engine_from_accelerate_config(config: Mapping[str, Any], source: str = "the accelerate config") -> Engine:
    """The engine and counts of an accelerate config's contents (``num_processes``: over all machines).

    Raises:
        RunArgumentError: a key accelerate would fail on, naming ``source``, the key, the value and a fix."""
    def whole(key: str, value: Any, low: int = 1) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise RunArgumentError(f"{source}: {key}={value!r} is not a whole number >= {low}. Fix: e.g. {key}: 2.")
        return value

    def section(key: str) -> Mapping:
        value = config.get(key) or {}
        if not isinstance(value, Mapping):
            raise RunArgumentError(f"{source}: {key}={value!r} is not a mapping of settings. Fix: write {key}: as "
                                   "keys and values (recipes/accelerate_configs/ has examples), or remove it.")
        return value

    kind = str(config.get("distributed_type", "NO")).upper()
    counts = {k: whole(k, config[k]) for k in ("num_processes", "num_machines") if config.get(k) is not None}
    if kind == "DEEPSPEED":
        ds = section("deepspeed_config")
        return _deepspeed_engine(ds.get("deepspeed_config_file"), source, ds.get("zero_stage"),
                                 mixed_precision=config.get("mixed_precision"), **counts)
    mixed = config.get("mixed_precision")
    if kind == "FSDP":
        version = whole("fsdp_config.fsdp_version", section("fsdp_config").get("fsdp_version", 1))
        return Engine("fsdp", fsdp_version=version, source=source, mixed_precision=mixed, **counts)
    multi = kind.startswith("MULTI_") or counts.get("num_processes", 1) > 1
    return Engine("ddp" if multi else "single", source=source, mixed_precision=mixed, **counts)


def resolve_engine(values: Mapping[str, Any], environ: Mapping[str, str] | None = None,
                   accelerate_config: Engine | None = None) -> Engine:
    """The run's engine: its fields, else the launch environment, else ``accelerate_config``, else DDP when
    ``WORLD_SIZE`` > 1, else one process; accelerate's mixed precision from the environment where unnamed."""
    env = os.environ if environ is None else environ
    found = engine_from_run_values(values) or engine_from_env(env) or accelerate_config
    mixed = env.get("ACCELERATE_MIXED_PRECISION")
    if found is not None:
        precision = found.mixed_precision if found.mixed_precision is not None else mixed or None
        return dataclasses.replace(found, mixed_precision=precision)
    world = world_size_from_env(env, strict=False)  # a bad value is the front door's refusal, not ours
    return Engine("ddp" if world > 1 else "single", source="ACCELERATE_MIXED_PRECISION" if mixed else "WORLD_SIZE",
                  mixed_precision=mixed)
