"""Uniform (σ = 0) groups: reported truthfully, dropped before the loss forward, skipped before rollout.

Every expected value here comes from the prompt text and the reward functions below, worked out by hand: prompts
whose target is "b" get a constant (uniform) reward, prompts whose target is "a" the completion's position in its
group (0, 1, 2, 3: never uniform).
"""

import json
import re

import pytest
import torch
from factories import count_char_mix, tiny_trainer
from transformers import TrainerCallback
from trl import GRPOTrainer

from trl_grpo_ext.zero_variance.report import CAUSE_KEYS, run_summary, summary_line

G = 4


def _is_b(prompt) -> bool:
    text = prompt if isinstance(prompt, str) else json.dumps(prompt)
    return "write b b" in text


def saturating_reward(completions, target, trainer_state, **kwargs):
    """Optimizer step 1: informative everywhere. Step 2: "b" groups 0.3 (uniform), "a" groups positions.
    Step 3: every group 0.2 (uniform). Step 4: "b" groups None (unscorable), "a" groups 0.2."""
    step = trainer_state.global_step
    out = []
    for i, t in enumerate(target):
        if step == 0:
            out.append(float(i % G))
        elif step == 1:
            out.append(0.3 if t == "b" else float(i % G))
        elif step == 2:
            out.append(0.2)
        else:
            out.append(None if t == "b" else 0.2)
    return out


def test_float32_noise_is_what_trl_misses():
    # the premise of the fix: eight float32 rewards of 0.2 / 0.3 have a computed std above isclose's atol (1e-8)
    for value in (0.2, 0.3):
        std = torch.full((8,), value).std()
        assert 1e-8 < float(std) < 1e-7
        assert not torch.isclose(std, torch.zeros(()))


def test_uniform_share_is_the_same_in_console_metrics_file_and_trainer_state(tmp_path, capsys):
    # 4 prompts (2 "a", 2 "b"), 4 per step: every step sees all four groups, so the shares are known exactly
    trainer = tiny_trainer(tmp_path, saturating_reward, count_char_mix(4), prompts_per_step=4, num_generations=G,
                           micro_batch_size=16, total_training_steps=4, max_completion_length=8, learning_rate=1e-3,
                           seed=0, zero_variance_filter="mask")
    trainer.train()
    trainer.save_state()
    expected_share = [0.0, 0.5, 1.0, 1.0]  # step 4: None groups and 0.2 groups are both uniform
    expected_no_update = [0.0, 0.0, 1.0, 1.0]

    state = json.loads((tmp_path / "trainer_state.json").read_text())
    steps = [h for h in state["log_history"] if "reward" in h]
    jsonl = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    jsonl = [h for h in jsonl if "reward" in h]
    for logged in (steps, jsonl):
        assert [h["step"] for h in logged] == [1, 2, 3, 4]
        assert [h["frac_reward_zero_std"] for h in logged] == expected_share
        assert [h["zero_variance/frac_uniform_before"] for h in logged] == expected_share
        assert [h["zero_variance/no_update"] for h in logged] == expected_no_update
    assert trainer.zero_variance.skipped_updates == 2
    # whether a group's 4 completions were the same tokens, recounted from the completions TRL logs
    assert all(h["zero_variance/frac_identical_groups"] in (0.0, 0.25, 0.5, 0.75, 1.0) for h in steps)
    # a step with no kept token has no token means: entropy (and the clip ratios) were logged 0.0 there, an entropy of
    # 0 reading as a deterministic policy (a breaker's finding); a step that trained has its real entropy
    assert [h["entropy"] is None for h in steps] == [False, False, True, True]
    assert all(h["entropy"] > 0 for h in steps[:2]) and steps[2]["clip_ratio/region_mean"] is None
    # the time each step spent generating, and the summary's share of it in uniform groups
    seconds = [h["zero_variance/generation_seconds"] for h in steps]
    assert all(value > 0 for value in seconds) and seconds == [h["zero_variance/generation_seconds"] for h in jsonl]
    assert run_summary(state["log_history"])["uniform_generation_seconds"] == pytest.approx(
        sum(value * share for value, share in zip(seconds, expected_share)))

    lines = [line for line in capsys.readouterr().out.splitlines() if re.match(r"step \d+/4 ", line)]
    assert len(lines) == 4
    assert "zero-std 0.00" in lines[0] and "no update" not in lines[0]
    assert "zero-std 0.50" in lines[1] and "no update" not in lines[1]
    for line in lines[2:]:
        assert "zero-std 1.00" in line and "no update: 4 of 4 groups uniform" in line, line


