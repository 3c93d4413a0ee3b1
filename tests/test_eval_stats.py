"""Evaluation statistics against hand values, published reference values and brute-force enumeration."""

import itertools
import math

import pytest

from trl_grpo_ext.evaluation.stats import (
    forecast,
    newcombe_interval,
    paired_difference_interval,
    pass_at_k,
    wilson_interval,
    zero_variance_group_fraction,
)


@pytest.mark.parametrize("k, expected", [(1, 0.4), (2, 0.7), (5, 1.0)])
def test_pass_at_k_hand_values(k, expected):
    # n = 5 samples, c = 2 correct: 1 - C(3, k) / C(5, k) = 1 - 3/5, 1 - 3/10, 1 - 0
    assert pass_at_k(5, 2, k) == pytest.approx(expected)


@pytest.mark.parametrize("n", range(1, 7))
def test_pass_at_k_equals_brute_force_enumeration(n):
    for c in range(n + 1):
        samples = [1] * c + [0] * (n - c)
        for k in range(1, n + 1):
            subsets = list(itertools.combinations(range(n), k))
            brute = sum(any(samples[i] for i in s) for s in subsets) / len(subsets)
            assert pass_at_k(n, c, k) == pytest.approx(brute, abs=1e-12), (n, c, k)


@pytest.mark.parametrize("args", [(0, 0, 1), (5, 6, 1), (5, 2, 0), (5, 2, 6)])
def test_pass_at_k_rejects_bad_arguments(args):
    with pytest.raises(ValueError, match="pass_at_k"):
        pass_at_k(*args)


def test_forecast_hand_values():
    assert zero_variance_group_fraction([0.5], 4) == pytest.approx(0.125)  # 0.5^4 + 0.5^4
    assert zero_variance_group_fraction([0.0, 1.0], 8) == 1.0  # never or always right: every group uniform
    # (0.1^2 + 0.9^2 + 0.9^2 + 0.1^2) / 2
    assert zero_variance_group_fraction([0.1, 0.9], 2) == pytest.approx(0.82)
    # one mean pass rate of 0.062 at G = 8 gives 0.938^8 = 0.60; the same mean spread unevenly over prompts gives
    # more uniform groups (x^8 is convex): [0, 0, 0.186] -> (1 + 1 + 0.814^8) / 3 = 0.73
    assert zero_variance_group_fraction([0.062], 8) == pytest.approx(0.938**8)
    assert round(zero_variance_group_fraction([0.0, 0.0, 0.186], 8), 2) == round((2 + 0.814**8) / 3, 2) == 0.73
    table = forecast([0.5])
    assert list(table) == [2, 4, 8, 16] and table[2] == pytest.approx(0.5) and table[16] == pytest.approx(2 * 0.5**16)


def test_forecast_rejects_bad_rates():
    with pytest.raises(ValueError):
        zero_variance_group_fraction([1.5], 4)
    with pytest.raises(ValueError):
        zero_variance_group_fraction([], 4)


@pytest.mark.parametrize(
    "successes, n, low, high",
    [  # Newcombe (1998), Statistics in Medicine 17:857, Table I, method 3 (Wilson score, no continuity correction)
        (81, 263, 0.2553, 0.3662),
        (15, 148, 0.0624, 0.1605),
        (0, 20, 0.0, 0.1611),
        (1, 29, 0.0061, 0.1718),
    ],
)
def test_wilson_interval_matches_newcombe_table(successes, n, low, high):
    got = wilson_interval(successes, n)
    assert got[0] == pytest.approx(low, abs=5e-5) and got[1] == pytest.approx(high, abs=5e-5)


def test_newcombe_square_and_add_matches_published_unpaired_example():
    # Newcombe (1998a), Stat. Med. 17:873, example (a): 56/70 - 48/80, method 10: 0.0524 to 0.3339
    low, high = newcombe_interval(56 / 70, wilson_interval(56, 70), 48 / 80, wilson_interval(48, 80), phi=0.0)
    assert (round(low, 4), round(high, 4)) == (0.0524, 0.3339)


