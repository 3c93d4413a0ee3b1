"""trl-grpo-ext: a GRPO add-on for Hugging Face TRL.

Heavy imports (torch, transformers, trl) are deferred until a trainer or config class is used, so the command line
(`trl-grpo-ext plan`, `trl-grpo-ext rewards`) answers without importing torch.
"""

from importlib import import_module
from typing import TYPE_CHECKING

__version__ = "0.1.0"

_LAZY = {
    "GRPOExtConfig": "trl_grpo_ext.config.ext_config",
    "GRPOExtTrainer": "trl_grpo_ext.trainer",
    "RunPlan": "trl_grpo_ext.plan",
    "resolve_plan": "trl_grpo_ext.plan",
}

__all__ = ["__version__", *_LAZY]

if TYPE_CHECKING:  # pragma: no cover
    from .config.ext_config import GRPOExtConfig  # noqa: F401
    from .plan import RunPlan, resolve_plan  # noqa: F401
    from .trainer import GRPOExtTrainer  # noqa: F401


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'trl_grpo_ext' has no attribute {name!r}")
