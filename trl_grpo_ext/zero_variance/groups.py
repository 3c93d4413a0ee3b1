"""Which groups have zero variance, and what masking them does to each loss normaliser (pure tensor functions).

A group of G completions has *zero variance* when the rewards the filter judges (the weighted total, or one reward
function chosen with ``zero_variance_reward``) are all equal, or their std is at most ``zero_variance_tolerance``: every
advantage in it is 0, so it carries no policy-gradient signal.
"""

from __future__ import annotations

import torch

from ..advantages import equal_reward_groups, reward_std
from ..config.advantage_settings import STD_KINDS
from ..config.checks import Range, check_choice

#: Loss types normalised by rows (masking rows needs the rescale rows / kept rows, :func:`masked_loss_scale`) or by
#: kept tokens (dapo, cispo, vespo: `num_items_in_batch`; bnpo: the micro-batch's own).
ROW_NORMALISED_LOSSES = frozenset({"grpo", "sapo", "dr_grpo", "luspo"})
TOKEN_NORMALISED_LOSSES = frozenset({"dapo", "bnpo", "cispo", "vespo"})

_TOLERANCE = Range(low=0, fix="a std in reward units; 0 = exactly equal rewards.")


def zero_variance_group_mask(
    rewards: torch.Tensor, num_generations: int, tolerance: float = 0.0, std_kind: str = "sample",
    sizes: list[int] | None = None,
) -> torch.Tensor:
    """Flag every completion of a group whose rewards carry no learning signal (zero-variance groups).

    A group has zero variance when (a) it has fewer than 2 non-missing rewards, or (b) all its non-missing rewards
    are equal (max == min, compared exactly, so [0.1, 0.1, 0.1] qualifies although its computed std is rounding
    noise, e.g. 3e-8 in float32; `advantages.equal_reward_groups`), or (c) `tolerance` > 0 and the std (`std_kind`)
    of its non-missing rewards is <= tolerance.

    Args:
        rewards (`torch.Tensor`): float, shape `(N,)` in group order (N = prompts × G); NaN = missing.
        num_generations (`int`): G, completions per prompt (>= 1).
        tolerance (`float`, defaults to `0.0`): largest within-group std still called zero variance, in reward
            units; finite, >= 0.
        std_kind (`str`, defaults to `"sample"`): std used for (c), one of `STD_KINDS`.
        sizes (`list[int]`, *optional*): completions of each group when they differ (``rollout_budget: adaptive``;
            they sum to N); None: groups of ``num_generations``.

    Returns:
        `torch.Tensor`: bool, shape `(N,)`; every completion of a zero-variance group is `True`.

    Raises:
        ValueError: bad `rewards` or `num_generations`, negative or non-finite `tolerance`, unknown `std_kind`.
    """
    check_choice("std_kind", std_kind, STD_KINDS)
    tolerance = _TOLERANCE.check("tolerance", tolerance)
    if sizes is not None:  # unequal groups: laid out as equal ones, the gaps missing (NaN)
        from .budget import padded_groups, ungrouped

        padded, width = padded_groups(rewards, sizes, float("nan"))
        return ungrouped(zero_variance_group_mask(padded, width, tolerance, std_kind), sizes, width)
    mask = equal_reward_groups(rewards, num_generations)
    if tolerance > 0:
        mask |= reward_std(rewards, num_generations, "group", std_kind) <= tolerance
    return mask


def generated_uniform_fraction(total_rewards: torch.Tensor, num_generations: int, scale_rewards: str = "group",
                               tolerance: float = 0.0, sizes: list[int] | None = None) -> float:
    """TRL's ``frac_reward_zero_std`` computed right: the share of rows whose std (group, or the whole batch with
    ``scale_rewards="batch"``) is zero, by `zero_variance_group_mask`'s float32-safe definition.

    TRL 1.16 tests ``torch.isclose(std, 0)`` (``atol=1e-8``): eight float32 rewards of 0.2 have a computed std of
    1.59e-8, of 0.3 3.19e-8, so such a uniform group counts as informative there; a group whose rewards are all None
    (NaN std) counts as informative too. Here both are uniform, as the filter and `compute_advantages` see them.

    Args:
        total_rewards (`Tensor`): (N,) weighted total rewards in group order, NaN where unscorable.
        num_generations (`int`): G. scale_rewards (`str`): TRL's ``scale_rewards`` (``"batch"`` judges the batch).
        tolerance (`float`, defaults to `0.0`): ``zero_variance_tolerance`` [reward units].
        sizes (`list[int]`, *optional*): completions of each group when they differ (``rollout_budget``).

    Returns:
        `float` in [0, 1].

    >>> generated_uniform_fraction(torch.tensor([0.2] * 8 + [0.0, 1.0] * 4), 8)
    0.5
    """
    if scale_rewards == "batch":
        return zero_variance_group_mask(total_rewards, total_rewards.numel(), tolerance).float().mean().item()
    return zero_variance_group_mask(total_rewards, num_generations, tolerance, sizes=sizes).float().mean().item()


