"""Data: loading datasets (hub, local, embedded), their checks, the arithmetic set and local columns.

The public names of ``load`` (``trl_grpo_ext.data`` was one module before the package was laid out by concern) load
from here on first use, so importing a sibling module stays light.
"""

from .._lazy import _lazy_exports

#: Names re-exported from ``load``.
_EXPORTS = frozenset({
    "ARITHMETIC_SYSTEM_PROMPT",
    "EMBEDDED_DATASETS",
    "GSM8K_SYSTEM_PROMPT",
    "apply_prompt_settings",
    "check_gsm8k_rows",
    "drop_long_prompts",
    "gsm8k_final_answer",
    "gsm8k_to_prompt",
    "load_eval_dataset",
    "load_prompt_dataset",
    "prompt_length",
    "to_chat_prompt",
})

__getattr__ = _lazy_exports(__name__, ".load", _EXPORTS)
