"""Resample (DAPO dynamic sampling): where the extra prompts come from and how many each round draws.

Yu et al. 2025, DAPO, arXiv 2503.14476, "dynamic sampling": zero-variance groups are replaced with informative
groups generated for further prompts. The extra prompts follow their own seeded order (`ResampleSource`); each round
is sized from a running estimate of the zero-variance fraction (`ZeroVarianceFractionEstimate`,
`resample_round_size`). Pure: no trainer, no TRL.
"""

from __future__ import annotations

import math

import torch

from ..config.checks import Range

_DECAY = Range(low=0, high=1, low_open=True, fix="use 0.9 (the past weighs 0.9^k after k rounds).")
_AT_LEAST_ONE = Range(low=1, integer=True, fix="a round needs a group to fill and room for one.")


class ResampleSource:
    """Reproducible order of the extra prompts drawn by "resample".

    The extra prompts are a separate permutation of the training prompts (seed ``seed + 1``, so it differs from the
    main sampler's), walked in order and restarted with a new permutation when exhausted. Each round draws
    ``prompts_per_round`` prompts across all processes; process r takes the r-th contiguous share. Extra prompts do
    not advance the main sampler: the plan's epochs count the main sampler only, and the prompts drawn here are
    counted in the metric ``zero_variance/prompts_drawn``.

    Args:
        dataset_size (`int`): prompts in the training set.
        seed (`int`): the run's seed.

    Raises:
        ValueError: ``dataset_size`` is not an int >= 1 (e.g. ``None`` for an iterable dataset without a length).
    """

    def __init__(self, dataset_size: int, seed: int):
        if isinstance(dataset_size, bool) or not isinstance(dataset_size, int) or dataset_size < 1:
            raise ValueError(
                "zero_variance_filter='resample' needs a training set with a length; got "
                f"dataset_size={dataset_size}. Use a map-style datasets.Dataset, or zero_variance_filter: mask with "
                "an iterable dataset."
            )
        self.dataset_size = dataset_size
        self.seed = seed
        self.cursor = 0  # prompts drawn so far, all processes
        self._permutations: dict[int, list[int]] = {}

    def _permutation(self, epoch: int) -> list[int]:
        if epoch not in self._permutations:
            generator = torch.Generator().manual_seed(self.seed + 1 + epoch)
            self._permutations = {epoch: torch.randperm(self.dataset_size, generator=generator).tolist()}
        return self._permutations[epoch]

    def draw(self, prompts_per_round: int, rank: int, world_size: int) -> list[int]:
        """Dataset indices of this process's share of the next round (``prompts_per_round // world_size`` prompts).

        Every process must call it once per round with the same ``prompts_per_round`` and ``world_size``.
        """
        per_rank = prompts_per_round // world_size
        start = self.cursor + rank * per_rank
        indices = []
        for position in range(start, start + per_rank):
            epoch, offset = divmod(position, self.dataset_size)
            indices.append(self._permutation(epoch)[offset])
        self.cursor += prompts_per_round
        return indices


class ZeroVarianceFractionEstimate:
    """Running estimate of p, the fraction of generated groups with zero variance, for sizing resample rounds.

    Exponentially decayed counts: after each generation round with ``zero_variance`` zero-variance groups out of
    ``groups``, ``U ← decay·U + zero_variance`` and ``N ← decay·N + groups``; the estimate is ``U / N``. With the default decay 0.9 a round
    weighs 0.9^k after k further rounds, so the estimate follows a p that drifts as the policy learns. Every process
    updates it with the same gathered counts, so it is identical on every process; its state is saved in each
    checkpoint (``state_dict``) so that a resumed run sizes its rounds as the uninterrupted run did.

    Args:
        decay (`float`, defaults to `0.9`): weight kept by the past at each update, in (0, 1].

    Raises:
        ValueError: ``decay`` outside (0, 1].
    """

    def __init__(self, decay: float = 0.9):
        self.decay = _DECAY.check("decay", decay, error=ValueError)
        self.zero_variance = 0.0
        self.groups = 0.0

    def update(self, zero_variance: int, groups: int) -> None:
        """Add one generation round: ``zero_variance`` of its ``groups`` groups had zero variance (all processes)."""
        self.zero_variance = self.decay * self.zero_variance + zero_variance
        self.groups = self.decay * self.groups + groups

    @property
    def value(self) -> float | None:
        """The estimate of p in [0, 1]; None before the first update."""
        return self.zero_variance / self.groups if self.groups > 0 else None

    def state_dict(self) -> dict:
        """The decayed counts, as saved in a checkpoint's ``zero_variance_state.json`` (key names of version 1)."""
        return {"uniform": self.zero_variance, "groups": self.groups}

    def load_state_dict(self, state: dict) -> None:
        """Restore the counts saved by `state_dict`."""
        self.zero_variance, self.groups = float(state["uniform"]), float(state["groups"])


