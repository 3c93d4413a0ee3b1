"""Deprecated: ``trl_grpo_ext.quantifiers`` was split by concern in 0.1.x; it is removed in 0.3.0.

Every name still imports from here, with a `FutureWarning` that names its new home:

- `RunPlan`, `resolve_plan`, `QuantityError`, `resolve_trl_fields`, `TRL_DEFAULTS`, `plan_warnings`:
  `trl_grpo_ext.plan`;
- `RESUME_SAFE_FIELDS`, `check_resume_compatible`: `trl_grpo_ext.training.checkpoints`;
- `resample_note`: `trl_grpo_ext.zero_variance`.
"""

from __future__ import annotations

import importlib
import warnings

#: old name -> the module that holds it now
_MOVED = {
    "RunPlan": "trl_grpo_ext.plan",
    "resolve_plan": "trl_grpo_ext.plan",
    "QuantityError": "trl_grpo_ext.plan",
    "resolve_trl_fields": "trl_grpo_ext.plan",
    "TRL_DEFAULTS": "trl_grpo_ext.plan",
    "plan_warnings": "trl_grpo_ext.plan",
    "RESUME_SAFE_FIELDS": "trl_grpo_ext.training.checkpoints",
    "check_resume_compatible": "trl_grpo_ext.training.checkpoints",
    "resample_note": "trl_grpo_ext.zero_variance",
}

__all__ = sorted(_MOVED)


def __getattr__(name: str):
    if name not in _MOVED:
        raise AttributeError(f"module 'trl_grpo_ext.quantifiers' has no attribute {name!r}")
    warnings.warn(
        f"trl_grpo_ext.quantifiers is deprecated and will be removed in trl-grpo-ext 0.3.0: import {name} from "
        f"{_MOVED[name]} instead.", FutureWarning, stacklevel=2,
    )
    return getattr(importlib.import_module(_MOVED[name]), name)
