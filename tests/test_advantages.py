"""Tests for trl_grpo_ext.advantages.

Expected values are worked out by hand in the comments (or taken from TRL 1.16's own formula where parity is the
point), never copied from the code under test.
"""

import math

import pytest
import torch

from trl_grpo_ext.advantages import (
    advantage_metrics,
    compute_advantages,
    equal_reward_groups,
    group_baseline,
    reward_std,
)
from trl_grpo_ext.config.advantage_settings import BASELINES, STD_KINDS, STD_SCALINGS, AdvantageSettings
from trl_grpo_ext.zero_variance import zero_variance_group_mask

NAN = float("nan")


def t64(values):
    return torch.tensor(values, dtype=torch.float64)


def assert_values(actual, expected, atol=1e-12):
    torch.testing.assert_close(actual, t64(expected).to(actual.dtype), rtol=0, atol=atol)


# --- one group of G = 4, rewards [0, 0, 0, 1]: μ = 1/4, Σ(r - μ)² = 3·(1/16) + 9/16 = 3/4 -------------------------
# sample σ = sqrt((3/4) / 3) = 1/2; population σ = sqrt((3/4) / 4) = sqrt(3)/4.
ONE_GROUP = [0.0, 0.0, 0.0, 1.0]


def test_group_std_sample_epsilon_zero():
    # (0 - 1/4) / (1/2) = -1/2, (1 - 1/4) / (1/2) = 3/2
    advantages = compute_advantages(t64(ONE_GROUP), 4, AdvantageSettings("group_mean", "group", 0.0, "sample"))
    assert_values(advantages, [-0.5, -0.5, -0.5, 1.5])


def test_group_std_with_trl_epsilon():
    # -0.25 / (0.5 + 1e-4) = -0.49990002; 0.75 / 0.5001 = 1.49970006
    advantages = compute_advantages(t64(ONE_GROUP), 4, AdvantageSettings("group_mean", "group", 1e-4, "sample"))
    assert_values(advantages, [-0.25 / 0.5001] * 3 + [0.75 / 0.5001])


def test_group_std_population():
    # σ = sqrt(3)/4: -1/4 / (sqrt(3)/4) = -1/sqrt(3), 3/4 / (sqrt(3)/4) = sqrt(3)
    advantages = compute_advantages(t64(ONE_GROUP), 4, AdvantageSettings("group_mean", "group", 0.0, "population"))
    assert_values(advantages, [-1 / math.sqrt(3)] * 3 + [math.sqrt(3)])


def test_no_std_scaling():
    advantages = compute_advantages(t64(ONE_GROUP), 4, AdvantageSettings("group_mean", "none"))
    assert_values(advantages, [-0.25, -0.25, -0.25, 0.75])


def test_leave_one_out_no_std():
    # zeros: 0 - (0 + 0 + 1)/3 = -1/3; the one: 1 - (0 + 0 + 0)/3 = 1
    advantages = compute_advantages(t64(ONE_GROUP), 4, AdvantageSettings("leave_one_out", "none"))
    assert_values(advantages, [-1 / 3, -1 / 3, -1 / 3, 1.0])


def test_leave_one_out_with_group_std():
    # the leave-one-out residuals [-1/3, ..., 1] divided by the sample σ = 1/2
    advantages = compute_advantages(t64(ONE_GROUP), 4, AdvantageSettings("leave_one_out", "group", 0.0, "sample"))
    assert_values(advantages, [-2 / 3, -2 / 3, -2 / 3, 2.0])


def test_baseline_and_std_building_blocks():
    assert_values(group_baseline(t64(ONE_GROUP), 4, "group_mean"), [0.25] * 4)
    assert_values(group_baseline(t64(ONE_GROUP), 4, "leave_one_out"), [1 / 3, 1 / 3, 1 / 3, 0.0])
    assert_values(reward_std(t64(ONE_GROUP), 4, "group", "sample"), [0.5] * 4)
    assert_values(reward_std(t64(ONE_GROUP), 4, "none", "sample"), [1.0] * 4)