def per_prompt_constant(completions, target, **kwargs):
    """1.0 for every completion of a "b" prompt, 0.0 for an "a" prompt: each group uniform, the batch not."""
    return [1.0 if t == "b" else 0.0 for t in target]


def test_with_the_filter_off_and_batch_scaling_the_share_counts_groups_not_the_batch(tmp_path, capsys):
    # 4 prompts (2 "a", 2 "b") a step: every group uniform, the batch's std 0.5. TRL's frac_reward_zero_std judges
    # the batch under scale_rewards "batch" (0.0); the console, the closing line and the card count groups (1.0)
    trainer = tiny_trainer(tmp_path, per_prompt_constant, count_char_mix(4), prompts_per_step=4, num_generations=G,
                           micro_batch_size=16, total_training_steps=2, max_completion_length=8, seed=0,
                           zero_variance_filter="off", scale_rewards="batch")
    trainer.train()
    steps = [h for h in trainer.state.log_history if "reward" in h]
    assert [h["frac_reward_zero_std"] for h in steps] == [0.0, 0.0]  # TRL's meaning: the batch's std is not 0
    assert [h["zero_variance/frac_uniform_before"] for h in steps] == [1.0, 1.0]
    assert "zero_variance/no_update" not in steps[0]  # the optimizer stepped: the filter is off
    lines = [line for line in capsys.readouterr().out.splitlines() if re.match(r"step \d+/2 ", line)]
    assert len(lines) == 2 and all("zero-std 1.00" in line for line in lines), lines
    line = summary_line(trainer.state.log_history, 4)
    assert line.startswith("Uniform groups (σ = 0): 100% of the 8 groups generated (their generation: 100% of the "
                           "completions"), line
    assert ("; 2 of 2 steps had zero advantages (every group uniform; with zero_variance_filter off the optimizer "
            "still stepped); why, of the groups generated: ") in line, line
    # every uniform group has one cause (logged in this mode too): the shares add up to the uniform share
    for h in steps:
        assert sum(h[key] for key in CAUSE_KEYS.values()) == pytest.approx(h["zero_variance/frac_uniform_before"])


def test_plot_and_card_show_the_truthful_share(tmp_path):
    history = [{"step": 1, "reward": 0.1, "frac_reward_zero_std": 0.0},
               {"step": 2, "reward": 0.2, "frac_reward_zero_std": 1.0, "zero_variance/frac_uniform_before": 1.0,
                "zero_variance/no_update": 1.0},
               {"step": 3, "reward": 0.3, "frac_reward_zero_std": 0.25, "zero_variance/frac_uniform_before": 0.5,
                "zero_variance/no_update": 0.0}]
    assert run_summary(history) == {"uniform_share": 0.5, "completion_share": 0.5, "generations": 3, "no_update_steps": 1,
                                    "all_uniform_steps": 1, "exact": True, "filter_on": True, "extra_groups": 0,
                                    "steps": 3, "logged_steps": 3, "generation_seconds": 0.0,
                                    "uniform_generation_seconds": 0.0, "step_seconds": 0.0, "identical_share": None,
                                    "causes": None, "lengths": None, "budget": None}
    # logging_steps 2: each log is the mean of its 2 steps; 12 groups over 4 steps, 2 of them without an update
    every_two = [{"step": 2, "frac_reward_zero_std": 0.5, "zero_variance/no_update": 0.5},
                 {"step": 4, "frac_reward_zero_std": 1.0, "zero_variance/no_update": 0.5}]
    assert run_summary(every_two) == {"uniform_share": 0.75, "completion_share": 0.75, "generations": 4,
                                      "no_update_steps": 2,
                                      "all_uniform_steps": 2, "exact": False, "filter_on": True, "extra_groups": 0,
                                      "steps": 4, "logged_steps": 2, "generation_seconds": 0.0,
                                      "uniform_generation_seconds": 0.0, "step_seconds": 0.0, "identical_share": None,
                                      "causes": None, "lengths": None, "budget": None}
    assert summary_line(every_two, 3) == ("Uniform groups (σ = 0): 75% of the 12 groups generated (their generation: "
                                          "75% of the completions); 2 of 4 steps made no update")
    # filter off: TRL's figure only; an all-uniform step has zero advantages but still steps the optimizer
    off = [{"step": 1, "frac_reward_zero_std": 0.5}, {"step": 2, "frac_reward_zero_std": 1.0},
           {"step": 3, "frac_reward_zero_std": 1.0}]  # 2 + 4 + 4 of 12 groups (4 a step) uniform
    assert summary_line(off, 4) == ("Uniform groups (σ = 0): 83% of the 12 groups generated (their generation: 83% of "
                                    "the completions); 2 of 3 steps had zero advantages (every group uniform; with "
                                    "zero_variance_filter off the optimizer still stepped)")
    # logging_steps 2, steps 1 and 3 all uniform, 2 and 4 not: each log reads 0.5, so only a lower bound is known
    averaged = [{"step": 2, "loss": 0.0, "frac_reward_zero_std": 0.5}, {"step": 4, "loss": 0.0,
                                                                         "frac_reward_zero_std": 0.5}]
    assert summary_line(averaged, 2).endswith(
        "0 of 4 steps had zero advantages in the logs (a log averaging several steps may hide more: logging_steps "
        "1 counts each) (every group uniform; with zero_variance_filter off the optimizer still stepped)")


