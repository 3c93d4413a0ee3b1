"""LoRA target modules against the model's module names, read from its config on the meta device (no weights)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..config.checks import RunArgumentError


def _config_text(values: Mapping[str, Any]) -> str | None:
    """The model's config JSON without transformers: the embedded shape, a local ``config.json`` or the Hub cache's."""
    from ..models.embedded import tiny

    name = values.get("model_name_or_path")
    if not name:
        return None
    if name == tiny.TINY_MODEL_ID:
        return json.dumps({"model_type": "qwen2", "vocab_size": len(tiny.ALPHABET) + len(tiny.SPECIAL_TOKENS),
                           **tiny.TINY_CONFIG}, sort_keys=True)
    local = Path(str(name)).expanduser() / "config.json"
    if local.is_file():
        return local.read_text(encoding="utf-8")
    if tiny.is_embedded(name) or values.get("trust_remote_code"):
        return None
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(str(name), "config.json", revision=values.get("model_revision") or None)
    except Exception:  # a malformed repository id: `check_model_path` reports it
        return None
    return Path(cached).read_text(encoding="utf-8") if isinstance(cached, str) else None


def model_modules(values: Mapping[str, Any]) -> dict[str, str] | None:
    """``{module name: class name}`` of the model without a weight (meta device), cached as JSON under
    ``cache_dir() / "module-names"`` by the SHA-256 of the config; None when the config cannot be read offline."""
    from ..models.cache import cache_dir

    text = _config_text(values)
    if text is None:
        return None
    path = cache_dir() / "module-names" / f"{hashlib.sha256(text.encode()).hexdigest()}.json"
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM

    data = json.loads(text)
    model_type = data.pop("model_type", None)
    try:
        config = AutoConfig.for_model(model_type, **data)
        with init_empty_weights():
            model = AutoModelForCausalLM.from_config(config)
    except (ValueError, KeyError, TypeError, OSError):
        return None  # an architecture transformers cannot build without remote code: PEFT will judge
    modules = {name: type(module).__name__ for name, module in model.named_modules() if name}
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as fh:
        json.dump(modules, fh)
    os.replace(fh.name, path)
    return modules


def peft_target_matches(target: str | set[str], name: str) -> bool:
    """PEFT's rule (``check_target_module_exists``, PEFT 0.18): a string is a regular expression over the full name;
    a set matches an item or a name ending in ``.item`` (tests/test_validation.py compares it with PEFT's)."""
    if isinstance(target, str):
        return re.fullmatch(target, name) is not None
    return name in target or any(name.endswith(f".{t}") for t in target)


def check_lora_targets(values: Mapping[str, Any], read_model: bool = True) -> None:
    """Refuse ``lm_head`` in ``lora_target_modules`` (TRL refuses it after the model loads); with ``read_model``, an
    entry matching no module of the model (:func:`model_modules`, PEFT's matching; a one-item list is a regular
    expression, as `trl.ModelConfig` makes it). Raises RunArgumentError."""
    targets = values.get("lora_target_modules")
    if targets and "lm_head" in ([targets] if isinstance(targets, str) else list(targets)):
        raise RunArgumentError("lora_target_modules contains 'lm_head': TRL refuses a LoRA adapter on lm_head (after "
                               "the model loads). Fix: remove it and train a full copy with lora_modules_to_save: "
                               "[lm_head].")
    if isinstance(targets, (list, tuple)) and len(targets) == 1:
        targets = targets[0]  # as trl.ModelConfig.__post_init__ does (the plan passes the YAML list)
    modules = model_modules(values) if read_model and targets and targets != "all-linear" else None
    if modules is None:
        return
    leaf_names = sorted({name.rsplit(".", 1)[-1] for name in modules})
    for label, target in [(targets, targets)] if isinstance(targets, str) else [(t, {t}) for t in targets]:
        if not any(peft_target_matches(target, n) for n in modules):
            import difflib

            close = difflib.get_close_matches(str(label).split(".")[-1], leaf_names, n=3) or leaf_names[:8]
            extra = (" TRL passes a one-item list as a string, which PEFT reads as a regular expression over full "
                     f"module names (e.g. {next(iter(modules))!r}); write '.*{label}' or list two modules."
                     if isinstance(target, str) and re.fullmatch(r"\w+", label) else "")
            raise RunArgumentError(f"lora_target_modules: {label!r} matches no module of "
                                   f"{values.get('model_name_or_path')}.{extra} Fix: use module names of the model, "
                                   f"e.g. {', '.join(close)}.")


def check_quantized_has_adapter(values: Mapping[str, Any]) -> None:
    """Refuse ``load_in_4bit`` / ``load_in_8bit`` without ``use_peft``: transformers' Trainer refuses a purely quantized
    model after it has loaded."""
    bits = next((name for name in ("load_in_4bit", "load_in_8bit") if values.get(name)), None)
    if bits is not None and not values.get("use_peft"):
        raise RunArgumentError(
            f"{bits}=True with use_peft={values.get('use_peft')!r}: a quantized base cannot be fine-tuned itself "
            "(transformers refuses it after the model has loaded), only a LoRA adapter on top of it. Fix: set "
            f"use_peft: true (QLoRA), or {bits}: false for a full fine-tune.")