# --- two groups of different spread, G = 4: A = [0, 0, 1, 1] (μ 0.5), B = [2, 2, 5, 5] (μ 3.5) ----------------------
# group σ_A = sqrt(4·0.25/3) = 1/sqrt(3); σ_B = sqrt(4·2.25/3) = sqrt(3)
# batch: μ = 16/8 = 2, Σ(r - 2)² = 4+4+1+1+0+0+9+9 = 28 -> sample σ = sqrt(28/7) = 2, population σ = sqrt(3.5)
TWO_GROUPS = [0.0, 0.0, 1.0, 1.0, 2.0, 2.0, 5.0, 5.0]


def test_batch_std_keeps_group_mean_and_the_spread_between_groups():
    # A: (r - 0.5)/2 = ±0.25; B: (r - 3.5)/2 = ±0.75
    advantages = compute_advantages(t64(TWO_GROUPS), 4, AdvantageSettings("group_mean", "batch", 0.0, "sample"))
    assert_values(advantages, [-0.25, -0.25, 0.25, 0.25, -0.75, -0.75, 0.75, 0.75])


def test_batch_std_population():
    s = math.sqrt(3.5)
    advantages = compute_advantages(t64(TWO_GROUPS), 4, AdvantageSettings("group_mean", "batch", 0.0, "population"))
    assert_values(advantages, [-0.5 / s, -0.5 / s, 0.5 / s, 0.5 / s, -1.5 / s, -1.5 / s, 1.5 / s, 1.5 / s])


def test_group_std_erases_the_spread_between_groups():
    # A: ±0.5·sqrt(3); B: ±1.5/sqrt(3) = ±0.5·sqrt(3): both groups look the same
    h = 0.5 * math.sqrt(3)
    advantages = compute_advantages(t64(TWO_GROUPS), 4, AdvantageSettings("group_mean", "group", 0.0, "sample"))
    assert_values(advantages, [-h, -h, h, h, -h, -h, h, h])


def test_batch_std_value():
    assert_values(reward_std(t64(TWO_GROUPS), 4, "batch", "sample"), [2.0] * 8)


# --- missing rewards (None -> NaN) -----------------------------------------------------------------------------------
# group [0, NaN, 1, 1]: present [0, 1, 1], μ = 2/3, Σ(r - μ)² = 4/9 + 1/9 + 1/9 = 2/3, sample σ = sqrt(1/3)
MISSING = [0.0, NAN, 1.0, 1.0]


def test_missing_reward_no_std():
    advantages = compute_advantages(t64(MISSING), 4, AdvantageSettings("group_mean", "none"))
    assert_values(advantages, [-2 / 3, 0.0, 1 / 3, 1 / 3])


def test_missing_reward_group_std():
    # (-2/3)·sqrt(3) = -2/sqrt(3); (1/3)·sqrt(3) = 1/sqrt(3)
    advantages = compute_advantages(t64(MISSING), 4, AdvantageSettings("group_mean", "group", 0.0, "sample"))
    assert_values(advantages, [-2 / math.sqrt(3), 0.0, 1 / math.sqrt(3), 1 / math.sqrt(3)])


def test_missing_reward_leave_one_out():
    # row 0: 0 - (1+1)/2 = -1; rows 2, 3: 1 - (0+1)/2 = 1/2; the missing row: 0
    advantages = compute_advantages(t64(MISSING), 4, AdvantageSettings("leave_one_out", "none"))
    assert_values(advantages, [-1.0, 0.0, 0.5, 0.5])


