"""Resample round sizing (`zero_variance.resample_round_size`, `ZeroVarianceFractionEstimate`) and the metrics of the batch
that is trained on (`zero_variance.trained_batch_metrics`, through real steps of the tiny model).

Expected values are worked out by hand in the comments (binomial probabilities, decayed counts).
"""

import math
import random

import pytest
import torch
from factories import record_loss_batches
from test_zero_variance_training import _dataset, _trainer, _zero_variance_rows, position_reward

from trl_grpo_ext.zero_variance import (
    ZeroVarianceFractionEstimate,
    expected_surplus,
    resample_round_size,
    trained_batch_metrics,
)


def test_estimate_decays_old_rounds():
    estimate = ZeroVarianceFractionEstimate(decay=0.9)
    assert estimate.value is None
    estimate.update(2, 4)
    assert estimate.value == 0.5
    estimate.update(0, 2)  # (0.9 · 2 + 0) / (0.9 · 4 + 2) = 1.8 / 5.6
    assert estimate.value == pytest.approx(1.8 / 5.6)
    copy = ZeroVarianceFractionEstimate()
    copy.load_state_dict(estimate.state_dict())
    assert copy.value == estimate.value
    with pytest.raises(ValueError, match="decay=0"):
        ZeroVarianceFractionEstimate(decay=0)


def test_expected_surplus_by_hand():
    assert expected_surplus(2, 1, 0.5) == pytest.approx(0.25)  # P(X = 2) · 1
    # X ~ Bin(6, 1/2), missing 4: P(5) · 1 + P(6) · 2 = 6/64 + 2/64
    assert expected_surplus(6, 4, 0.5) == pytest.approx(8 / 64)
    assert expected_surplus(3, 3, 0.9) == 0.0  # never more than needed


def test_round_size_rule():
    # an earlier round: the largest n >= missing with expected surplus <= 0.05 × missing
    assert resample_round_size(1, 0.5, cap=4, last_round=False) == 1  # n = 2 would waste 0.25 > 0.05
    # missing 4 at p = 0.5: n = 6 wastes 8/64 = 0.125 <= 0.2; n = 7 wastes (21 + 14 + 3)/128 ≈ 0.297 > 0.2
    assert resample_round_size(4, 0.5, cap=16, last_round=False) == 6
    # p = 0.9, missing 1: n = 3 wastes 3 · 0.01 · 0.9 + 2 · 0.001 = 0.029; n = 4 wastes 0.0561 > 0.05
    assert resample_round_size(1, 0.9, cap=8, last_round=False) == 3
    # the last round allows 0.25 × missing: p = 0.5, missing 1: n = 2 wastes 0.25; n = 3 wastes 3/8 + 2/8 > 0.25
    assert resample_round_size(1, 0.5, cap=4, last_round=True) == 2
    # p = 0.25, missing 3 (bound 0.75): n = 4 wastes 0.75^4 ≈ 0.316; n = 5 wastes 5·0.75^4·0.25 + 2·0.75^5 ≈ 0.870
    assert resample_round_size(3, 0.25, cap=8, last_round=True) == 4
    assert resample_round_size(1, 0.9, cap=4, last_round=True) == 4  # n = 4 wastes 0.0561: the cap binds
    assert resample_round_size(3, 0.0, cap=4, last_round=True) == 3  # every prompt informative: n = 4 wastes 1
    # no estimate, or nothing informative seen: a whole share (the size of every round before the estimate existed)
    assert resample_round_size(1, None, cap=4, last_round=False) == 4
    assert resample_round_size(1, 1.0, cap=4, last_round=False) == 4
    with pytest.raises(ValueError, match="missing=0"):
        resample_round_size(0, 0.5, cap=4, last_round=False)


@pytest.mark.parametrize("prompts", [4, 8])
@pytest.mark.parametrize("p", [0.2, 0.5, 0.7])
def test_simulated_completions_per_informative_group_stay_within_1_1_of_the_bound(prompts, p):
    """Monte Carlo of the rule on groups that have zero variance with probability p (3 rounds, 2000 steps, fixed seed).

    Completions per informative group trained, over G / (1 − p), equals informative groups generated over
    informative groups trained: 1 when none is thrown away. The old rule (every round a whole batch) gives about
    1.19 at p = 0.5 with 4 prompts a step.
    """
    rng = random.Random(0)
    estimate = ZeroVarianceFractionEstimate()
    generated_informative = trained = 0
    for _ in range(2000):
        informative = sum(rng.random() > p for _ in range(prompts))
        estimate.update(prompts - informative, prompts)
        generated_informative += informative
        have = informative
        for round_ in range(3):
            if have == prompts:
                break
            n = resample_round_size(prompts - have, estimate.value, prompts, last_round=round_ == 2)
            found = sum(rng.random() > p for _ in range(n))
            estimate.update(n - found, n)
            generated_informative += found
            have = min(prompts, have + found)
        trained += have
    ratio = generated_informative / trained
    assert 1.0 <= ratio <= 1.1, ratio