#: Largest expected number of surplus informative groups a resample round may generate, as a fraction of the groups
#: it is drawn for: a round that is not the last allowed one, and the last one (see `resample_round_size`).
MAX_EXPECTED_SURPLUS = 0.05
MAX_EXPECTED_SURPLUS_LAST_ROUND = 0.25


def expected_surplus(prompts: int, missing: int, informative_probability: float) -> float:
    """E[max(0, X − missing)] for X ~ Binomial(prompts, informative_probability): informative groups generated in a
    round beyond the ``missing`` ones it can use (they are discarded)."""
    q = informative_probability
    return sum(
        math.comb(prompts, k) * q**k * (1 - q) ** (prompts - k) * (k - missing) for k in range(missing + 1, prompts + 1)
    )


def resample_round_size(
    missing: int,
    zero_variance_fraction: float | None,
    cap: int,
    last_round: bool,
    max_surplus: float = MAX_EXPECTED_SURPLUS,
    max_surplus_last_round: float = MAX_EXPECTED_SURPLUS_LAST_ROUND,
) -> int:
    """Prompts (= groups) to generate in one resample round, for one process's share of the batch.

    Each prompt yields an informative group with probability q = 1 − p (``zero_variance_fraction``). Generating n prompts
    for ``missing`` holes costs n groups and gives X ~ Binomial(n, q) informative ones, of which those beyond
    ``missing`` are thrown away. The fewest completions per informative group kept is G / (1 − p) (every informative
    group used); the waste above that bound is the surplus E[max(0, X − missing)] (`expected_surplus`). The rule: the
    largest n >= missing whose expected surplus is at most ``max_surplus × missing`` (a round that is not the last
    allowed one: what it leaves missing is drawn for in the next round, with a fresh estimate), or at most
    ``max_surplus_last_round × missing`` (the last allowed round, a larger draw so that a shortfall stays rare).

    n is kept within [missing, cap]; with no estimate yet (None) or p = 1, n = cap (TRL's generation batch share,
    the size of every round before this sizing existed).

    Args:
        missing (`int`): zero-variance groups left to replace on this process (>= 1).
        zero_variance_fraction (`float`, *optional*): the running estimate of p (`ZeroVarianceFractionEstimate.value`).
        cap (`int`): most prompts a round may draw on this process (its share of one generation batch).
        last_round (`bool`): this is the last round `max_resample_rounds` allows.
        max_surplus (`float`, defaults to `MAX_EXPECTED_SURPLUS` = 0.05), max_surplus_last_round (`float`, defaults to
            `MAX_EXPECTED_SURPLUS_LAST_ROUND` = 0.25): see above. Chosen in a simulation of 17-step runs with the
            estimate (4 prompts a step, 3 rounds): completions per informative group 1.03 × the bound on average at
            p = 0.5 to 0.7 (95th percentile ≤ 1.08), against 1.05 to 1.07 (up to 1.12) when the last round draws the
            expected need ceil(missing / q).

    Returns:
        `int` in [min(missing, cap), cap].

    Raises:
        ValueError: ``missing`` < 1 or ``cap`` < 1.
    """
    _AT_LEAST_ONE.check("missing", missing, error=ValueError)
    _AT_LEAST_ONE.check("cap", cap, error=ValueError)
    if zero_variance_fraction is None or zero_variance_fraction >= 1:
        return cap
    q = 1.0 - max(0.0, zero_variance_fraction)
    bound = (max_surplus_last_round if last_round else max_surplus) * missing
    n = min(missing, cap)
    while n < cap and expected_surplus(n + 1, missing, q) <= bound:
        n += 1
    return n
