"""A rollout budget per prompt (``rollout_budget: adaptive``): the allocation rule on hand-worked values, advantages over
groups of unequal size, and training steps of the tiny model that split each step's completions as worked out here."""

from __future__ import annotations

import re

import pytest
import torch
from factories import count_char_mix, tiny_trainer

from trl_grpo_ext import GRPOExtConfig
from trl_grpo_ext.advantages import compute_advantages
from trl_grpo_ext.config.advantage_settings import AdvantageSettings
from trl_grpo_ext.zero_variance.budget import (
    PassRateHistory,
    allocate_completions,
    completion_value,
    estimate_pass_rates,
    grouped_advantages,
)
from trl_grpo_ext.zero_variance.groups import zero_variance_group_mask
from trl_grpo_ext.zero_variance.report import budget_note, card_rows, run_summary, summary_line

G = 4


def test_the_value_and_the_greedy_allocation_by_hand():
    # V(n, p) = (1 - p)(1 - p^n - (1 - p)^n). p = 0.25: V(2) = 0.75 · (1 - 0.0625 - 0.5625) = 0.28125
    assert completion_value(2, 0.25) == pytest.approx(0.28125)
    # Two prompts at p = 0.25 (hard) and 0.75 (easy), 2 completions each, 4 more to give. Gains of one more:
    #   hard: n 2->3: 0.75 · ((.25² - .25³) + (.75² - .75³)) = 0.75 · 0.1875    = 0.140625
    #         n 3->4: 0.75 · ((.25³ - .25⁴) + (.75³ - .75⁴)) = 0.75 · 0.1171875 = 0.087890625
    #         n 4->5: 0.75 · 0.08203125                                         = 0.0615234375
    #         n 5->6: 0.75 · 0.06005859375                                      = 0.0450439453
    #   easy: n 2->3: 0.25 · 0.1875                                             = 0.046875
    # the three largest gains are the hard prompt's, the fourth the easy one's (0.046875 > 0.04504): 5 and 3
    assert allocate_completions([0.25, 0.75], 4, 2) == [5, 3]
    assert sum(allocate_completions([0.01, 0.3, 0.6, 0.99], 16, 2)) == 4 * 2 + 16  # the plan's total, always
    assert allocate_completions([0.2, 0.2, 0.2, 0.2], 8, 2) == [4, 4, 4, 4]  # no information: G each
    # every estimate 0 (nothing scored above 0 yet): V(n, 0) = 0, every gain ties; was [10, 2, 2, 2] (a TRL user's find)
    assert allocate_completions([0.0, 0.0, 0.0, 0.0], 8, 2) == [4, 4, 4, 4]


def test_pass_rate_estimate_and_its_prior():
    history = PassRateHistory()
    assert history.prior(7) == 0.5  # nothing seen: the run's mean defaults to one half
    history.observe(7, [0.0] * 5)
    history.observe(9, [1.0] * 3)
    # the run's mean 3 / 8 = 0.375; prompt 7: (0 + 2 · 0.375) / (5 + 2) = 0.75 / 7; an unseen prompt: 0.375
    assert history.prior(7) == pytest.approx(0.75 / 7) and history.prior(1) == pytest.approx(0.375)
    # first-round scores [0, 0] with that prior: (0 + 2 · 0.75 / 7) / 4
    assert estimate_pass_rates([[0.0, 0.0]], [history.prior(7)]) == [pytest.approx(1.5 / 7 / 4)]
    restored = PassRateHistory()
    restored.load_state_dict(history.state_dict())
    assert restored.prompts == history.prompts and restored.total == history.total


def test_advantages_over_unequal_groups_equal_each_group_on_its_own():
    rewards = torch.tensor([0.0, 1.0, 1.0, 1.0, 0.0, 0.5, 0.5])  # groups of 4, 1 (alone), 2
    sizes = [4, 1, 2]
    for settings in (AdvantageSettings(), AdvantageSettings(baseline="leave_one_out", std_scaling="none"),
                     AdvantageSettings(std_scaling="batch")):
        ours = grouped_advantages(rewards, sizes, settings)
        if settings.std_scaling == "batch":  # one σ over the batch: the 7 rewards' sample std
            sigma = rewards.std()
            expected = torch.cat([(rewards[:4] - 0.75) / (sigma + 1e-4), torch.zeros(3)])
        else:
            expected = torch.cat([compute_advantages(rewards[:4], 4, settings), torch.zeros(1),
                                  compute_advantages(rewards[5:], 2, settings)])
        torch.testing.assert_close(ours, expected)
    # group 0 by hand (GRPO): mean 0.75, sample std 0.5 -> [-1.5, 0.5, 0.5, 0.5] / (1 + 2e-4)
    torch.testing.assert_close(grouped_advantages(rewards, sizes, AdvantageSettings())[:4],
                               torch.tensor([-0.75, 0.25, 0.25, 0.25]) / (0.5 + 1e-4))
    # uniform groups by size: [0 1 1 1] informative, [0] alone (fewer than 2), [0.5 0.5] equal
    assert zero_variance_group_mask(rewards, 4, sizes=sizes).tolist() == [False] * 4 + [True] * 3


