"""Advantages through real training steps of the embedded tiny model (CPU).

- With settings that coincide with TRL's, the advantages `GRPOExtTrainer` feeds the loss are bit-identical to the
  ones TRL's own `_generate_and_score_completions` computes from the same rewards.
- On a known batch (groups [0, 0, 0, 1] and [0, 0, 0, 3]) the advantages equal hand-worked values for each std
  scaling and each preset, so a swap of two branches (a TRL release once swapped group and none) is caught.
"""

import math

import pytest
import torch
from factories import count_char_mix, record_generation_outputs, record_loss_batches, tiny_trainer
from trl import GRPOTrainer

from trl_grpo_ext import GRPOExtTrainer

G = 4


def known_reward(completions, target, **kwargs):
    """[0, 0, 0, 1] in each "a" group, [0, 0, 0, 3] in each "b" group (by position in the group)."""
    return [float(i % G == G - 1) * (3.0 if t == "b" else 1.0) for i, t in enumerate(target)]


def fractional_reward(completions, **kwargs):
    """(position in group) / 3 plus a length term: inexact floats; None for the completion at index 5."""
    return [None if i == 5 else (i % G) / 3 + len(c[0]["content"]) / 7 for i, c in enumerate(completions)]


def sometimes_missing_reward(completions, **kwargs):
    """0.1 × length, None at indices 5 (so row 5 is unscorable) and 9; one group of constant 0.5 rewards."""
    values = []
    for i, c in enumerate(completions):
        if i in (5, 9):
            values.append(None)
        elif i // G == 3:
            values.append(0.5)
        else:
            values.append(0.1 * len(c[0]["content"]))
    return values


# 4 prompts per step, G 4, one micro-batch of 16 completions, 1 optimizer step at lr 1e-3, seed 0
RUN = dict(prompts_per_step=4, num_generations=G, micro_batch_size=16, total_training_steps=1, max_completion_length=8,
           learning_rate=1e-3, seed=0)


def _trainer(tmp_path, reward_funcs, **overrides) -> GRPOExtTrainer:
    # count_char_mix(4): 2 "a" and 2 "b" prompts (the "b" groups get 3× the reward), so every step holds all four
    return tiny_trainer(tmp_path, reward_funcs, count_char_mix(4), **{**RUN, **overrides})


def _record(trainer, monkeypatch):
    """Lists of (TRL's advantages, ours, the batch) per generation batch, both (B,) in group order."""
    trl_advantages = []
    trl_generate = GRPOTrainer._generate_and_score_completions

    def recording_trl(self, inputs):
        output = trl_generate(self, inputs)
        trl_advantages.append(output["advantages"].clone())
        return output

    monkeypatch.setattr(GRPOTrainer, "_generate_and_score_completions", recording_trl)
    return trl_advantages, record_generation_outputs(trainer)


def _b_groups(trainer, output) -> torch.Tensor:
    """(B,) bool: rows whose prompt asks for "b", read from the decoded prompt text."""
    texts = trainer.processing_class.batch_decode(output["prompt_ids"], skip_special_tokens=True)
    return torch.tensor(["write b b" in text for text in texts])


# --- parity with TRL through a real step ----------------------------------------------------------------------------
@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
def test_advantages_fed_to_the_loss_equal_trls(tmp_path, monkeypatch, scale_rewards):
    trainer = _trainer(
        tmp_path,
        [fractional_reward, sometimes_missing_reward],
        reward_weights=[1.0, 0.5],
        scale_rewards=scale_rewards,
        total_training_steps=2,
    )
    trl_advantages, ours = _record(trainer, monkeypatch)
    loss_inputs = record_loss_batches(trainer, lambda _, inputs: inputs["advantages"].clone())
    trainer.train()

    assert len(trl_advantages) == len(ours) == len(loss_inputs) == 2
    for trl_values, output, fed in zip(trl_advantages, ours, loss_inputs):
        assert trl_values.shape == (16,) and trl_values.abs().sum() > 0
        assert torch.equal(output["advantages"], trl_values)
        # the loss receives the same values, shuffled into micro-batches (one micro-batch here)
        assert torch.equal(fed.sort().values, trl_values.sort().values)
        # row 5 is unscorable (both rewards None) and group 3 of the second function is constant: neither matters
        assert output["advantages"][5] == 0


