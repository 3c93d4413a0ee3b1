"""Settings: reading, checking and resolving a run's configuration (the front door, field tables, cross-field
inputs, the recipe's argument parsing) and :class:`GRPOExtConfig`.

The public names of ``ext_config`` (``trl_grpo_ext.config`` was one module before the package was laid out by concern)
load from here on first use, so importing a sibling module stays light.
"""

from importlib import import_module

#: Names re-exported from ``ext_config``.
_EXPORTS = frozenset({
    "ADAPTER_DTYPES",
    "GRPOExtConfig",
    "RewardEntry",
    "TRL_FIELD_RANGES",
    "ZERO_VARIANCE_MODES",
})


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(".ext_config", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
