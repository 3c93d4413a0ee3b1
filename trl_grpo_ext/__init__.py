"""trl-grpo-ext: a GRPO add-on for Hugging Face TRL.

Heavy imports (torch, transformers, trl) are deferred until a trainer or config class is used: `trl-grpo-ext
rewards` answers without importing torch; `trl-grpo-ext plan` imports TRL (it reads the real dataclasses) but loads no
model.
"""

import logging
from importlib import import_module
from typing import TYPE_CHECKING

from ._lazy import _lazy_exports  # noqa: F401 (older imports of the helper)
from ._version import __version__


class _OfflineKernelTrustNotice(logging.Filter):
    """Drops `kernels`' "Skipping publisher trust check for ... because Hugging Face Hub is in offline mode." (kernels
    0.19, pulled in by transformers 5.25): bitsandbytes' CPU backend asks for its hub kernel when it is imported, and
    the run is offline on purpose (`recipe_parse.set_offline_defaults`); bitsandbytes falls back by itself."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Skipping publisher trust check")


# Two log lines of optional packages that every CPU command would print (plan, the recipe, eval), set here once, before
# any of them is imported: bitsandbytes' hint that `kernels` would speed up 4-bit matmuls on a CPU (a hint for its own
# developers; only that logger, only below ERROR), and the offline notice above.
logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)
logging.getLogger("kernels._internals.hf_hub").addFilter(_OfflineKernelTrustNotice())

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
