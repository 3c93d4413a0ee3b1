"""The zero-variance group filter: "mask", or "resample" (DAPO dynamic sampling) then mask.

A group of G completions has *zero variance* when the rewards the filter judges are all equal (or spread at most
``zero_variance_tolerance``): every advantage in it is 0, so it carries no policy-gradient signal, yet TRL still
counts its tokens in the loss normaliser and applies KL / entropy terms to it. "mask" removes its completions from
the loss and the normaliser; "resample" (Yu et al. 2025, DAPO, arXiv 2503.14476) first replaces such groups with
informative groups generated for further prompts. Groups are judged on the weighted total reward, the quantity TRL
turns into advantages (``multi_objective_aggregation="sum_then_normalize"``), or on one reward function chosen with
``zero_variance_reward``. TRL's own name for the idea ("zero std") appears only in `metrics.TRL_METRICS`.

One unit, one module per concern, none importing the trainer:

- `groups`: which rows belong to zero-variance groups; the loss rescale per loss type.
- `merge`: resample's batch surgery (replace groups, re-pad).
- `resample`: the extra prompts' order, the round size, the printed note.
- `metrics`: our logged names, TRL's names, TRL's metrics of the batch trained on.
- `settings`: the config checks and the judged reward column.
- `filter`: `ZeroVarianceFilter`, which runs all of it with the gather / reduce functions it is given.
"""

from .filter import ZeroVarianceFilter
from .groups import (
    ROW_NORMALISED_LOSSES,
    TOKEN_NORMALISED_LOSSES,
    judged_rewards,
    masked_loss_scale,
    weighted_total,
    zero_variance_group_mask,
)
from .merge import fill_zero_variance_groups
from .metrics import METRICS, TRL_METRICS, trained_batch_metrics
from .resample import (
    ResampleSource,
    ZeroVarianceFractionEstimate,
    expected_surplus,
    resample_note,
    resample_round_size,
)
from .settings import check_zero_variance_settings, judged_reward_index

__all__ = [
    "METRICS",
    "ROW_NORMALISED_LOSSES",
    "TOKEN_NORMALISED_LOSSES",
    "TRL_METRICS",
    "ResampleSource",
    "ZeroVarianceFilter",
    "ZeroVarianceFractionEstimate",
    "check_zero_variance_settings",
    "expected_surplus",
    "fill_zero_variance_groups",
    "judged_reward_index",
    "judged_rewards",
    "masked_loss_scale",
    "resample_note",
    "resample_round_size",
    "trained_batch_metrics",
    "weighted_total",
    "zero_variance_group_mask",
]
