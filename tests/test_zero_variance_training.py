"""The zero-variance filter through real training steps of the embedded tiny model (CPU).

The task: prompts ask for a target character; prompts with target "b" get the constant reward 1.0 (their groups have
zero variance), prompts with target "a" get the completion's position in its group (0, 1, 2, 3: never). Which rows
have zero variance is therefore known from the prompt text alone, independently of the code under test.
"""

import copy

import pytest
import torch
from datasets import Dataset
from factories import count_char_mix, record_loss_batches, tiny_trainer
from transformers import TrainerCallback
from trl import GRPOTrainer

from trl_grpo_ext import GRPOExtTrainer

G = 4
ZERO_VARIANCE_TARGET = "b"


def _dataset(num_prompts: int, every: int = 2) -> Dataset:
    """count-char prompts; every `every`-th one (starting with the second) asks for the zero-variance target."""
    return count_char_mix(num_prompts, other=ZERO_VARIANCE_TARGET, every=every)


def position_reward(completions, target, **kwargs):
    """1.0 for every completion of a zero-variance-target prompt; else the completion's position in its group."""
    return [1.0 if t == ZERO_VARIANCE_TARGET else float(i % G) for i, t in enumerate(target)]


def constant_after_first_step_reward(completions, target, trainer_state, **kwargs):
    """Informative at optimizer step 1 (so Adam has state), constant 1.0 for every completion afterwards."""
    if trainer_state.global_step == 0:
        return [float(i % G) for i in range(len(completions))]
    return [1.0] * len(completions)


def constant_reward(completions, **kwargs):
    return [1.0] * len(completions)


# 4 prompts per step, G 4; one micro-batch = the whole generation batch (gradient_accumulation_steps = 1)
RUN = dict(prompts_per_step=4, num_generations=G, micro_batch_size=16, total_training_steps=1, max_completion_length=8,
           learning_rate=1e-3, seed=0)


def _trainer(tmp_path, reward, dataset, **overrides) -> GRPOExtTrainer:
    return tiny_trainer(tmp_path, reward, dataset, **{**RUN, **overrides})


def _zero_variance_rows(trainer, inputs) -> torch.Tensor:
    """(B,) bool: the rows whose prompt asks for the zero-variance target, read from the decoded prompt text."""
    texts = trainer.processing_class.batch_decode(inputs["prompt_ids"], skip_special_tokens=True)
    return torch.tensor([f"write {ZERO_VARIANCE_TARGET} {ZERO_VARIANCE_TARGET}" in text for text in texts])


def _without_rows(inputs: dict, removed: torch.Tensor) -> dict:
    """TRL's inputs with the `removed` rows physically dropped, and no trace of the filter."""
    rows = len(removed)
    kept = {
        key: value[~removed] if isinstance(value, torch.Tensor) and value.dim() > 0 and len(value) == rows else value
        for key, value in inputs.items()
        if key not in ("tool_mask", "zero_variance_keep", "zero_variance_loss_scale")
    }
    kept["num_items_in_batch"] = kept["completion_mask"].sum()  # one process: the kept tokens are all tokens
    return kept


class _Capture(TrainerCallback):
    """Records the gradient right before each optimizer step, and weights/optimizer state after each step."""

    def __init__(self, trainer):
        self.trainer = trainer
        self.grads, self.weights, self.optimizer_states = [], [], []

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self.grads.append({n: p.grad.clone() for n, p in self.trainer.model.named_parameters() if p.grad is not None})

    def on_step_end(self, args, state, control, **kwargs):
        self.weights.append({n: p.detach().clone() for n, p in self.trainer.model.named_parameters()})
        self.optimizer_states.append(copy.deepcopy(self.trainer.optimizer.state_dict()))