def solved_b(completions, target, **kwargs):
    """1.0 for every completion of a "b" prompt (solved), 0.0 for an "a" prompt (hard)."""
    return [1.0 if t == "b" else 0.0 for t in target]


def test_training_steps_split_the_completions_as_worked_out(tmp_path, capsys):
    # 2 prompts a step ("a" hard: reward 0; "b" solved: reward 1), G = 4: 8 completions a step in two rounds.
    # Step 1: first round 2 each; no history, prior 0.5: p_a = (0 + 1) / 4 = 0.25, p_b = (2 + 1) / 4 = 0.75
    #   -> [5, 3] (test_the_value_and_the_greedy_allocation_by_hand).
    # Step 2: the history holds a: 0 of 5, b: 3 of 3; run mean 3 / 8. Priors a: (0 + 0.75) / 7 = 0.107,
    #   b: (3 + 0.75) / 5 = 0.75; first rounds [0, 0] and [1, 1]: p_a = 0.214 / 4 = 0.0536, p_b = (2 + 1.5) / 4 = 0.875.
    #   Gains: a from 2: 0.946 · (0.0536² · 0.946 + 0.946² · 0.0536) = 0.0480, then 0.0431, 0.0407, 0.0385;
    #   b from 2: 0.125 · (0.875² · 0.125 + 0.125² · 0.875) = 0.0137: all 4 go to a -> [6, 2]
    trainer = tiny_trainer(tmp_path, solved_b, count_char_mix(2), prompts_per_step=2, num_generations=G,
                           micro_batch_size=8, total_training_steps=2, max_completion_length=16, seed=0,
                           zero_variance_filter="mask", rollout_budget="adaptive")
    sizes = []
    generate = trainer.rollout.generate

    def record(inputs, marks):
        output, step_sizes = generate(inputs, marks)
        targets = [row["target"] for row in inputs[::G]]
        sizes.append(dict(zip(targets, step_sizes)))
        assert len(output["completion_ids"]) == 2 * G  # the plan's batch shape
        return output, step_sizes

    trainer.rollout.generate = record
    trainer.train()
    assert sizes == [{"a": 5, "b": 3}, {"a": 6, "b": 2}]
    logs = [h for h in trainer.state.log_history if "reward" in h]
    assert [(h["zero_variance/completions_per_prompt_min"], h["zero_variance/completions_per_prompt_max"])
            for h in logs] == [(3.0, 5.0), (2.0, 6.0)]
    # TRL's reward of the trained batch: step 1 has 3 of 8 completions at 1.0, step 2 has 2 of 8
    assert [h["reward"] for h in logs] == [0.375, 0.25]
    # the console, the closing line and the card give the range actually given
    out = capsys.readouterr().out
    assert "rollout_budget=adaptive: each step still generates 8 completions, in two rounds: 2 per prompt first" in out
    lines = [line for line in out.splitlines() if re.match(r"step \d+/2 ", line)]
    assert ["completions/prompt 3-5" in lines[0], "completions/prompt 2-6" in lines[1]] == [True, True], lines
    summary = run_summary(trainer.state.log_history)
    assert "; completions per prompt 2 to 6 (rollout_budget: adaptive)" in summary_line(trainer.state.log_history, 2)
    rows = dict(card_rows(summary))
    assert rows["completions per prompt, fewest to most"] == "2 to 6" and "V(n, p)" in rows["rollout budget rule"]
    # the history a checkpoint keeps: a 0 of 11, b 5 of 5
    history = trainer.zero_variance.state_dict()["pass_rates"]
    assert sorted(history["prompts"].values()) == [[0.0, 11.0], [5.0, 5.0]] and history["total"] == [5.0, 16.0]