def test_trained_batch_metrics_by_hand():
    # 2 groups of G = 2; rewards_per_func columns a (weight 1) and b (weight 0.5), None for one b value
    rewards = torch.tensor([[1.0, 2.0], [1.0, 0.0], [0.0, float("nan")], [2.0, 2.0]])
    metrics = trained_batch_metrics(
        rewards, torch.tensor([1.0, 0.5]), ["a", "b"], 2, "group",
        completion_lengths=torch.tensor([3, 5, 8, 2]), truncated=torch.tensor([False, False, True, False]),
    )
    # totals: [2, 1, 0, 3]; mean 1.5; sample std √((0.25 + 0.25 + 2.25 + 2.25) / 3) = √(5/3)
    assert metrics["reward"] == 1.5 and metrics["reward_std"] == pytest.approx(math.sqrt(5 / 3))
    assert metrics["frac_reward_zero_std"] == 0.0  # group stds √0.5 and √4.5
    assert metrics["rewards/a/mean"] == 1.0 and metrics["rewards/b/mean"] == pytest.approx(4 / 3)
    assert metrics["rewards/a/std"] == pytest.approx(math.sqrt(2 / 3))  # [1, 1, 0, 2]: mean 1, Σd² 2, /3
    assert (metrics["completions/mean_length"], metrics["completions/min_length"],
            metrics["completions/max_length"]) == (4.5, 2.0, 8.0)
    assert metrics["completions/clipped_ratio"] == 0.25
    assert (metrics["completions/mean_terminated_length"], metrics["completions/min_terminated_length"],
            metrics["completions/max_terminated_length"]) == (pytest.approx(10 / 3), 2.0, 5.0)
    zero_variance_group = trained_batch_metrics(
        torch.tensor([[1.0], [1.0], [0.0], [1.0]]), torch.tensor([1.0]), ["a"], 2, "group",
        completion_lengths=torch.tensor([1, 1, 1, 1]), truncated=torch.tensor([True] * 4),
    )
    assert zero_variance_group["frac_reward_zero_std"] == 0.5  # the first group's rows
    assert zero_variance_group["completions/mean_terminated_length"] == 0.0  # none terminated: TRL logs 0


TRL_BATCH_METRICS = ("reward", "reward_std", "frac_reward_zero_std", "rewards/position_reward/mean",
                     "rewards/position_reward/std", "completions/mean_length", "completions/min_length",
                     "completions/max_length", "completions/clipped_ratio", "completions/mean_terminated_length",
                     "completions/min_terminated_length", "completions/max_terminated_length")


def test_without_extra_rounds_the_trained_batch_metrics_equal_trls(tmp_path):
    # no prompt asks for the zero-variance target: no round is needed, so the trained batch is TRL's batch
    trainer = _trainer(tmp_path, position_reward, _dataset(16, every=1000), zero_variance_filter="resample",
                       total_training_steps=2)
    trainer.train()
    for entry in (e for e in trainer.state.log_history if "loss" in e):
        assert entry["zero_variance/resample_rounds"] == 0
        for name in TRL_BATCH_METRICS:
            assert entry[name] == pytest.approx(entry[f"zero_variance/rounds/{name}"], rel=1e-6, abs=1e-9), name


def test_resample_logs_the_trained_batch_under_trls_names(tmp_path):
    # every other prompt asks for "b" (constant reward 1: zero variance); the others get their position 0, 1, 2, 3
    trainer = _trainer(tmp_path, position_reward, _dataset(64), zero_variance_filter="resample",
                       total_training_steps=3, max_resample_rounds=6)
    trained = record_loss_batches(trainer, _zero_variance_rows)
    trainer.train()
    logs = [e for e in trainer.state.log_history if "loss" in e]
    assert len(logs) == 3
    for entry, zero_variance in zip(logs, trained):
        assert entry["zero_variance/shortfall_groups"] == 0 and not zero_variance.any()
        # the trained batch: 4 groups with rewards 0, 1, 2, 3: mean 1.5, sample std √(4 · 5 / 15) = √(4/3)
        assert entry["reward"] == 1.5 and entry["rewards/position_reward/mean"] == 1.5
        assert entry["reward_std"] == pytest.approx(math.sqrt(4 / 3))
        assert entry["frac_reward_zero_std"] == 0.0
        # every generation round of the step, zero-variance groups (reward 1.0) included, under their own names
        if entry["zero_variance/frac_uniform_before"] > 0:
            assert entry["zero_variance/rounds/frac_reward_zero_std"] > 0
            assert entry["zero_variance/rounds/reward"] < 1.5
        assert 0 < entry["zero_variance/uniform_fraction_estimate"] < 1
    assert any(entry["zero_variance/frac_uniform_before"] > 0 for entry in logs)
    # rounds sized to what is missing: fewer prompts than a whole generation batch (4) per round
    assert sum(e["zero_variance/prompts_drawn"] for e in logs) < 4 * sum(e["zero_variance/resample_rounds"] for e in logs)