def test_the_summary_gives_the_seconds_spent_generating_uniform_groups():
    # logging_steps 2: each log averages 2 steps (one generation batch each). Step 2: mean 8 s, half the groups
    # uniform -> 16 s, 8 s of it uniform; step 4: mean 5 s, all uniform -> 10 s, 10 s uniform: 18 s of 26 s. The
    # training steps: mean step_time 15 s and 12.5 s over 2 steps each -> 55 s; 18 / 55 = 33%.
    logs = [{"step": 2, "frac_reward_zero_std": 0.5, "zero_variance/no_update": 0.5,
             "zero_variance/generation_seconds": 8.0, "step_time": 15.0},
            {"step": 4, "frac_reward_zero_std": 1.0, "zero_variance/no_update": 0.5,
             "zero_variance/generation_seconds": 5.0, "step_time": 12.5},
            {"step": 4, "train_runtime": 60.0, "train_loss": 0.0}]
    summary = run_summary(logs)
    assert (summary["generation_seconds"], summary["uniform_generation_seconds"], summary["step_seconds"]) == (
        26.0, 18.0, 55.0)
    assert summary_line(logs, 3) == ("Uniform groups (σ = 0): 75% of the 12 groups generated (their generation: 75% "
                                     "of the completions, 18.0 s of the 55.0 s of the training steps = 33%); 2 of 4 steps "
                                     "made no update")
    # a short run (a breaker read "0 s of the 0 s of the training steps = 17%"): the seconds get decimals
    short = [dict(row, **{"zero_variance/generation_seconds": row["zero_variance/generation_seconds"] / 100,
                          "step_time": row["step_time"] / 100}) for row in logs[:2]]
    assert "0.18 s of the 0.55 s of the training steps = 33%" in summary_line(short, 3)
    tenth = [dict(row, step_time=row["step_time"] / 10) for row in logs[:2]]  # 18 s of 5.5 s: one decimal
    assert "18.0 s of the 5.5 s of the training steps" in summary_line(tenth, 3)
    # a resumed run: its log_history holds every step's logs, its train_runtime only the resumed part's; the figure
    # reads the logs (a breaker's finding: '6 s of the 4 s of training = 157%')
    resumed = logs[:1] + [{"step": 2, "train_runtime": 30.0}] + logs[1:]
    assert run_summary(resumed)["step_seconds"] == 55.0
    # resample: the first round's share times every round's seconds would be wrong, so no figure
    drawn = [dict(row, **{"zero_variance/prompts_drawn": 3.0}) for row in logs[:2]]
    assert run_summary(drawn)["uniform_generation_seconds"] is None
    assert " s of the " not in summary_line(drawn, 3)


