"""The console explains a loss of 0 once when it is expected: beta 0 and one policy update per generation batch
(issue 22, item 8; trl#2703, trl#3452, trl#3857, open-r1#239, unsloth#2614)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from factories import tiny_config

from trl_grpo_ext.training.console import ZeroLossNoteCallback, zero_loss_note

ON_POLICY = dict(gradient_accumulation_steps=2, steps_per_generation=2, num_iterations=1)


def test_the_note_is_given_for_a_zero_loss_on_policy_without_kl():
    note = zero_loss_note(0.0, beta=0.0, loss_type="grpo", **ON_POLICY)
    assert note.startswith("note: a loss of 0 is expected here, and training still works. With beta=0 (no KL term) "
                           "and one policy update per generation batch (num_iterations=1)")
    assert "its value is exactly 0" in note and "its gradient, the advantage-weighted mean of ∇log π, is not" in note
    assert "Why is my loss 0?" in note
    dapo = zero_loss_note(-2e-4, beta=0.0, loss_type="dapo", **ON_POLICY)
    assert "0 when the completions of a group are equally long, else small" in dapo


@pytest.mark.parametrize(
    "change",
    [
        {"beta": 0.04},  # the KL term makes the loss non-zero
        {"loss": 0.2},  # not a loss of 0
        {"loss_type": "cispo"},  # −clip(ratio) · A · log π: not a sum of advantages
        {"loss_type": "sapo"},  # its gate weighs positive and negative advantages differently
        {"num_iterations": 2},  # the second pass is off-policy: the ratio moves
        {"steps_per_generation": 4},  # a generation batch spans two optimizer steps
        {"entropy_coef": 0.01},  # the entropy bonus
    ],
)
def test_no_note_when_zero_is_not_what_the_settings_give(change):
    values = dict(loss=0.0, beta=0.0, loss_type="grpo", entropy_coef=0.0, **ON_POLICY)
    values.update(change)
    loss = values.pop("loss")
    assert zero_loss_note(loss, **values) is None


def _args(**fields):
    base = dict(beta=0.0, loss_type="dapo", gradient_accumulation_steps=1, steps_per_generation=1, num_iterations=1,
                entropy_coef=0.0, use_adaptive_entropy=False)
    return SimpleNamespace(**{**base, **fields})


def test_the_callback_prints_it_once(capsys):
    callback = ZeroLossNoteCallback()
    state = SimpleNamespace(is_world_process_zero=True)
    callback.on_log(_args(), state, None, logs={"loss": 0.3})  # not zero: nothing, and still waiting
    callback.on_log(_args(), state, None, logs={"eval_reward": 0.5})  # no loss in this log
    # every group uniform: the gradient is 0 as well, so "training still works" would be false; still waiting
    callback.on_log(_args(), state, None, logs={"loss": 0.0, "frac_reward_zero_std": 1.0})
    callback.on_log(_args(), state, None, logs={"loss": 0.0, "zero_variance/frac_uniform_before": 1.0,
                                                "frac_reward_zero_std": 1.0, "zero_variance/no_update": 1.0})
    assert capsys.readouterr().out == ""
    for _ in range(3):
        callback.on_log(_args(), state, None, logs={"loss": 0.0})
    assert capsys.readouterr().out.count("note: a loss of 0 is expected here") == 1
    quiet = ZeroLossNoteCallback()
    quiet.on_log(_args(), SimpleNamespace(is_world_process_zero=False), None, logs={"loss": 0.0})
    quiet.on_log(_args(beta=0.1), state, None, logs={"loss": 0.0})
    assert capsys.readouterr().out == ""


def test_a_real_run_with_loss_type_grpo_logs_0_and_is_told_why_once(tmp_path, tiny_model_dir, tiny_tokenizer,
                                                                     capsys):
    from trl_grpo_ext import GRPOExtTrainer
    from trl_grpo_ext.models.embedded import tiny

    def length_reward(completions, **kwargs):  # differs within groups: the advantages are not all 0
        return [float(len(c[0]["content"] if isinstance(c, list) else c)) for c in completions]

    args = tiny_config(tmp_path, prompts_per_step=2, num_generations=4, micro_batch_size=4, total_training_steps=3,
                       max_completion_length=6, loss_type="grpo", beta=0.0, temperature=1.0)
    trainer = GRPOExtTrainer(str(tiny_model_dir), reward_funcs=length_reward, args=args,
                             train_dataset=tiny.count_char_dataset(16), processing_class=tiny_tokenizer)
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 3 and all(abs(loss) < 1e-6 for loss in losses)  # Σ advantages = 0 per group, ratio 1
    assert any(entry.get("grad_norm", 0) > 0 for entry in trainer.state.log_history)  # the gradient is not 0
    assert capsys.readouterr().out.count("note: a loss of") == 1
