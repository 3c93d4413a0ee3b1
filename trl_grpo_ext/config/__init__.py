"""Settings: reading, checking and resolving a run's configuration, and :class:`GRPOExtConfig` (its public names load
from ``ext_config`` on first use)."""

from .._lazy import _lazy_exports  # (the package's __init__ quiets two optional packages' log lines first)

__getattr__ = _lazy_exports(__name__, ".ext_config", frozenset({
    "ADAPTER_DTYPES", "GRPOExtConfig", "RewardEntry", "ZERO_VARIANCE_MODES"}))
