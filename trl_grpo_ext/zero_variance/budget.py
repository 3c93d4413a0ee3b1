"""A rollout budget per prompt (``rollout_budget: adaptive``): how a step's completions are split across its prompts,
and advantages over groups of unequal size (pure functions over numbers and tensors; docs/zero_variance.md).

A step still generates prompts_per_step × G completions, as the plan states, in two rounds. Each prompt first gets
n₀ = ⌊G / 2⌋ completions; its pass rate p is then estimated from them (with a prior, `estimate_pass_rates`), and the
other prompts_per_step × (G − n₀) completions go one at a time to the prompt whose value gains most
(`allocate_completions`). The value of n completions at pass rate p is

    V(n, p) = (1 − p) · (1 − pⁿ − (1 − p)ⁿ)

the chance 1 − pⁿ − (1 − p)ⁿ that the group is not uniform (Knapsack RL, Li et al. 2025, arXiv 2509.25849: a
prompt's value is its chance of a non-zero gradient; every rollout costs the same), weighted by 1 − p, the room the
prompt leaves to learn (our choice: a solved prompt's non-zero gradient teaches little, and without it V would give an
all-right prompt as much as an all-wrong one). V is concave in n for fixed p, so adding one completion at a time to
the largest gain maximises Σ V over the batch (the greedy solution of a separable concave knapsack with unit costs).
"""

from __future__ import annotations

import heapq
import math

import torch

#: Pseudo-completions of the prior in a pass-rate estimate (Beta prior of strength 2 centred on the prior mean).
PRIOR_STRENGTH = 2.0


def first_round_size(num_generations: int) -> int:
    """n₀ = ⌊G / 2⌋, the completions every prompt gets in the first round (at least 2: G ≥ 4 is required).

    >>> first_round_size(8), first_round_size(5)
    (4, 2)
    """
    return num_generations // 2


def completion_value(n: int, p: float) -> float:
    """V(n, p) = (1 − p)(1 − pⁿ − (1 − p)ⁿ), the value of n completions of a prompt at pass rate p (module docstring).

    >>> round(completion_value(8, 0.1), 4)  # 0.9 · (1 − 1e-8 − 0.9⁸ = 0.5695)
    0.5126
    """
    return (1.0 - p) * (1.0 - p ** n - (1.0 - p) ** n)


def allocate_completions(pass_rates: list[float], extra: int, start: int) -> list[int]:
    """Completions per prompt: ``start`` each, then ``extra`` more, one at a time to the prompt whose value
    `completion_value` gains most (ties to the prompt with fewer completions, then the earlier one: prompts all
    estimated at p = 0, as before any reward was scored above 0, split evenly).

    Args:
        pass_rates (`list[float]`): p of each prompt, in [0, 1].
        extra (`int`): completions to add, ≥ 0 [completions].
        start (`int`): completions every prompt already has (n₀), ≥ 1.

    Returns:
        `list[int]`: completions per prompt; they sum to ``len(pass_rates) × start + extra``.

    Example: p = 0.1 (hard) and 0.9 (nearly solved), start 4, 8 more. The hard prompt's gain from its 5th completion
    is V(5, .1) − V(4, .1) = 0.9 · (0.9⁴ − 0.9⁵) = 0.0590 (the pⁿ terms are below 1e-4), the easy one's
    0.1 · (0.9⁴ − 0.9⁵) = 0.0066; the hard prompt keeps the larger gain for all 8 (its 12th still gains 0.9 · 0.9¹¹ ·
    0.1 = 0.0282):

    >>> allocate_completions([0.1, 0.9], 8, 4)
    [12, 4]
    >>> allocate_completions([0.5, 0.5, 0.5], 3, 2)  # equal estimates: G each
    [3, 3, 3]
    >>> allocate_completions([0.0, 0.0, 0.0, 0.0], 8, 2)  # V = 0 everywhere: no information, G each
    [4, 4, 4, 4]
    """
    counts = [start] * len(pass_rates)
    heap = [(-(completion_value(start + 1, p) - completion_value(start, p)), start, i)
            for i, p in enumerate(pass_rates)]
    heapq.heapify(heap)
    for _ in range(extra):
        _, _, i = heapq.heappop(heap)
        counts[i] += 1
        p, n = pass_rates[i], counts[i]
        heapq.heappush(heap, (-(completion_value(n + 1, p) - completion_value(n, p)), n, i))
    return counts


def estimate_pass_rates(scores: list[list[float]], priors: list[float], strength: float = PRIOR_STRENGTH) -> list[float]:
    """Each prompt's pass rate: the mean of its first-round scores, shrunk towards its prior,
    p̂ = (Σ scores + strength · prior) / (n + strength) (the posterior mean under a Beta prior of that mean).

    Args:
        scores (`list[list[float]]`): per prompt, its completions' judged rewards scaled to [0, 1] (`scale_scores`).
        priors (`list[float]`): per prompt, the prior mean in [0, 1] (`PassRateHistory.prior`).
        strength (`float`, defaults to `PRIOR_STRENGTH`): the prior's weight [completions].

    >>> estimate_pass_rates([[0, 0, 0, 0], [1, 1, 0, 1]], [0.5, 0.5])  # (0 + 1) / 6, (3 + 1) / 6
    [0.16666666666666666, 0.6666666666666666]
    """
    return [(sum(row) + strength * prior) / (len(row) + strength) for row, prior in zip(scores, priors)]


