"""Why a uniform group was uniform (`zero_variance.causes`): all cut, all right, all wrong or tied, on hand-built rewards
and lengths; the closing line's advice; and the trl#5697 case on the tiny model (max_completion_length too short)."""

from __future__ import annotations

import re

import pytest
import torch
from factories import count_char_mix, tiny_trainer

from trl_grpo_ext.zero_variance.causes import RewardRange, cause_shares, declared_range, uniform_causes
from trl_grpo_ext.zero_variance.report import CAUSE_KEYS, cause_sentence, run_summary, summary_line


def test_the_four_causes_on_hand_built_groups():
    # G = 4, a 0/1 reward (declared range (0, 1)). Groups:
    #   0: [1, 1, 1, 1], two cut               -> right (not every completion cut)
    #   1: [0, 0, 0, 0], none cut              -> wrong
    #   2: [0, 0, 0, 0], all four cut          -> cut (checked first: the length limit zeroed the rewards)
    #   3: [0, 1, 0, 0]                        -> informative (None)
    #   4: [0.5, 0.5, 0.5, 0.5]                -> tied (neither extreme of the declared range)
    #   5: [1, 1, 1, 1], all four cut          -> cut, whatever the reward
    judged = torch.tensor([1., 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, .5, .5, .5, .5, 1, 1, 1, 1])
    uniform = torch.tensor([True] * 12 + [False] * 4 + [True] * 8)
    truncated = torch.tensor([1, 1, 0, 0] + [0] * 4 + [1] * 4 + [0] * 4 + [0] * 4 + [1] * 4).bool()
    reward_range = RewardRange((0.0, 1.0))
    reward_range.update(judged)
    causes = uniform_causes(judged, uniform, truncated, [4] * 6, reward_range)
    assert causes == ["right", "wrong", "cut", None, "tied", "cut"]
    # shares of all 6 groups: 1 wrong, 1 right, 2 cut, 1 tied (5 uniform of 6)
    assert cause_shares(causes) == {CAUSE_KEYS["wrong"]: 1 / 6, CAUSE_KEYS["right"]: 1 / 6,
                                    CAUSE_KEYS["cut"]: 2 / 6, CAUSE_KEYS["tied"]: 1 / 6}


def test_without_a_declared_range_the_runs_extremes_decide():
    reward_range = RewardRange()
    reward_range.update(torch.tensor([0.0, 0.0, float("nan")]))
    assert (reward_range.low, reward_range.high) == (0.0, 0.0)
    assert reward_range.cause(0.0) == "wrong"  # one value seen, not positive: a 0/1 reward never yet right
    reward_range.update(torch.tensor([3.0, 1.5]))
    assert [reward_range.cause(v) for v in (3.0, 0.0, 1.5)] == ["right", "wrong", "tied"]
    # unscored groups (every reward None) are tied, never right or wrong
    groups = uniform_causes(torch.full((2,), float("nan")), torch.ones(2, dtype=torch.bool),
                            torch.zeros(2, dtype=torch.bool), [2], reward_range)
    assert groups == ["tied"]


def test_declared_range_of_the_weighted_total_and_of_one_reward():
    class ZeroOne:
        value_range = (0.0, 1.0)

    class Unknown:
        pass

    # accuracy weight 1, a format reward weight 0.25: total in [0, 1.25]; a negative weight flips its ends
    assert declared_range([ZeroOne(), ZeroOne()], [1.0, 0.25], None) == (0.0, 1.25)
    assert declared_range([ZeroOne(), ZeroOne()], [1.0, -0.5], None) == (-0.5, 1.0)
    assert declared_range([ZeroOne(), Unknown()], [1.0, 1.0], None) is None  # one unknown: the run's extremes
    assert declared_range([Unknown(), ZeroOne()], [1.0, 1.0], 1) == (0.0, 1.0)  # zero_variance_reward: that one


