"""Statistics of an evaluation: intervals, pass@k and the learning-signal forecast. Pure Python, no torch.

* :func:`wilson_interval`: the Wilson score interval of a proportion (Wilson 1927; Newcombe 1998, method 3).
* :func:`paired_difference_interval`: the interval of the difference of two paired proportions, the same prompts
  answered by the base model and by the trained adapter (Newcombe 1998b, method 10: Wilson intervals of both
  proportions combined with the correlation of the pairs).
* :func:`pass_at_k`: the unbiased pass@k estimator of Chen et al. 2021 (arXiv 2107.03374, eq. 1).
* :func:`zero_variance_group_fraction`: the expected fraction of GRPO groups whose G binary rewards are all equal, i.e.
  carry no learning signal (advantage 0 for every completion), from each prompt's pass rate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

#: z of a two-sided 95% normal interval (the 0.975 quantile of N(0, 1)).
Z_95 = 1.959963984540054
#: Group sizes the forecast is printed for [completions per prompt].
FORECAST_GROUP_SIZES = (2, 4, 8, 16)


def wilson_interval(successes: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion ``successes / n``.

    ``(p + z²/2n ± z·sqrt(p(1−p)/n + z²/4n²)) / (1 + z²/n)`` with ``p = successes / n`` (Wilson 1927; Newcombe 1998,
    Stat. Med. 17:857, method 3). Unlike the Wald interval it stays inside [0, 1] and is not empty at p = 0 or 1.

    Args:
        successes (`int`): number of successes, ``0 <= successes <= n``.
        n (`int`): number of trials, > 0.
        z (`float`, defaults to :data:`Z_95`): normal quantile (1.96 for 95%).

    Returns:
        `(low, high)`, both in [0, 1].

    Raises:
        ValueError: ``n <= 0`` or ``successes`` outside ``[0, n]``.

    >>> tuple(round(x, 4) for x in wilson_interval(81, 263))   # Newcombe 1998, Table I, example (a)
    (0.2553, 0.3662)
    """
    if n <= 0 or not 0 <= successes <= n:
        raise ValueError(f"wilson_interval needs 0 <= successes <= n and n > 0; got successes={successes}, n={n}.")
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def paired_difference_interval(
    before: Sequence[bool | int], after: Sequence[bool | int], z: float = Z_95
) -> tuple[float, tuple[float, float]]:
    """Difference ``mean(after) − mean(before)`` of paired binary outcomes and its score interval.

    Newcombe 1998b (Stat. Med. 17:2635), method 10. With the pair counts a (both 1), b (before 1, after 0),
    c (before 0, after 1), d (both 0), ``θ = (c − b) / n``; ``(l1, u1)`` and ``(l2, u2)`` are the Wilson intervals of
    ``p1 = mean(after)`` and ``p2 = mean(before)``; ``φ = (ad − bc) / sqrt((a+b)(c+d)(a+c)(b+d))`` (0 when a margin
    is 0); then ``L = θ − sqrt((p1−l1)² − 2φ(p1−l1)(u2−p2) + (u2−p2)²)`` and
    ``U = θ + sqrt((u1−p1)² − 2φ(u1−p1)(p2−l2) + (p2−l2)²)``.

    Args:
        before (sequence of `bool`/`int`): outcome per prompt before (the base model), 0 or 1.
        after (sequence of `bool`/`int`): outcome per prompt after (the adapter), same prompts, same order.
        z (`float`, defaults to :data:`Z_95`): normal quantile.

    Returns:
        `(difference, (low, high))`, in [−1, 1].

    Raises:
        ValueError: empty inputs, different lengths, or values other than 0/1.
    """
    if len(before) != len(after) or not before:
        raise ValueError(f"paired outcomes need two equal, non-empty lists; got {len(before)} and {len(after)}.")
    if any(x not in (0, 1) for x in (*before, *after)):
        raise ValueError("paired outcomes must be 0/1 (correct or not).")
    n = len(before)
    a = sum(1 for x, y in zip(before, after) if x and y)
    b = sum(1 for x, y in zip(before, after) if x and not y)
    c = sum(1 for x, y in zip(before, after) if not x and y)
    d = n - a - b - c
    p1, p2 = (a + c) / n, (a + b) / n
    l1, u1 = wilson_interval(a + c, n, z)
    l2, u2 = wilson_interval(a + b, n, z)
    margins = (a + b) * (c + d) * (a + c) * (b + d)
    phi = (a * d - b * c) / math.sqrt(margins) if margins > 0 else 0.0
    return p1 - p2, newcombe_interval(p1, (l1, u1), p2, (l2, u2), phi)


