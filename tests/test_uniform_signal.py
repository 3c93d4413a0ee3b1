"""A signal from uniform groups (``zero_variance_signal: entropy``, RL-ZVP-style): the formula on a hand-worked example,
its wiring into TRL's loss, and training steps in which every group is uniform and the policy still moves."""

from __future__ import annotations

import inspect
import math

import pytest
import torch
from factories import count_char_mix, record_loss_batches, tiny_trainer
from trl import GRPOTrainer

from trl_grpo_ext import GRPOExtConfig
from trl_grpo_ext.advantages import uniform_group_signal
from trl_grpo_ext.zero_variance.groups import ROW_NORMALISED_LOSSES, TOKEN_NORMALISED_LOSSES

G = 4


def test_the_formula_on_a_hand_worked_example():
    # Three completions of 4 tokens, the last token of row 1 is padding (mask 0). α = 0.2.
    # Row 0, all right: H = [0.2, 0.4, 0.8, 0.1], H_max = 0.8 -> A = 0.2 · H / 0.8 = [0.05, 0.1, 0.2, 0.025]
    # Row 1, all wrong: H = [1.0, 0.5, 0.25, (9.0 masked)], H_max = 1.0 (the masked 9.0 does not count)
    #                   -> A = -0.2 · (1 - H / 1.0) = [0, -0.1, -0.15, 0 (masked)]
    # Row 2, informative (sign 0): A = 0
    entropies = torch.tensor([[0.2, 0.4, 0.8, 0.1], [1.0, 0.5, 0.25, 9.0], [3.0, 3.0, 3.0, 3.0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 1]])
    signal = uniform_group_signal(torch.tensor([1.0, -1.0, 0.0]), entropies, mask, 0.2)
    expected = torch.tensor([[0.05, 0.1, 0.2, 0.025], [0.0, -0.1, -0.15, 0.0], [0.0, 0.0, 0.0, 0.0]])
    torch.testing.assert_close(signal, expected)
    # a wrong completion whose tokens all had zero entropy is penalised fully; a right one gets nothing
    flat = uniform_group_signal(torch.tensor([1.0, -1.0]), torch.zeros(2, 3), torch.ones(2, 3), 0.2)
    torch.testing.assert_close(flat, torch.tensor([[0.0, 0.0, 0.0], [-0.2, -0.2, -0.2]]))
    # the entropies get no gradient through it
    grad_entropies = entropies.clone().requires_grad_()
    assert not uniform_group_signal(torch.tensor([1.0, -1.0, 0.0]), grad_entropies, mask, 0.2).requires_grad


def test_trl_reads_the_advantages_after_computing_the_entropies():
    # the override adds the signal inside _get_per_token_logps_and_entropies; TRL's loss must read
    # inputs["advantages"] after that call and accept (B, T) advantages
    source = inspect.getsource(GRPOTrainer._compute_loss)
    call = source.index("self._get_per_token_logps_and_entropies(")
    read = source.index('advantages = inputs["advantages"]')
    assert call < read and "compute_entropy=True" in source[call:read]
    assert "if advantages.dim() == 1:" in source[read:]


def zero_reward(completions, **kwargs):
    """0.0 for every completion: every group uniform and, never having seen another value, all wrong (or cut, when
    every completion of a group hit max_completion_length: 32 tokens make that rare on the tiny model)."""
    return [0.0] * len(completions)


def _trainable(trainer):
    return {name: p.detach().clone() for name, p in trainer.model.named_parameters() if p.requires_grad}