def test_the_closing_line_names_the_dominant_cause_and_its_fix():
    # two logged steps of 4 groups: step 1 three all wrong of 4; step 2 two all wrong, one all right -> over 8 groups
    # 5/8 wrong, 1/8 right, 0 cut: wrong is 5 of the 6 uniform groups, so its fix is named
    logs = [{"step": 1, "loss": 0.0, "zero_variance/frac_uniform_before": 0.75, CAUSE_KEYS["wrong"]: 0.75,
             CAUSE_KEYS["right"]: 0.0, CAUSE_KEYS["cut"]: 0.0, CAUSE_KEYS["tied"]: 0.0},
            {"step": 2, "loss": 0.0, "zero_variance/frac_uniform_before": 0.75, CAUSE_KEYS["wrong"]: 0.5,
             CAUSE_KEYS["right"]: 0.25, CAUSE_KEYS["cut"]: 0.0, CAUSE_KEYS["tied"]: 0.0}]
    summary = run_summary(logs)
    assert summary["causes"] == {"wrong": 0.625, "right": 0.125, "cut": 0.0, "tied": 0.0}
    sentence = cause_sentence(summary)
    assert sentence.startswith("why, of the groups generated: 62% all wrong, 12% all right, 0% cut; most uniform "
                               "groups were all wrong"), sentence
    assert "trl-grpo-ext eval --config <config> --k" in sentence and "rollout_budget: adaptive" in sentence
    # no cause with half of the uniform groups: the shares, no advice
    even = [dict(logs[0], **{CAUSE_KEYS["wrong"]: 0.25, CAUSE_KEYS["right"]: 0.25, CAUSE_KEYS["tied"]: 0.25})]
    assert cause_sentence(run_summary(even)) == "why, of the groups generated: 25% all wrong, 25% all right, 0% cut, 25% tied"
    # the benchmark's mask arm, seed 1: every completion formatted (0.2 × 1) and wrong (0): 3 of 3 groups tied at 0.2
    tied = [dict(logs[0], **{"zero_variance/frac_uniform_before": 1.0, CAUSE_KEYS["wrong"]: 0.0, CAUSE_KEYS["right"]: 0.0,
                             CAUSE_KEYS["tied"]: 1.0})]
    sentence = cause_sentence(run_summary(tied))
    assert sentence.startswith("why, of the groups generated: 0% all wrong, 0% all right, 0% cut, 100% tied; most "
                               "uniform groups were tied"), sentence
    assert "zero_variance_reward: <its name>" in sentence


def test_a_too_short_max_completion_length_is_named_as_the_cause(tmp_path, capsys):
    # trl#5697 on the tiny model: answer_phrase_format (0/1/0.5, declared (0, 1)) needs "The answer is N" at the end,
    # and 2 tokens cannot hold it: every reward 0, every group uniform; the cause is the length limit, not the model
    trainer = tiny_trainer(tmp_path, None, count_char_mix(4), prompts_per_step=4, num_generations=4,
                           micro_batch_size=16, total_training_steps=2, max_completion_length=2, seed=0,
                           rewards=["answer_phrase_format"])
    trainer.train()
    steps = [h for h in trainer.state.log_history if "reward" in h]
    # a group is cut only when all 4 completions hit the limit (a sampled EOS ends one early): most are
    assert all(h["reward"] == 0.0 and h["zero_variance/frac_uniform_before"] == 1.0 for h in steps)
    assert all(h[CAUSE_KEYS["cut"]] + h[CAUSE_KEYS["wrong"]] == 1.0 and h[CAUSE_KEYS["cut"]] >= 0.5 for h in steps)
    out = capsys.readouterr().out.splitlines()
    lines = [line for line in out if re.match(r"step \d+/2 ", line)]
    cut = [round(h[CAUSE_KEYS["cut"]] * 4) for h in steps]
    assert [re.search(r"\((\d) wrong, 0 right, (\d) cut\)", line).groups() for line in lines] == \
        [(str(4 - c), str(c)) for c in cut], lines
    line = summary_line(trainer.state.log_history, trainer.plan.prompts_per_generation, 1,
                        trainer.plan.max_completion_length)
    assert line in out  # a Python user's train() ends with it too, not only the recipe's
    assert "most uniform groups had every completion cut at max_completion_length" in line, line
    assert re.search(r"the longest 2, and \d+% were cut at max_completion_length=2; if the answers need more tokens, "
                     r"raise max_completion_length", line)
    assert sum(cut) / 8 == pytest.approx(run_summary(trainer.state.log_history)["causes"]["cut"])