def test_missing_rewards_are_left_out_of_the_batch_std():
    # present: 0, 0, 1, 1 | 2, 5 -> μ = 9/6 = 1.5, Σ(r - μ)² = 2.25+2.25+0.25+0.25+0.25+12.25 = 17.5, σ = sqrt(3.5)
    rewards = t64([0.0, 0.0, 1.0, 1.0, 2.0, NAN, 5.0, NAN])
    s = math.sqrt(3.5)
    advantages = compute_advantages(rewards, 4, AdvantageSettings("group_mean", "batch", 0.0, "sample"))
    # group means 0.5 and 3.5
    assert_values(advantages, [-0.5 / s, -0.5 / s, 0.5 / s, 0.5 / s, -1.5 / s, 0.0, 1.5 / s, 0.0])


@pytest.mark.parametrize("baseline", BASELINES)
@pytest.mark.parametrize("scaling", STD_SCALINGS)
def test_group_with_one_or_no_reward_gets_zero(baseline, scaling):
    rewards = t64([NAN, 3.0, NAN, NAN, NAN, NAN, NAN, NAN, 0.0, 1.0, 0.0, 1.0])
    advantages = compute_advantages(rewards, 4, AdvantageSettings(baseline, scaling, 0.0, "sample"))
    assert torch.equal(advantages[:8], torch.zeros(8, dtype=torch.float64))
    assert not torch.isnan(advantages).any()
    assert (advantages[8:] != 0).all()


# --- ε on a nearly uniform group: [0, 0, 0, d], d = 2^-10 -------------------------------------------------------------
# Scaling [0, 0, 0, 1] by d: μ = d/4, sample σ = d/2 (4.8828125e-4), so A = (-d/4, 3d/4) / (d/2 + ε).
@pytest.mark.parametrize(
    ("epsilon", "expected_low", "expected_high"),
    [
        (0.0, -0.5, 1.5),  # ε = 0: same as [0, 0, 0, 1], a tiny difference is blown up to full size
        (1e-4, -2.44140625e-4 / 5.8828125e-4, 7.32421875e-4 / 5.8828125e-4),  # -0.41501, 1.24502
        (1e-2, -2.44140625e-4 / 0.01048828125, 7.32421875e-4 / 0.01048828125),  # -0.02328, 0.06983: damped
    ],
)
def test_epsilon_damps_a_nearly_uniform_group(epsilon, expected_low, expected_high):
    d = 2.0**-10
    advantages = compute_advantages(t64([0.0, 0.0, 0.0, d]), 4, AdvantageSettings("group_mean", "group", epsilon))
    assert_values(advantages, [expected_low] * 3 + [expected_high])


# --- zero-variance groups and the filter's mask ---------------------------------------------------------------------
@pytest.mark.parametrize("baseline", BASELINES)
@pytest.mark.parametrize("scaling", STD_SCALINGS)
@pytest.mark.parametrize("std_kind", STD_KINDS)
@pytest.mark.parametrize("epsilon", [0.0, 1e-4])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_zero_variance_group_is_exactly_zero_whatever_the_settings(baseline, scaling, std_kind, epsilon, dtype):
    # 0.1 and 0.3 are not representable: their group mean carries rounding error (see the TRL residue test)
    rewards = torch.tensor([0.1] * 8 + [0.3] * 8 + [0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0], dtype=dtype)
    advantages = compute_advantages(rewards, 8, AdvantageSettings(baseline, scaling, epsilon, std_kind))
    assert torch.equal(advantages[:16], torch.zeros(16, dtype=dtype))
    assert (advantages[16:] != 0).all()


def test_zero_variance_mask_zeroes_flagged_rows_only():
    rewards = t64([0.0, 0.0, 0.0, 1e-3, 0.0, 0.0, 0.0, 1.0])
    settings = AdvantageSettings("group_mean", "group", 0.0)
    mask = zero_variance_group_mask(rewards, 4, tolerance=1e-2)  # first group: σ = 5e-4 <= 1e-2
    assert mask.tolist() == [True] * 4 + [False] * 4
    advantages = compute_advantages(rewards, 4, settings, zero_variance_mask=mask)
    assert_values(advantages, [0.0] * 4 + [-0.5, -0.5, -0.5, 1.5])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_equal_reward_groups_exact(dtype):
    rewards = torch.tensor([0.1, 0.1, 0.1, 0.0, 0.0, 1.0, 2.0, NAN, NAN, NAN, NAN, NAN, 5.0, NAN, 5.0], dtype=dtype)
    # [0.1]*3 equal; [0, 0, 1] not; [2, NaN, NaN] one reward; [NaN]*3 none; [5, NaN, 5] equal present rewards
    expected = [True] * 3 + [False] * 3 + [True] * 9
    assert equal_reward_groups(rewards, 3).tolist() == expected
    assert zero_variance_group_mask(rewards, 3).tolist() == expected  # tolerance 0: the same groups