def test_filter_off_with_a_judged_reward_counts_no_gradient_over_the_unequal_groups(tmp_path):
    # the run above with the filter off and solved_b judged: groups [5, 3] then [6, 2], both uniform in the weighted
    # total each step, so every completion has advantage 0 (taken as groups of G = 4, rows 4-7 would mix a and b)
    trainer = tiny_trainer(tmp_path, solved_b, count_char_mix(2), prompts_per_step=2, num_generations=G,
                           micro_batch_size=8, total_training_steps=2, max_completion_length=16, seed=0,
                           zero_variance_filter="off", rollout_budget="adaptive", zero_variance_reward="solved_b")
    trainer.train()
    logs = [h for h in trainer.state.log_history if "reward" in h]
    assert [h["zero_variance/frac_completions_no_gradient"] for h in logs] == [1.0, 1.0]


def test_the_closing_line_counts_the_completions_of_unequal_groups():
    # one step, 2 prompts given [2, 6] completions; the 2-completion group uniform: 1 of 2 groups, 2 of 8 completions
    # (a README follower's find: the line gave the group share, 50%, as the completions' share)
    logs = [{"step": 1, "loss": 0.0, "zero_variance/frac_uniform_before": 0.5, "zero_variance/no_update": 0.0,
             "zero_variance/frac_completions_uniform": 0.25, "zero_variance/generation_seconds": 4.0, "step_time": 8.0}]
    assert summary_line(logs, 2).startswith("Uniform groups (σ = 0): 50% of the 2 groups generated (their generation: "
                                            "25% of the completions, 1.0 s of the 8.0 s of the training steps = 12%)")


@pytest.mark.parametrize("change, message", [
    ({"zero_variance_filter": "skip", "total_epochs": 3, "total_training_steps": 12},
     "zero_variance_filter='skip' chooses which prompts are rolled out"),
    ({"num_generations": 2, "micro_batch_size": 4}, "fewer than 2"),
    ({"micro_batch_size": 2, "gradient_accumulation_steps": None},
     None),
])
def test_refused_before_any_model_loads(tmp_path, change, message):
    fields = dict(output_dir=str(tmp_path), use_cpu=True, bf16=False, prompts_per_step=2, num_generations=G,
                  micro_batch_size=8, total_training_steps=2, rollout_budget="adaptive", rewards=["char_fraction"])
    fields.update({k: v for k, v in change.items() if v is not None})
    if message is None:  # 2 completions per micro-batch, 4 micro-batches: whole groups on the one process, accepted
        assert GRPOExtConfig(**fields).resolved.zero_variance.rollout_budget == "adaptive"
        return
    with pytest.raises(ValueError, match=message):
        GRPOExtConfig(**fields)


def test_plan_note_states_the_rule_and_the_range():
    from types import SimpleNamespace

    plan = SimpleNamespace(prompts_per_step=4, num_generations=8, completions_per_step=32)
    note = budget_note(plan)
    # 4 per prompt first (G / 2), the other 4 × 4 = 16 by the value rule: a prompt gets 4 to 4 + 16 = 20
    assert "each step still generates 32 completions, in two rounds: 4 per prompt first" in note
    assert "the other 16 one at a time" in note and "a prompt gets 4 to 20 completions" in note
    assert "V(n, p) = (1 - p)(1 - p^n - (1 - p)^n)" in note


def test_an_odd_number_of_prompts_splits_too(tmp_path):
    # 3 prompts, G 4: each round holds 3 × 2 = 6 completions, which TRL's own group reshape (rows of G = 4) cannot take;
    # each round runs with TRL's num_generations set to its own size (2), restored after
    trainer = tiny_trainer(tmp_path, solved_b, count_char_mix(3), prompts_per_step=3, num_generations=G,
                           micro_batch_size=12, total_training_steps=1, max_completion_length=8, seed=0,
                           zero_variance_filter="mask", rollout_budget="adaptive")
    trainer.train()
    assert trainer.num_generations == G and trainer.state.global_step == 1
    logs = [h for h in trainer.state.log_history if "reward" in h]
    assert logs[0]["zero_variance/completions_per_prompt_min"] >= 2
    assert sum(trainer.zero_variance.pass_rates.total[1:]) == 3 * G  # every completion of the step recorded


def test_the_console_range_says_when_a_log_averages_several_steps():
    from trl_grpo_ext.training.console import step_line

    one = {"reward": 0.5, "reward_std": 0.1, "zero_variance/completions_per_prompt_min": 3.0,
           "zero_variance/completions_per_prompt_max": 5.0}
    assert "completions/prompt 3-5  " in step_line(one, 3, 9, None, 4, 1)
    # logging_steps 2: TRL logs the mean of each step's fewest and most (3-5 then 4-4): not a range of one step
    two = dict(one, **{"zero_variance/completions_per_prompt_min": 3.5, "zero_variance/completions_per_prompt_max": 4.5})
    assert "completions/prompt 3.5-4.5 (means of 2 steps' fewest-most)" in step_line(two, 4, 8, None, 4, 2)
