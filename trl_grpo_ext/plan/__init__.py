"""The quantities of a GRPO run, resolved once into a frozen :class:`RunPlan` (pure Python: no torch, no TRL import).

- :mod:`.resolve`: the user's quantities -> TRL's own fields (:func:`resolve_trl_fields`, :class:`QuantityError`);
- :mod:`.run_plan`: what TRL and transformers will do with them on a dataset (:func:`resolve_plan`,
  :class:`RunPlan` and its table, :func:`format_plan_report`, :func:`confirm_plan`);
- :mod:`.advice`: the rules of thumb as warnings (:func:`plan_warnings`) and the resample note.

Whether a checkpoint's saved plan allows a resume is `trl_grpo_ext.training.checkpoints`' part. See ``docs/quantifiers.md``.
"""

from .advice import plan_warnings
from .resolve import TRL_DEFAULTS, QuantityError, resolve_trl_fields
from .run_plan import RunPlan, confirm_plan, format_plan_report, resolve_plan, seed_line

__all__ = [
    "QuantityError",
    "TRL_DEFAULTS",
    "RunPlan",
    "resolve_trl_fields",
    "resolve_plan",
    "confirm_plan",
    "format_plan_report",
    "plan_warnings",
    "seed_line",
]