# --- parity with TRL 1.16 --------------------------------------------------------------------------------------------
def trl_grpo_advantages(rewards, num_generations, scale_rewards):
    """TRL 1.16 GRPOTrainer._generate_and_score_completions, sum_then_normalize branch (grpo_trainer.py ~2759-2800)."""
    from trl.trainer.utils import nanstd

    mean_grouped_rewards = torch.nanmean(rewards.view(-1, num_generations), dim=1)
    mean_grouped_rewards = mean_grouped_rewards.repeat_interleave(num_generations, dim=0)
    if scale_rewards in ["group", "none"]:
        std_rewards = nanstd(rewards.view(-1, num_generations), dim=1).repeat_interleave(num_generations, dim=0)
    else:
        std_rewards = nanstd(rewards).expand_as(rewards)
    advantages = rewards - mean_grouped_rewards
    if scale_rewards != "none":
        advantages = advantages / (std_rewards + 1e-4)
    return torch.nan_to_num(advantages, nan=0.0)


def trl_rloo_advantages(rewards, num_generations):
    """TRL 1.16 RLOOTrainer._generate_and_score_completions with normalize_advantages=False (~1677-1699)."""
    grouped_rewards = rewards.view(-1, num_generations)
    scorable_counts = (~torch.isnan(grouped_rewards)).sum(dim=1, keepdim=True)
    grouped_sum = torch.nansum(grouped_rewards, dim=1, keepdim=True)
    baselines = ((grouped_sum - grouped_rewards) / (scorable_counts - 1)).view(-1)
    return torch.nan_to_num(rewards - baselines, nan=0.0)


def random_rewards(seed, num_prompts, num_generations):
    """float32 like TRL's rewards_per_func: continuous and 0/1 groups, ~25% NaN, an all-NaN and a one-reward group."""
    generator = torch.Generator().manual_seed(seed)
    rewards = torch.rand(num_prompts, num_generations, generator=generator) * 4 - 1
    binary = torch.rand(num_prompts, 1, generator=generator) < 0.3
    rewards = torch.where(binary, (rewards > 0.5).float(), rewards)
    rewards[torch.rand(num_prompts, num_generations, generator=generator) < 0.25] = NAN
    rewards[0] = NAN
    rewards[1, 1:] = NAN
    return rewards.reshape(-1)


@pytest.mark.parametrize("scaling", STD_SCALINGS)
@pytest.mark.parametrize(("seed", "num_prompts", "num_generations"), [(0, 16, 4), (1, 8, 8), (2, 32, 2), (3, 6, 16)])
def test_bit_identical_to_trl_grpo(scaling, seed, num_prompts, num_generations):
    rewards = random_rewards(seed, num_prompts, num_generations)
    expected = trl_grpo_advantages(rewards, num_generations, scaling)
    actual = compute_advantages(rewards, num_generations, AdvantageSettings("group_mean", scaling, 1e-4, "sample"))
    assert torch.equal(actual, expected)
    assert (actual != 0).sum() >= rewards.numel() // 4  # the comparison is not between two zero tensors


