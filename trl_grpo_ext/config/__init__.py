"""Settings: reading, checking and resolving a run's configuration (the front door, field tables, cross-field
inputs, the recipe's argument parsing) and :class:`GRPOExtConfig`.

The public names of ``ext_config`` (``trl_grpo_ext.config`` was one module before the package was laid out by concern)
load from here on first use, so importing a sibling module stays light.
"""

from .. import _lazy_exports

#: Names re-exported from ``ext_config``.
_EXPORTS = frozenset({
    "ADAPTER_DTYPES",
    "GRPOExtConfig",
    "RewardEntry",
    "TRL_FIELD_RANGES",
    "ZERO_VARIANCE_MODES",
})

__getattr__ = _lazy_exports(__name__, ".ext_config", _EXPORTS)