def newcombe_interval(
    p1: float, ci1: tuple[float, float], p2: float, ci2: tuple[float, float], phi: float = 0.0
) -> tuple[float, float]:
    """Combine two single-proportion score intervals into an interval for ``p1 − p2`` (Newcombe's square-and-add).

    ``L = θ − sqrt((p1−l1)² − 2φ(p1−l1)(u2−p2) + (u2−p2)²)``, ``U = θ + sqrt((u1−p1)² − 2φ(u1−p1)(p2−l2) + (p2−l2)²)``
    with ``θ = p1 − p2``. With ``φ = 0`` this is method 10 of Newcombe 1998a (independent proportions); with the
    pairs' correlation φ it is method 10 of Newcombe 1998b (paired proportions).

    >>> [round(x, 4) for x in newcombe_interval(56 / 70, wilson_interval(56, 70), 48 / 80, wilson_interval(48, 80))]
    [0.0524, 0.3339]
    """
    (l1, u1), (l2, u2) = ci1, ci2
    theta = p1 - p2
    delta = math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    epsilon = math.sqrt(max(0.0, (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2))
    return max(-1.0, theta - delta), min(1.0, theta + epsilon)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples of which ``c`` are correct: ``1 − C(n−c, k) / C(n, k)``.

    Chen et al. 2021 (arXiv 2107.03374), eq. 1 and its numerically stable form
    ``1 − prod_{i=n−c+1}^{n} (1 − k / i)``. It is the probability that at least one of k samples drawn without
    replacement from the n is correct.

    Args:
        n (`int`): samples per prompt, >= 1.
        c (`int`): correct samples, ``0 <= c <= n``.
        k (`int`): ``1 <= k <= n``.

    Raises:
        ValueError: arguments outside those ranges.

    >>> [round(pass_at_k(5, 2, k), 4) for k in (1, 2, 5)]
    [0.4, 0.7, 1.0]
    """
    if n < 1 or not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs n >= 1, 0 <= c <= n and 1 <= k <= n; got n={n}, c={c}, k={k}.")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def zero_variance_group_fraction(pass_rates: Sequence[float], group_size: int) -> float:
    """Expected fraction of groups with all-equal binary rewards: ``mean_i(q_i^G + (1 − q_i)^G)``.

    A group of G completions of prompt i, each correct independently with probability q_i, is uniform (all correct
    or all wrong, σ = 0, advantage 0 for each, no learning signal) with probability ``q_i^G + (1 − q_i)^G``. With
    measured pass rates q̂_i this is the plug-in forecast. Source: this package (the σ = 0 trap of GRPO; DAPO,
    arXiv 2503.14476, §3.2 filters such groups).

    Args:
        pass_rates (sequence of `float`): per-prompt pass rates in [0, 1].
        group_size (`int`): G, completions per prompt, >= 1.

    Raises:
        ValueError: empty rates, a rate outside [0, 1] or ``group_size < 1``.

    >>> zero_variance_group_fraction([0.5], 4)
    0.125
    """
    if not pass_rates or group_size < 1 or any(not 0.0 <= q <= 1.0 for q in pass_rates):
        raise ValueError(f"zero_variance_group_fraction needs rates in [0, 1] and G >= 1; got G={group_size}.")
    return sum(q**group_size + (1 - q) ** group_size for q in pass_rates) / len(pass_rates)


def forecast(pass_rates: Sequence[float], group_sizes: Sequence[int] = FORECAST_GROUP_SIZES) -> dict[int, float]:
    """:func:`zero_variance_group_fraction` for each G of ``group_sizes``: ``{G: expected fraction of uniform groups}``."""
    return {g: zero_variance_group_fraction(pass_rates, g) for g in group_sizes}


def zero_variance_subset_fraction(values: Sequence[float], group_size: int, tolerance: float = 0.0) -> float:
    """Fraction of the size-G subsets of one prompt's K sampled rewards whose rewards are all equal.

    For K exchangeable samples this is an unbiased estimate of the probability that a group of G fresh completions
    is uniform (σ = 0), whatever the reward's values: ``sum_v C(n_v, G) / C(K, G)`` with n_v the number of samples
    of value v. For a binary reward with c of K correct it is ``(C(c, G) + C(K − c, G)) / C(K, G)``, the
    without-replacement form of ``q^G + (1 − q)^G``.

    Args:
        values (sequence of `float`): the K sampled rewards of one prompt (the run's weighted total).
        group_size (`int`): G, with ``1 <= G <= K``.
        tolerance (`float`, defaults to `0.0`): rewards within this distance count as equal (the zero-variance
            filter's tolerance).

    Raises:
        ValueError: ``G`` outside ``[1, K]``.

    >>> zero_variance_subset_fraction([1, 1, 0, 0], 2)   # C(2,2) + C(2,2) of C(4,2) = 2 / 6
    0.3333333333333333
    """
    k = len(values)
    if not 1 <= group_size <= k:
        raise ValueError(f"zero_variance_subset_fraction needs 1 <= G <= K; got G={group_size}, K={k}.")
    classes: list[list[float]] = []
    for v in sorted(values):
        if classes and abs(v - classes[-1][0]) <= tolerance:
            classes[-1].append(v)
        else:
            classes.append([v])
    return sum(math.comb(len(c), group_size) for c in classes) / math.comb(k, group_size)