# --- mask: gradient == gradient of the batch with the zero-variance groups removed ------------------------------------
@pytest.mark.parametrize("loss_type", ["dapo", "bnpo", "grpo", "dr_grpo"])
def test_mask_gradient_equals_gradient_without_zero_variance_groups(tmp_path, loss_type):
    # 4 prompts, 2 with target "b": every step holds 2 zero-variance and 2 informative groups (8 + 8 rows).
    trainer = _trainer(
        tmp_path, position_reward, _dataset(4), zero_variance_filter="mask", loss_type=loss_type, max_grad_norm=0.0
    )
    capture = _Capture(trainer)
    trainer.add_callback(capture)
    reference = {}
    ours = trainer._compute_loss

    def compute_loss(model, inputs):
        removed = _zero_variance_rows(trainer, inputs)
        params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        trl_loss = GRPOTrainer._compute_loss(trainer, model, _without_rows(inputs, removed))
        grads = torch.autograd.grad(trl_loss, [p for _, p in params], allow_unused=True)
        reference.update(removed=removed, grads={n: g for (n, _), g in zip(params, grads) if g is not None})
        # and TRL's loss of the whole batch without the filter (zero-variance rows still in the normaliser)
        unfiltered = {k: v for k, v in inputs.items() if k not in ("tool_mask", "zero_variance_keep")}
        unfiltered["num_items_in_batch"] = inputs["completion_mask"].sum()
        unfiltered_loss = GRPOTrainer._compute_loss(trainer, model, unfiltered)
        reference["unfiltered"] = dict(
            zip([n for n, _ in params], torch.autograd.grad(unfiltered_loss, [p for _, p in params]))
        )
        return ours(model, inputs)

    trainer._compute_loss = compute_loss
    trainer.train()

    removed = reference["removed"]
    assert removed.sum() == 8 and (~removed).sum() == 8  # two zero-variance and two informative groups of G = 4
    (grads,) = capture.grads
    assert set(grads) == set(reference["grads"])
    for name, grad in grads.items():
        torch.testing.assert_close(grad, reference["grads"][name], rtol=1e-5, atol=1e-8, msg=name)
    # the test can fail: without the filter the zero-variance rows dilute the gradient (a different gradient)
    total = sum(float(g.abs().sum()) for g in grads.values())
    unfiltered_total = sum(float(g.abs().sum()) for g in reference["unfiltered"].values())
    assert total > 0 and abs(unfiltered_total - total) > 1e-3 * total


def test_mask_gradient_with_gradient_accumulation_dapo(tmp_path):
    # Two micro-batches of 8 (gradient_accumulation_steps = 2): the accumulated gradient equals the gradient of TRL's
    # dapo loss on the kept rows of the whole generation batch (one sum over kept tokens / kept tokens).
    trainer = _trainer(
        tmp_path, position_reward, _dataset(4), zero_variance_filter="mask", micro_batch_size=8, max_grad_norm=0.0
    )
    assert trainer.args.gradient_accumulation_steps == 2
    micro_batches = []
    ours = trainer._compute_loss

    def compute_loss(model, inputs):
        micro_batches.append(inputs)
        return ours(model, inputs)

    class Reference(_Capture):
        def on_pre_optimizer_step(self, args, state, control, **kwargs):
            super().on_pre_optimizer_step(args, state, control, **kwargs)
            batch = {
                key: torch.cat([mb[key] for mb in micro_batches]) if micro_batches[0][key].dim() > 0 else value
                for key, value in micro_batches[0].items()
            }
            model = self.trainer.model
            params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
            loss = GRPOTrainer._compute_loss(self.trainer, model, _without_rows(batch, _zero_variance_rows(trainer, batch)))
            self.reference = dict(zip([n for n, _ in params], torch.autograd.grad(loss, [p for _, p in params])))

    capture = Reference(trainer)
    trainer.add_callback(capture)
    trainer._compute_loss = compute_loss
    trainer.train()

    assert len(micro_batches) == 2
    (grads,) = capture.grads
    for name, grad in grads.items():
        torch.testing.assert_close(grad, capture.reference[name], rtol=1e-5, atol=1e-8, msg=name)


