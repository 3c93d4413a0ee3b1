"""Evaluation: the eval plan, generation and scoring of completions, statistics, and :func:`evaluate_model`.

The public names of ``evaluate`` (``trl_grpo_ext.evaluation`` was one module before the package was laid out by
concern) load from here on first use, so importing a sibling module stays light.
"""

from .._lazy import _lazy_exports

#: Names re-exported from ``evaluate``.
_EXPORTS = frozenset({
    "EVAL_RESULTS_FILE",
    "EvalResult",
    "FinalEvaluation",
    "compare",
    "evaluate_model",
    "final_evaluation",
    "format_comparison",
    "format_result",
    "pass_at_k_values",
})

__getattr__ = _lazy_exports(__name__, ".evaluate", _EXPORTS)