@pytest.mark.parametrize(("seed", "num_prompts", "num_generations"), [(0, 16, 4), (3, 6, 16)])
def test_leave_one_out_bit_identical_to_trl_rloo(seed, num_prompts, num_generations):
    rewards = random_rewards(seed, num_prompts, num_generations)
    actual = compute_advantages(rewards, num_generations, AdvantageSettings("leave_one_out", "none"))
    assert torch.equal(actual, trl_rloo_advantages(rewards, num_generations))


def test_zero_variance_group_differs_from_trl_only_by_rounding_residue():
    # The one deliberate difference: TRL's float32 mean of eight 0.1 is not 0.1, which leaves residue.
    rewards = torch.full((8,), 0.1)
    trl = trl_grpo_advantages(rewards, 8, "group")
    assert (trl != 0).all() and trl.abs().max() < 1e-3
    assert torch.equal(compute_advantages(rewards, 8, AdvantageSettings()), torch.zeros(8))


# --- metrics ---------------------------------------------------------------------------------------------------------
def test_advantage_metrics():
    # [-0.5, -0.5, -0.5, 1.5]: mean 0, mean |A| = 3/4, sample std = sqrt((3·0.25 + 2.25)/3) = 1
    metrics = advantage_metrics(t64([-0.5, -0.5, -0.5, 1.5]))
    assert metrics == pytest.approx({"advantages/mean": 0.0, "advantages/abs_mean": 0.75, "advantages/std": 1.0})


def test_advantage_metrics_mask():
    # rows [1, -1]: mean 0, mean |A| = 1, sample std = sqrt(2/1)
    mask = torch.tensor([True, True, False, False])
    metrics = advantage_metrics(torch.tensor([1.0, -1.0, 5.0, 5.0]), mask)
    assert metrics == pytest.approx({"advantages/mean": 0.0, "advantages/abs_mean": 1.0, "advantages/std": 2**0.5})


def test_advantage_metrics_empty_and_single():
    empty = advantage_metrics(torch.tensor([1.0, 2.0]), torch.tensor([False, False]))
    assert all(math.isnan(v) for v in empty.values())
    single = advantage_metrics(torch.tensor([-2.0]))
    assert single["advantages/mean"] == -2.0 and single["advantages/abs_mean"] == 2.0
    assert math.isnan(single["advantages/std"])


# --- errors ----------------------------------------------------------------------------------------------------------
def test_rewards_not_divisible_by_num_generations():
    with pytest.raises(ValueError, match=r"rewards has 6 entries.*num_generations \(4\)"):
        compute_advantages(torch.zeros(6), 4, AdvantageSettings())


@pytest.mark.parametrize("num_generations", [0, -1, 2.0, True])
def test_bad_num_generations(num_generations):
    with pytest.raises(ValueError, match=r"num_generations=.* must be an integer >= 1"):
        group_baseline(torch.zeros(4), num_generations)


@pytest.mark.parametrize("rewards", [torch.zeros(2, 4), torch.zeros(4, dtype=torch.long), [0.0, 1.0]])
def test_bad_rewards(rewards):
    with pytest.raises(ValueError, match="rewards must be a 1-D floating-point tensor"):
        reward_std(rewards, 2)


def test_bad_choices_and_arguments():
    with pytest.raises(ValueError, match="advantage_baseline='mean' is not valid.*'group_mean', 'leave_one_out'"):
        group_baseline(torch.zeros(4), 2, "mean")
    with pytest.raises(ValueError, match="advantage_std_scaling='global' is not valid"):
        reward_std(torch.zeros(4), 2, "global")
    with pytest.raises(ValueError, match="settings must be an AdvantageSettings"):
        compute_advantages(torch.zeros(4), 2, {"baseline": "group_mean"})
    with pytest.raises(ValueError, match=r"zero_variance_mask must be a bool tensor of shape \(4,\)"):
        compute_advantages(torch.zeros(4), 2, AdvantageSettings(), zero_variance_mask=torch.zeros(4))
    with pytest.raises(ValueError, match="mask must be a bool tensor"):
        advantage_metrics(torch.zeros(4), torch.ones(3, dtype=torch.bool))