def test_paired_difference_interval_matches_newcombes_published_paired_example():
    # Newcombe (1998b), Stat. Med. 17:2635, worked example with a = 36 (both), b = 12, c = 2, d = 0 (n = 50):
    # difference (b - c) / n = +0.2, method 10: 0.0569 to 0.3404. Re-derived by hand: p1 = 48/50, p2 = 38/50,
    # phi = (36*0 - 12*2) / sqrt(48*2*38*12) = -0.1147, and the square-and-add below give the same four digits.
    # Here "after" plays Newcombe's first proportion: after-only pairs are his b, before-only his c.
    before = [1] * 36 + [0] * 12 + [1] * 2
    after = [1] * 36 + [1] * 12 + [0] * 2
    diff, (low, high) = paired_difference_interval(before, after)
    assert diff == pytest.approx(0.2)
    assert (round(low, 4), round(high, 4)) == (0.0569, 0.3404)
    # without the correlation term (phi = 0) the same margins give 0.0645 to 0.3372, with it halved 0.0607 to 0.3388
    assert (round(low, 4), round(high, 4)) not in ((0.0645, 0.3372), (0.0607, 0.3388))


def test_paired_difference_interval_uses_the_pairs_correlation():
    # 20 prompts: a = 5 both right, b = 1 only before, c = 6 only after, d = 8 neither; worked out here from
    # Newcombe 1998b's method 10 formulas, not with newcombe_interval
    before = [1] * 5 + [1] * 1 + [0] * 6 + [0] * 8
    after = [1] * 5 + [0] * 1 + [1] * 6 + [0] * 8
    diff, (low, high) = paired_difference_interval(before, after)
    assert diff == pytest.approx((6 - 1) / 20)
    phi = (5 * 8 - 1 * 6) / math.sqrt(6 * 14 * 11 * 9)  # (ad - bc) / sqrt of the four margins = 0.3728
    (l1, u1), (l2, u2) = wilson_interval(11, 20), wilson_interval(6, 20)  # after 11/20, before 6/20
    p1, p2 = 11 / 20, 6 / 20
    expected_low = p1 - p2 - math.sqrt((p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2)
    expected_high = p1 - p2 + math.sqrt((u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2)
    assert (low, high) == pytest.approx((expected_low, expected_high), abs=1e-12)
    assert (round(low, 4), round(high, 4)) == (0.0108, 0.4464)  # also with Wilson's closed form written out by hand
    unpaired = newcombe_interval(p1, (l1, u1), p2, (l2, u2), 0.0)
    assert high - low < unpaired[1] - unpaired[0]  # positive correlation narrows the interval
    assert low < diff < high


def test_paired_difference_interval_of_identical_outcomes_contains_zero():
    outcomes = [1, 0, 1, 1, 0, 0, 1, 0]
    diff, (low, high) = paired_difference_interval(outcomes, outcomes)
    assert diff == 0 and low <= 0 <= high


def test_paired_difference_interval_rejects_mismatched_inputs():
    with pytest.raises(ValueError, match="equal"):
        paired_difference_interval([1, 0], [1])
    with pytest.raises(ValueError, match="0/1"):
        paired_difference_interval([2], [1])


def test_uniform_subset_fraction_is_the_exact_hypergeometric_form_and_handles_graded_rewards():
    from trl_grpo_ext.evaluation.stats import zero_variance_subset_fraction

    # binary, c = 3 of K = 8 correct, G = 2: (C(3,2) + C(5,2)) / C(8,2) = (3 + 10) / 28
    assert zero_variance_subset_fraction([1, 1, 1, 0, 0, 0, 0, 0], 2) == pytest.approx(13 / 28)
    # brute force over all subsets, with a graded reward
    values = [0.2, 0.2, 0.5, 0.2, 0.9, 0.5]
    for g in range(1, 7):
        subsets = list(itertools.combinations(values, g))
        assert zero_variance_subset_fraction(values, g) == pytest.approx(sum(len(set(s)) == 1 for s in subsets) / len(subsets))
    # every sample different (the tiny task's char_fraction): no uniform group of 2 or more
    assert zero_variance_subset_fraction([0.01, 0.02, 0.03, 0.05], 2) == 0.0
    assert zero_variance_subset_fraction([0.5, 0.5 + 1e-9], 2, tolerance=1e-6) == 1.0
    with pytest.raises(ValueError):
        zero_variance_subset_fraction([1, 0], 3)
