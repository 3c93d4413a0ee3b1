"""The zero-variance group filter: "mask", "resample" (DAPO dynamic sampling) then mask, or "skip" (GRESO) then mask.

A group of G completions has *zero variance* when the rewards the filter judges are all equal (or their std is at
most ``zero_variance_tolerance``): every advantage in it is 0, so it carries no policy-gradient signal, yet TRL still
counts its tokens in the loss normaliser and applies KL / entropy terms to it. "mask" removes its completions from
the loss and the normaliser; "resample" (Yu et al. 2025, DAPO, arXiv 2503.14476) first replaces such groups with
informative groups generated for further prompts. Groups are judged on the weighted total reward, the quantity TRL
turns into advantages (``multi_objective_aggregation="sum_then_normalize"``), or on one reward function chosen with
``zero_variance_reward``. TRL's own name for the idea ("zero std") appears only in `metrics.TRL_METRICS`.

One unit, one module per concern, none importing the trainer:

- `groups`: which rows belong to zero-variance groups; the loss rescale per loss type.
- `merge`: resample's batch surgery (replace groups, re-pad).
- `resample`: the extra prompts' order and the round size.
- `history`: skip's per-prompt reward history and the epoch's skip decisions.
- `report`: the uniform-group figures read back from the logs (console, plot, card; no torch).
- `metrics`: our logged names, TRL's names, TRL's metrics of the batch trained on.
- `settings`: the config checks, the judged reward column and the note printed under the plan (no torch).
- `filter`: `ZeroVarianceFilter`, which runs all of it with the gather / reduce functions it is given.

Names are imported from their module on first use (PEP 562 ``__getattr__``), so that `trl-grpo-ext plan` imports
the torch-free `settings` without loading torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

#: public name -> the module of this package that defines it (imported on first access, see `__getattr__`)
_WHERE = {
    "METRICS": "metrics",
    "ROW_NORMALISED_LOSSES": "groups",
    "ResampleSource": "resample",
    "TOKEN_NORMALISED_LOSSES": "groups",
    "TRL_METRICS": "metrics",
    "ZeroVarianceFilter": "filter",
    "ZeroVarianceFractionEstimate": "resample",
    "HistorySeed": "history",
    "PromptHistory": "history",
    "check_skip_plan": "settings",
    "check_zero_variance_settings": "settings",
    "expected_surplus": "resample",
    "fill_zero_variance_groups": "merge",
    "judged_reward_index": "settings",
    "judged_rewards": "groups",
    "masked_loss_scale": "groups",
    "prompt_key": "history",
    "read_history_seed": "history",
    "run_expectations": "history",
    "start_history": "history",
    "budget_note": "report",
    "resample_note": "report",
    "resample_round_size": "resample",
    "skip_note": "report",
    "skip_substitutes": "history",
    "trained_batch_metrics": "metrics",
    "weighted_total": "groups",
    "zero_variance_group_mask": "groups",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    """Import ``name`` from its module on first access: the torch-free `settings` (the config checks and the note
    `trl-grpo-ext plan` prints) stays importable without torch."""
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))


if TYPE_CHECKING:  # for type checkers and IDEs
    from .filter import ZeroVarianceFilter  # noqa: F401
    from .groups import (  # noqa: F401
        ROW_NORMALISED_LOSSES,
        TOKEN_NORMALISED_LOSSES,
        judged_rewards,
        masked_loss_scale,
        weighted_total,
        zero_variance_group_mask,
    )
    from .history import (  # noqa: F401
        HistorySeed,
        PromptHistory,
        prompt_key,
        read_history_seed,
        run_expectations,
        skip_substitutes,
        start_history,
    )
    from .merge import fill_zero_variance_groups  # noqa: F401
    from .metrics import METRICS, TRL_METRICS, trained_batch_metrics  # noqa: F401
    from .report import budget_note, resample_note, skip_note  # noqa: F401
    from .resample import ResampleSource, ZeroVarianceFractionEstimate, expected_surplus, resample_round_size  # noqa: F401
    from .settings import check_skip_plan, check_zero_variance_settings, judged_reward_index  # noqa: F401