# --- mask: a step in which every group has zero variance makes no update at all ---------------------------------------
@pytest.mark.parametrize("mode", ["mask", "off"])
def test_all_zero_variance_step_leaves_weights_and_optimizer_state_untouched(tmp_path, mode):
    trainer = _trainer(
        tmp_path,
        constant_after_first_step_reward,
        _dataset(4, every=10**6),
        zero_variance_filter=mode,
        total_training_steps=2,
    )
    initial = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    capture = _Capture(trainer)
    trainer.add_callback(capture)
    trainer.train()

    after_first, after_second = capture.weights
    assert any(not torch.equal(initial[n], after_first[n]) for n in initial)  # step 1 learned something
    state_first, state_second = capture.optimizer_states
    assert state_first["state"]  # Adam moments exist after step 1
    weights_unchanged = all(torch.equal(after_first[n], after_second[n]) for n in after_first)
    state_unchanged = all(
        torch.equal(state_first["state"][i][k], state_second["state"][i][k])
        for i in state_first["state"]
        for k in state_first["state"][i]
    )
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    if mode == "mask":
        assert weights_unchanged and state_unchanged
        assert logs[1]["zero_variance/frac_uniform_before"] == 1.0
        assert logs[1]["zero_variance/completions_masked"] == 16
        assert logs[1]["zero_variance/no_update"] == 1.0
        assert logs[0]["zero_variance/no_update"] == 0.0
    else:  # TRL's behaviour: zero advantages, yet Adam's momentum still moves the weights and its state changes
        assert not weights_unchanged and not state_unchanged
        assert "zero_variance/no_update" not in logs[1]


# --- resample -------------------------------------------------------------------------------------------------------
def test_resample_fills_every_step_with_informative_groups(tmp_path):
    # 1 prompt in 4 asks for "b" (zero variance); 3 steps of 4 prompts, up to 3 extra rounds of 4 prompts each.
    trainer = _trainer(
        tmp_path, position_reward, _dataset(32, every=4), zero_variance_filter="resample", total_training_steps=3
    )
    loss_rows = record_loss_batches(trainer, _zero_variance_rows)
    trainer.train()

    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert len(logs) == 3
    assert any(entry["zero_variance/frac_uniform_before"] > 0 for entry in logs)  # there was something to refill
    for entry, zero_variance in zip(logs, loss_rows):
        assert entry["zero_variance/frac_uniform_after"] == 0
        assert entry["zero_variance/shortfall_groups"] == 0
        assert entry["zero_variance/completions_masked"] == 0
        assert not zero_variance.any()  # no "b" prompt reached the loss
        assert len(zero_variance) == 16
    assert sum(entry["zero_variance/prompts_drawn"] for entry in logs) > 0
    # extra prompts do not advance the main sampler: the epoch counts 3 steps of 4 prompts over 32 prompts
    assert trainer.state.epoch == pytest.approx(3 * 4 / 32)


def test_resample_without_informative_groups_finishes_with_the_shortfall_logged(tmp_path):
    trainer = _trainer(
        tmp_path,
        constant_reward,
        _dataset(16),
        zero_variance_filter="resample",
        total_training_steps=2,
        max_resample_rounds=2,
    )
    trainer.train()  # bounded: 2 steps × (1 + 2) generation rounds (resample_rounds below)

    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert trainer.state.global_step == 2 and len(logs) == 2
    for entry in logs:
        assert entry["zero_variance/resample_rounds"] == 2
        assert entry["zero_variance/prompts_drawn"] == 8  # 2 rounds × 4 prompts
        assert entry["zero_variance/shortfall_groups"] == 4  # every group of the step
        assert entry["zero_variance/frac_uniform_after"] == 1.0
        assert entry["zero_variance/no_update"] == 1.0
    assert trainer.zero_variance.skipped_updates == 2