def test_generation_batches_are_counted_in_the_log_of_the_step_that_made_them():
    # steps_per_generation 2 (num_iterations 2), logging_steps 3: batches are generated at steps 1, 3, 5, so the log
    # of step 3 covers 2 of them and the log of step 6 one (a breaker's finding: rounding 3 / 2 counted 2 and 2)
    logs = [{"step": 3, "loss": 0.0, "frac_reward_zero_std": 0.5, "zero_variance/generation_seconds": 4.0},
            {"step": 6, "loss": 0.0, "frac_reward_zero_std": 1.0, "zero_variance/generation_seconds": 2.0}]
    summary = run_summary(logs, 2)
    assert summary["generations"] == 3 and summary["uniform_share"] == pytest.approx((0.5 * 2 + 1.0) / 3)
    assert summary["generation_seconds"] == 10.0 and summary["uniform_generation_seconds"] == 6.0  # 0.5 × 8 + 2
    assert summary["all_uniform_steps"] == 2  # the batch of step 5 served steps 5 and 6


def test_the_summary_counts_generation_batches_and_every_step_s_update():
    # num_iterations 2: 4 optimizer steps, 2 generation batches of 2 groups; the first batch all uniform, so its 2
    # steps made no update; the reward figures are logged on the generation steps only (1 and 3)
    mu_two = [{"step": 1, "loss": 0.0, "frac_reward_zero_std": 1.0, "zero_variance/frac_uniform_before": 1.0,
               "zero_variance/no_update": 1.0},
              {"step": 2, "loss": 0.0, "zero_variance/no_update": 1.0},
              {"step": 3, "loss": 0.1, "frac_reward_zero_std": 0.0, "zero_variance/frac_uniform_before": 0.0,
               "zero_variance/no_update": 0.0},
              {"step": 4, "loss": 0.1, "zero_variance/no_update": 0.0}]
    assert summary_line(mu_two, 2, steps_per_generation=2) == (
        "Uniform groups (σ = 0): 50% of the 4 groups generated (their generation: 50% of the completions); 2 of 4 "
        "steps made no update")
    # resample: the share is the first round's (2 steps × 4 groups, 4 uniform at step 1), 4 more groups drawn
    resample = [{"step": 1, "loss": 0.0, "zero_variance/frac_uniform_before": 1.0, "zero_variance/prompts_drawn": 4.0,
                 "zero_variance/no_update": 0.0},
                {"step": 2, "loss": 0.0, "zero_variance/frac_uniform_before": 0.0, "zero_variance/prompts_drawn": 0.0,
                 "zero_variance/no_update": 0.0}]
    assert summary_line(resample, 4) == ("Uniform groups (σ = 0): 50% of the 8 groups generated first (resampling "
                                         "generated 4 more groups to replace them); 0 of 2 steps made no update")


# --- dropped rows: the gradient of masking, without the forward/backward of the masked rows -----------------------------
def position_reward(completions, target, **kwargs):
    return [1.0 if t == "b" else float(i % G) for i, t in enumerate(target)]


class _Grads(TrainerCallback):
    def __init__(self, trainer):
        self.trainer, self.grads = trainer, []

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self.grads.append({n: p.grad.clone() for n, p in self.trainer.model.named_parameters() if p.grad is not None})


@pytest.mark.parametrize("loss_type, micro_batch_size", [("dapo", 16), ("bnpo", 8), ("grpo", 8), ("dr_grpo", 8),
                                                         ("grpo", 16)])