# --- hand-worked values on a known batch ----------------------------------------------------------------------------
# Per step: 2 "a" groups [0, 0, 0, 1] and 2 "b" groups [0, 0, 0, 3] (16 rewards). Group means 1/4 and 3/4; sample
# group std: a: sqrt((3·1/16 + 9/16) / 3) = 1/2, b: 3/2. Batch: mean (2 + 6) / 16 = 1/2; Σ(r − 1/2)² =
# 12·(1/4) + 2·(1/4) + 2·(25/4) = 16, sample std sqrt(16/15) = 4/sqrt(15). ε = 1e-4.
S_BATCH = 4 / math.sqrt(15)
EXPECTED = {  # scaling -> (values of an "a" group, values of a "b" group)
    "group": ([-0.25 / 0.5001] * 3 + [0.75 / 0.5001], [-0.75 / 1.5001] * 3 + [2.25 / 1.5001]),
    "batch": (
        [-0.25 / (S_BATCH + 1e-4)] * 3 + [0.75 / (S_BATCH + 1e-4)],
        [-0.75 / (S_BATCH + 1e-4)] * 3 + [2.25 / (S_BATCH + 1e-4)],
    ),
    "none": ([-0.25] * 3 + [0.75], [-0.75] * 3 + [2.25]),
}


def _assert_known_batch(trainer, output, expected_a, expected_b):
    b_rows = _b_groups(trainer, output)
    assert b_rows.view(-1, G).all(dim=1).sum() == 2 and (~b_rows).view(-1, G).all(dim=1).sum() == 2
    for group, is_b in zip(output["advantages"].view(-1, G), b_rows.view(-1, G)[:, 0]):
        expected = torch.tensor(expected_b if is_b else expected_a, dtype=torch.float32)
        torch.testing.assert_close(group, expected, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("scaling", ["group", "batch", "none"])
def test_std_scaling_on_a_known_batch(tmp_path, monkeypatch, scaling):
    trainer = _trainer(tmp_path, known_reward, advantage_std_scaling=scaling)
    trl_advantages, ours = _record(trainer, monkeypatch)
    trainer.train()
    (output,) = ours
    _assert_known_batch(trainer, output, *EXPECTED[scaling])
    assert torch.equal(output["advantages"], trl_advantages[0])  # TRL agrees (its scale_rewards was set to match)


# --- presets --------------------------------------------------------------------------------------------------------
# RLOO (leave-one-out, no std): b_i = mean of the 3 others. "a" group: zeros get 0 − 1/3, the one gets 1 − 0 = 1;
# "b" group: −1 and 3.
PRESETS = {  # preset -> (loss_type TRL must use, expected "a" group, expected "b" group)
    "grpo": ("grpo", *EXPECTED["group"]),
    "dapo": ("dapo", *EXPECTED["group"]),
    "dr_grpo": ("dr_grpo", *EXPECTED["none"]),
    "rloo": ("dr_grpo", [-1 / 3] * 3 + [1.0], [-1.0] * 3 + [3.0]),
}


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_each_preset_trains_the_tiny_model(tmp_path, monkeypatch, preset):
    loss_type, expected_a, expected_b = PRESETS[preset]
    trainer = _trainer(tmp_path, known_reward, advantage_preset=preset, total_training_steps=2)
    assert trainer.loss_type == loss_type
    _, ours = _record(trainer, monkeypatch)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()

    assert trainer.state.global_step == 2 and len(ours) == 2
    for output in ours:
        _assert_known_batch(trainer, output, expected_a, expected_b)
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert len(logs) == 2 and all(math.isfinite(entry["loss"]) for entry in logs)
    # advantage metrics are logged; every group has the same shape, so |A| averages as in one "a" and one "b" group
    abs_mean = (sum(abs(v) for v in expected_a) + sum(abs(v) for v in expected_b)) / 8
    assert logs[0]["advantages/abs_mean"] == pytest.approx(abs_mean, rel=1e-5)
    changed = [n for n, p in trainer.model.named_parameters() if not torch.equal(before[n], p.detach())]
    assert changed  # the model was updated