def scale_scores(values: torch.Tensor, low: float | None, high: float | None) -> torch.Tensor:
    """Judged rewards scaled to [0, 1] by the reward's range (declared, else the run's; `causes.RewardRange`): 0 at
    the lowest, 1 at the highest; NaN (unscored) counts as 0. Before the range has two values, a positive reward is
    1 and any other 0 (as `causes.RewardRange.cause` decides right and wrong).

    >>> scale_scores(torch.tensor([0.0, 0.5, 2.0, float("nan")]), 0.0, 2.0).tolist()
    [0.0, 0.25, 1.0, 0.0]
    """
    values = torch.nan_to_num(values.double(), nan=low if low is not None else 0.0)
    if low is None or high is None or math.isclose(low, high, abs_tol=1e-12):
        return (values > 1e-6).double()
    return ((values - low) / (high - low)).clamp(0.0, 1.0)


class PassRateHistory:
    """Each prompt's scaled rewards over the run's rollouts, and the run's mean: the prior of a first-round estimate.

    Attributes:
        prompts (`dict[int, list[float]]`): `history.prompt_key` -> [sum of scaled rewards, completions].
        total (`list[float]`): [sum, completions] over every prompt.
    """

    def __init__(self):
        self.prompts: dict[int, list[float]] = {}
        self.total = [0.0, 0.0]

    def prior(self, key: int, strength: float = PRIOR_STRENGTH) -> float:
        """The prompt's mean scaled reward so far, shrunk towards the run's mean (0.5 before any rollout)."""
        run = self.total[0] / self.total[1] if self.total[1] else 0.5
        done, count = self.prompts.get(key, (0.0, 0.0))
        return (done + strength * run) / (count + strength)

    def observe(self, key: int, scores: list[float]) -> None:
        """Record one group's scaled rewards for the prompt ``key``."""
        entry = self.prompts.setdefault(key, [0.0, 0.0])
        entry[0], entry[1] = entry[0] + sum(scores), entry[1] + len(scores)
        self.total = [self.total[0] + sum(scores), self.total[1] + len(scores)]

    def state_dict(self) -> dict:
        return {"prompts": {str(k): v for k, v in self.prompts.items()}, "total": list(self.total)}

    def load_state_dict(self, state: dict) -> None:
        self.prompts = {int(k): [float(x) for x in v] for k, v in state["prompts"].items()}
        self.total = [float(x) for x in state["total"]]


def padded_groups(values: torch.Tensor, sizes: list[int], fill) -> tuple[torch.Tensor, int]:
    """Groups of unequal size laid out as equal groups of the largest size W, the gaps filled with ``fill``.

    Returns:
        ``(padded, W)``: ``padded`` has ``len(sizes) × W`` rows (group g in rows g·W .. g·W + sizes[g] − 1).

    >>> padded_groups(torch.tensor([1.0, 2.0, 3.0]), [1, 2], float("nan"))[0].tolist()
    [1.0, nan, 2.0, 3.0]
    """
    width = max(sizes)
    padded = torch.full((len(sizes) * width, *values.shape[1:]), fill, dtype=values.dtype, device=values.device)
    padded[_positions(sizes, width, values.device)] = values
    return padded, width


def ungrouped(padded: torch.Tensor, sizes: list[int], width: int) -> torch.Tensor:
    """`padded_groups`' inverse: the rows of the groups, without the gaps."""
    return padded[_positions(sizes, width, padded.device)]


def _positions(sizes: list[int], width: int, device) -> torch.Tensor:
    return torch.cat([torch.arange(g * width, g * width + n, device=device) for g, n in enumerate(sizes)])


def grouped_advantages(rewards: torch.Tensor, sizes: list[int], settings, zero_variance_mask=None) -> torch.Tensor:
    """`advantages.compute_advantages` over groups of unequal size: the groups padded with missing rewards (NaN),
    which every mean, std and baseline leaves out, then unpadded (the same formulas, group by group).

    Args:
        rewards (`Tensor`): (N,) in group order. sizes (`list[int]`): each group's completions (sum N).
        settings (`AdvantageSettings`). zero_variance_mask (`Tensor`, *optional*): (N,) bool.

    >>> from trl_grpo_ext.config.advantage_settings import AdvantageSettings
    >>> s = AdvantageSettings(baseline="group_mean", std_scaling="none", epsilon=1e-4, std_kind="sample")
    >>> grouped_advantages(torch.tensor([0.0, 1.0, 1.0, 0.0, 0.0]), [3, 2], s).tolist()  # means 2/3 and 0
    [-0.6666666865348816, 0.3333333134651184, 0.3333333134651184, 0.0, 0.0]
    """
    from ..advantages import compute_advantages

    padded, width = padded_groups(rewards, sizes, float("nan"))
    mask = None if zero_variance_mask is None else padded_groups(zero_variance_mask, sizes, False)[0]
    return ungrouped(compute_advantages(padded, width, settings, zero_variance_mask=mask), sizes, width)


def group_share(flags: torch.Tensor, sizes: list[int]) -> float:
    """Share of the groups whose every row is flagged (e.g. masked): groups, not rows, so that unequal groups
    (``rollout_budget: adaptive``) count once each.

    >>> group_share(torch.tensor([True, True, True, False, False]), [3, 2])
    0.5
    """
    groups = torch.split(flags.bool(), sizes)
    return sum(bool(group.all()) for group in groups) / len(groups)