def test_the_token_advantages_reach_trls_loss(tmp_path):
    trainer = tiny_trainer(tmp_path, zero_reward, count_char_mix(4), prompts_per_step=2, num_generations=G,
                           micro_batch_size=8, total_training_steps=1, max_completion_length=32, seed=0,
                           zero_variance_filter="mask", zero_variance_signal="entropy", zero_variance_signal_coef=0.3)
    seen = []
    original = GRPOTrainer._get_per_token_logps_and_entropies

    def spy(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        if kwargs.get("compute_entropy") and getattr(self, "_signal_inputs", None) is not None:
            seen.append((self._signal_inputs, out[1].detach().clone()))
        return out

    GRPOTrainer._get_per_token_logps_and_entropies = spy
    try:
        trainer.train()
    finally:
        GRPOTrainer._get_per_token_logps_and_entropies = original
    assert seen, "no micro-batch carried the signal"
    for inputs, entropies in seen:
        # every group uniform at 0: all wrong (sign -1) or cut (masked, sign 0); an all-wrong row's token advantages
        # are -0.3 · (1 - H / H_max) on its loss tokens, a masked row's 0
        mask = inputs["completion_mask"] * inputs["tool_mask"]
        signs = inputs["zero_variance_signal"]
        assert set(signs.tolist()) <= {-1.0, 0.0} and (signs == -1).any()
        assert torch.equal(inputs["tool_mask"][:, 0] == 1, signs == -1)  # cut groups stay masked
        held = entropies * mask
        expected = -0.3 * (1 - held / held.amax(dim=1, keepdim=True).clamp(min=1e-30)) * mask
        torch.testing.assert_close(inputs["advantages"], expected)
        assert (inputs["advantages"] <= 0).all() and (inputs["advantages"] >= -0.3).all()


@pytest.mark.parametrize("signal", ["off", "entropy"])
def test_all_wrong_groups_teach_only_with_the_signal(tmp_path, signal):
    trainer = tiny_trainer(tmp_path, zero_reward, count_char_mix(4), prompts_per_step=2, num_generations=G,
                           micro_batch_size=8, total_training_steps=2, max_completion_length=32, seed=0,
                           learning_rate=1e-2, zero_variance_filter="mask", zero_variance_signal=signal)
    before = _trainable(trainer)
    kept = record_loss_batches(trainer, lambda t, inputs: int(inputs["zero_variance_keep"].sum()))
    trainer.train()
    after = _trainable(trainer)
    changed = [name for name in before if not torch.equal(before[name], after[name])]
    steps = [h for h in trainer.state.log_history if "reward" in h]
    assert all(h["zero_variance/frac_uniform_before"] == 1.0 for h in steps)
    wrong_rows = sum(h["zero_variance/frac_uniform_wrong"] * 2 * G for h in steps)  # 2 groups of G a step
    assert wrong_rows >= G  # at least one all-wrong group (the others cut)
    if signal == "off":  # mask drops every all-wrong group: no row kept, no update (TRL's GRPO: zero advantages)
        assert sum(kept) == 0 and not changed
        assert all(h["zero_variance/no_update"] == 1.0 for h in trainer.state.log_history if "loss" in h)
    else:  # the signal keeps them in the loss with negative token advantages: every trainable weight moves
        assert sum(kept) == wrong_rows and changed == list(before)


@pytest.mark.parametrize("loss_type", sorted(ROW_NORMALISED_LOSSES | TOKEN_NORMALISED_LOSSES))
def test_every_loss_type_the_mask_serves_trains_with_the_signal(tmp_path, loss_type):
    trainer = tiny_trainer(tmp_path, zero_reward, count_char_mix(2), prompts_per_step=2, num_generations=G,
                           micro_batch_size=8, total_training_steps=1, max_completion_length=32, seed=0,
                           learning_rate=1e-2, loss_type=loss_type, zero_variance_filter="mask",
                           zero_variance_signal="entropy")
    before = _trainable(trainer)
    trainer.train()
    after = _trainable(trainer)
    assert any(not torch.equal(before[name], after[name]) for name in before), loss_type
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert losses and all(math.isfinite(loss) for loss in losses)


def test_refused_beside_resample_before_any_model_loads(tmp_path):
    with pytest.raises(ValueError, match="zero_variance_filter='resample' replaces them first"):
        GRPOExtConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, prompts_per_step=2, num_generations=G,
                      micro_batch_size=8, total_training_steps=1, zero_variance_filter="resample",
                      zero_variance_signal="entropy", rewards=["char_fraction"])


def test_the_step_line_does_not_call_signal_steps_zero_advantage():
    from trl_grpo_ext.training.console import step_line

    uniform = {"reward": 0.0, "reward_std": 0.0, "zero_variance/frac_uniform_before": 1.0}
    # filter off, no signal: every completion's advantage is 0 and the optimizer steps on it
    assert "all groups uniform: zero advantages" in step_line(
        dict(uniform, **{"zero_variance/frac_completions_no_gradient": 1.0}), 2, 3, None)
    # zero_variance_signal: the all-wrong groups carry token advantages, so the notice would be false
    assert "zero advantages" not in step_line(
        dict(uniform, **{"zero_variance/frac_completions_no_gradient": 0.0}), 2, 3, None)


def test_without_effect_beside_normalize_then_sum_it_is_a_warning(tmp_path):
    # TRL's normalize_then_sum advantages are used as they are: the signal would do nothing, so it is a warning
    import warnings

    from trl_grpo_ext.config.checks import IneffectiveSettingWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        GRPOExtConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, prompts_per_step=2, num_generations=G,
                      micro_batch_size=8, total_training_steps=1, zero_variance_signal="entropy",
                      multi_objective_aggregation="normalize_then_sum", rewards=["char_fraction"])
    lines = [str(w.message) for w in caught if issubclass(w.category, IneffectiveSettingWarning)]
    assert any("zero_variance_signal='entropy' has no effect with multi_objective_aggregation='normalize_then_sum'"
               in line for line in lines), lines
