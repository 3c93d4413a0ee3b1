"""Why a uniform group was uniform: *cut*, *right*, *wrong* or *tied* (pure functions over tensors and numbers).

A group of completions is uniform (σ = 0) when the reward the filter judges is the same for all of them
(`groups.zero_variance_group_mask`). Its cause, checked in this order:

- ``cut``: every completion stopped at ``max_completion_length`` without an end-of-sequence token, whatever its
  reward (trl#5697: a too-short length limit zeroes every reward and nothing says why);
- ``right``: the group's reward is the highest value the judged reward can take: its declared maximum (a registry
  reward's ``value_range``), else the highest value it reached in this run;
- ``wrong``: likewise at the lowest value (declared minimum, else the run's lowest);
- ``tied``: anything else (every completion scored the same middle value, or none was scored).

Before a reward has shown two different values in a run, and without a declared range, a group at that one value is
*right* when the value is positive and *wrong* otherwise (a 0/1 reward that has only ever been 0 is all-wrong).
"""

from __future__ import annotations

import math

import torch

from .report import CAUSE_KEYS, CAUSES  # noqa: F401 (the names, torch-free, for the console and the card)


class RewardRange:
    """The lowest and highest value the judged reward took in this run, and its declared range if it has one.

    Args:
        declared (`tuple[float, float]`, *optional*): (minimum, maximum) the reward can take, e.g. (0, 1) for
            ``numeric_match``; None when unknown.

    Attributes:
        low, high (`float | None`): the run's extremes so far (None before any finite value).
    """

    def __init__(self, declared: tuple[float, float] | None = None):
        self.declared = declared
        self.low: float | None = None
        self.high: float | None = None

    def update(self, values: torch.Tensor) -> None:
        """Widen the run's extremes to the finite entries of ``values`` (any shape)."""
        finite = values[torch.isfinite(values)]
        if finite.numel():
            low, high = float(finite.min()), float(finite.max())
            self.low = low if self.low is None else min(self.low, low)
            self.high = high if self.high is None else max(self.high, high)

    def cause(self, value: float, atol: float = 1e-6) -> str:
        """``"right"``, ``"wrong"`` or ``"tied"`` for a uniform group whose every completion scored ``value``.

        >>> r = RewardRange((0.0, 1.0)); r.cause(1.0), r.cause(0.0), r.cause(0.5)
        ('right', 'wrong', 'tied')
        >>> r = RewardRange(); r.update(torch.tensor([0.0, 0.0])); r.cause(0.0)  # only 0 seen yet: all wrong
        'wrong'
        >>> r.update(torch.tensor([2.0])); r.cause(2.0), r.cause(1.0)
        ('right', 'tied')
        """
        if not math.isfinite(value):
            return "tied"
        if self.declared is not None:
            if math.isclose(value, self.declared[1], abs_tol=atol):
                return "right"
            if math.isclose(value, self.declared[0], abs_tol=atol):
                return "wrong"
        if self.low is None or math.isclose(self.low, self.high, abs_tol=atol):  # one value seen so far
            return "tied" if self.declared is not None else "right" if value > atol else "wrong"
        if math.isclose(value, self.high, abs_tol=atol):
            return "right"
        if math.isclose(value, self.low, abs_tol=atol):
            return "wrong"
        return "tied"

    def state_dict(self) -> dict:
        return {"low": self.low, "high": self.high}

    def load_state_dict(self, state: dict) -> None:
        self.low, self.high = state.get("low"), state.get("high")


def uniform_causes(judged: torch.Tensor, uniform: torch.Tensor, truncated: torch.Tensor, sizes: list[int],
                   reward_range: RewardRange, tolerance: float = 0.0) -> list[str | None]:
    """The cause of each uniform group of a generation batch (None for a group with variance).

    Args:
        judged (`Tensor`): (N,) the judged reward of every completion, in group order, NaN where unscored.
        uniform (`Tensor`): (N,) bool, True for every completion of a uniform group.
        truncated (`Tensor`): (N,) bool, the completion did not end with an end-of-sequence token.
        sizes (`list[int]`): completions of each group, in order (G each, unless a rollout budget split it unevenly);
            they sum to N.
        reward_range (`RewardRange`): the judged reward's range (updated by the caller with this batch first).
        tolerance (`float`, defaults to `0.0`): ``zero_variance_tolerance`` [reward units]; a group within it is judged
            at its mean.

    Returns:
        `list[str | None]`: one entry per group, a cause of `CAUSES` or None.

    >>> judged = torch.tensor([1., 1., 0., 0., 0., 1., 0., 0.])
    >>> uniform_causes(judged, torch.tensor([1, 1, 1, 1, 0, 0, 1, 1]).bool(), torch.tensor([0, 0, 0, 0, 0, 0, 1, 1]).bool(),
    ...                [2, 2, 2, 2], RewardRange((0.0, 1.0)))
    ['right', 'wrong', None, 'cut']
    """
    causes, start = [], 0
    atol = max(tolerance, 1e-6)
    for size in sizes:
        rows = slice(start, start + size)
        start += size
        if not bool(uniform[rows].all()):
            causes.append(None)
        elif bool(truncated[rows].all()):
            causes.append("cut")
        else:
            values = judged[rows]
            values = values[torch.isfinite(values)]
            causes.append(reward_range.cause(float(values.mean()), atol) if values.numel() else "tied")
    return causes


def cause_shares(causes: list[str | None]) -> dict[str, float]:
    """Share of the groups (all of them, informative ones included) uniform for each cause, keyed by `CAUSE_KEYS`.

    >>> cause_shares(['wrong', None, 'wrong', 'cut'])["zero_variance/frac_uniform_wrong"]
    0.5
    """
    total = max(len(causes), 1)
    return {CAUSE_KEYS[cause]: sum(c == cause for c in causes) / total for cause in CAUSES}


def declared_range(reward_funcs: list, weights: list[float], index: int | None) -> tuple[float, float] | None:
    """The judged reward's declared (minimum, maximum): one function's ``value_range`` (``zero_variance_reward``), or
    the weighted total's when every function declares one; None otherwise.

    A reward function declares its range with a ``value_range`` attribute (a guard or wrapper is looked through via
    its ``fn``).

    >>> class R:
    ...     value_range = (0.0, 1.0)
    >>> declared_range([R(), R()], [1.0, -0.5], None)
    (-0.5, 1.0)
    """
    ranges = [getattr(f, "value_range", None) or getattr(getattr(f, "fn", None), "value_range", None)
              for f in reward_funcs]
    if index is not None:
        return tuple(ranges[index]) if ranges[index] is not None else None
    if any(r is None for r in ranges):
        return None
    low = sum(min(w * r[0], w * r[1]) for w, r in zip(weights, ranges))
    high = sum(max(w * r[0], w * r[1]) for w, r in zip(weights, ranges))
    return (low, high)


def cause_signs(causes: list[str | None], sizes: list[int], device=None) -> torch.Tensor:
    """(N,) float per completion: +1 in an all-right group, −1 in an all-wrong one, 0 otherwise (the sign of
    ``zero_variance_signal``'s token advantage, `advantages.uniform_group_signal`).

    >>> cause_signs(["right", None, "wrong", "cut"], [2, 2, 2, 2]).tolist()
    [1.0, 1.0, 0.0, 0.0, -1.0, -1.0, 0.0, 0.0]
    """
    sign = {"right": 1.0, "wrong": -1.0}
    return torch.tensor([sign.get(cause, 0.0) for cause, size in zip(causes, sizes) for _ in range(size)],
                        device=device)