def weighted_total(rewards_per_func: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Per-completion total reward as TRL forms it: Σ_k w_k r_k over the functions that returned a value.

    Args:
        rewards_per_func (`Tensor`): (N, F) float, NaN where a reward function returned None.
        weights (`Tensor`): (F,) reward weights.

    Returns:
        (N,) float; NaN where every function returned None (an unscorable completion).
    """
    total = (rewards_per_func * weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)
    return total.masked_fill(torch.isnan(rewards_per_func).all(dim=1), float("nan"))


def judged_rewards(rewards_per_func: torch.Tensor, weights: torch.Tensor, index: int | None) -> torch.Tensor:
    """The per-completion values the zero-variance filter judges groups on.

    Args:
        rewards_per_func (`Tensor`): (N, F) float, NaN where a reward function returned None.
        weights (`Tensor`): (F,) reward weights.
        index (`int`, *optional*): column of the chosen reward function (`zero_variance_reward`); ``None`` judges the
            weighted total (`weighted_total`).

    Returns:
        (N,) float: the chosen function's raw (unweighted) values, or the weighted totals; NaN where missing.

    Example: accuracy [0, 0, 0, 0] and a 0.1-weighted format reward [1, 0, 1, 1] give totals [0.1, 0, 0.1, 0.1]
    (not zero variance), but judged on accuracy (index 0) the group has zero variance.
    """
    if index is None:
        return weighted_total(rewards_per_func, weights)
    return rewards_per_func[:, index]


def masked_loss_scale(loss_type: str, num_rows: int, kept_rows: int) -> float:
    """Factor on a loss whose masked rows still count in its normaliser, so that it equals the loss of the kept rows.

    For row-normalised losses (`ROW_NORMALISED_LOSSES`: mean over sequences, or a constant per sequence as in Dr.
    GRPO's B × L_max) the masked rows contribute 0 to the numerator but count in the denominator; multiplying by
    rows / kept rows restores the mean over the kept rows. Token-normalised losses need no factor (1.0).

    Args:
        loss_type (`str`): TRL's `loss_type`.
        num_rows (`int`): rows (completions) of the generation batch, all processes.
        kept_rows (`int`): rows kept by the filter, all processes.

    Returns:
        `float`; 1.0 when nothing is kept (the loss is 0 then, and the optimizer step is skipped).

    Raises:
        ValueError: unknown ``loss_type``.
    """
    if loss_type in TOKEN_NORMALISED_LOSSES:
        return 1.0
    if loss_type not in ROW_NORMALISED_LOSSES:
        raise ValueError(f"zero_variance_filter does not know how loss_type={loss_type!r} normalises its loss.")
    return num_rows / kept_rows if kept_rows else 1.0


def identical_group_fraction(completion_ids: list, gather, num_generations: int, device=None) -> float | None:
    """Share of the generated groups whose G completions are the same tokens: a sampler collapsed onto one reply,
    whose group is uniform whatever the reward (no prompt selection helps; more entropy does).

    Args:
        completion_ids (`list`): the local completions' token ids (lists or 1-D tensors), in row order.
        gather (callable): (B,) tensor -> (N,) the processes' rows in order (``accelerator.gather``).
        num_generations (`int`): G. device: where ``gather`` expects the tensor.

    Returns:
        `float | None`: the share; None without completions (a caller that passes none).

    >>> identical_group_fraction([[1, 2], [1, 2], [3], [4]], lambda t: t, 2)
    0.5
    """
    if not completion_ids:
        return None
    hashes = torch.tensor([hash(tuple(ids.tolist() if torch.is_tensor(ids) else ids)) for ids in completion_ids],
                          dtype=torch.int64, device=device)
    groups = gather(hashes).view(-1, num_generations)
    return (groups == groups[:, :1]).all(dim=1).float().mean().item()
