"""Settings: reading, checking and resolving a run's configuration, and :class:`GRPOExtConfig` (its public names load
from ``ext_config`` on first use)."""

import logging

from .. import _lazy_exports

# bitsandbytes (imported with TRL) warns on CPU that the optional `kernels` package would speed it up (see trainer.py)
logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)

__getattr__ = _lazy_exports(__name__, ".ext_config", frozenset({
    "ADAPTER_DTYPES", "GRPOExtConfig", "RewardEntry", "TRL_FIELD_RANGES", "ZERO_VARIANCE_MODES"}))