def test_dropped_rows_give_the_masked_gradient(tmp_path, loss_type, micro_batch_size):
    # 2 "b" (uniform) and 2 "a" groups per step: 8 of 16 rows masked. The reference is today's mask: TRL's loss of
    # the whole micro-batch (masked rows weighted 0) times the filter's loss scale.
    trainer = tiny_trainer(tmp_path, position_reward, count_char_mix(4), prompts_per_step=4, num_generations=G,
                           micro_batch_size=micro_batch_size, total_training_steps=2, max_completion_length=8,
                           learning_rate=1e-3, seed=0, zero_variance_filter="mask", loss_type=loss_type,
                           max_grad_norm=0.0)
    capture = _Grads(trainer)
    trainer.add_callback(capture)
    reference, rows_seen = [], []
    ours = trainer._compute_loss
    trl_loss = GRPOTrainer._compute_loss

    def spy(self, model, inputs):
        rows_seen.append(inputs["completion_ids"].size(0))
        return trl_loss(self, model, inputs)

    def compute_loss(model, inputs):
        params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        masked = trl_loss(trainer, model, inputs) * inputs["zero_variance_loss_scale"]
        grads = torch.autograd.grad(masked, [p for _, p in params], allow_unused=True)
        reference.append({n: g for (n, _), g in zip(params, grads) if g is not None})
        GRPOTrainer._compute_loss = spy
        try:
            return ours(model, inputs)
        finally:
            GRPOTrainer._compute_loss = trl_loss

    trainer._compute_loss = compute_loss
    trainer.train()

    per_step = 16 // micro_batch_size
    assert len(capture.grads) == 2 and len(reference) == 2 * per_step
    for step, grads in enumerate(capture.grads):
        windows = reference[step * per_step:(step + 1) * per_step]
        for name, grad in grads.items():
            expected = sum(w[name] for w in windows if name in w)
            torch.testing.assert_close(grad, expected, rtol=1e-6, atol=1e-6, msg=name)
    # TRL's loss saw only the kept rows (8 of 16 per step; a micro-batch keeps at least one row)
    assert sum(rows_seen) < 16 * 2 and sum(rows_seen) >= 8 * 2
    if micro_batch_size == 16:
        assert rows_seen == [8, 8]
    logged = [h["zero_variance/completions_dropped"] for h in trainer.state.log_history if "reward" in h]
    assert logged == [32 - sum(rows_seen[:per_step]) - 16, 32 - sum(rows_seen[per_step:]) - 16]


def test_an_all_uniform_micro_batch_keeps_one_row_and_makes_no_update(tmp_path):
    trainer = tiny_trainer(tmp_path, lambda completions, **kw: [0.2] * len(completions), count_char_mix(4),
                           prompts_per_step=4, num_generations=G, micro_batch_size=8, total_training_steps=1,
                           max_completion_length=8, learning_rate=1e-3, seed=0, zero_variance_filter="mask")
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    (log,) = [h for h in trainer.state.log_history if "reward" in h]
    assert log["zero_variance/completions_dropped"] == 14  # two micro-batches of 8, each keeps one masked row
    assert log["zero_variance/no_update"] == 1.0
    for name, value in trainer.model.named_parameters():
        assert torch.equal(value, before[name]), name


def test_eval_loop_counts_uniform_groups_truthfully(tmp_path):
    # TRL's eval loop logs eval_frac_reward_zero_std with the same isclose: every held-out group below scores 0.2
    # (uniform), half of them through None rewards
    def reward(completions, target, **kwargs):
        return [None if t == "b" else 0.2 for t in target]

    trainer = tiny_trainer(tmp_path, reward, count_char_mix(4), prompts_per_step=4, num_generations=G,
                           micro_batch_size=16, total_training_steps=1, max_completion_length=8, seed=0,
                           per_device_eval_batch_size=16)
    metrics = trainer.evaluate(count_char_mix(4))
    assert metrics["eval_frac_reward_zero_std"] == 1.0


def test_the_summary_says_how_many_groups_were_identical_completions():
    # a collapsed sampler (the policy answers one way) makes a group uniform whatever the reward: the bench-vs-trl
    # seeds 4 and 5 ended with 12-token replies, identical in most groups; no prompt selection helps there
    from trl_grpo_ext.zero_variance.groups import identical_group_fraction
    from trl_grpo_ext.zero_variance.report import summary_line

    ids = [[5, 6, 2], [5, 6, 2], [5, 6, 2], [5, 6, 2], [7, 2], [7, 2], [7, 2], [8, 2]]  # G = 4: identical, not
    assert identical_group_fraction(ids, lambda t: t, 4) == 0.5
    assert identical_group_fraction([torch.tensor(i) for i in ids], lambda t: t, 4) == 0.5
    logs = [{"step": 1, "frac_reward_zero_std": 0.5, "zero_variance/frac_identical_groups": 0.0,
             "zero_variance/no_update": 0.0},
            {"step": 2, "frac_reward_zero_std": 1.0, "zero_variance/frac_identical_groups": 0.5,
             "zero_variance/no_update": 1.0}]
    assert summary_line(logs, 4) == ("Uniform groups (σ = 0): 75% of the 8 groups generated (their generation: 75% of "
                                     "the completions); 25% of the 8 groups were identical completions (a collapsed "
                                     "sampler); 1 of 2 steps made no update")
