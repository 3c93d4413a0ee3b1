"""`ZeroVarianceFilter` on plain tensors: no trainer, no accelerate; gather / reduce are plain functions.

Also the group mask with a tolerance and the settings checks of the unit. Every expected value is worked out by hand
in the comments.
"""

import math
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

from trl_grpo_ext.zero_variance import (
    ZeroVarianceFilter,
    check_zero_variance_settings,
    judged_reward_index,
    zero_variance_group_mask,
)

PAD, EOS = 0, 9


def _mask_batch():
    # 6 rows, completion lengths 3, 2, 1, 3, 2, 1 (right-padded to 3): 12 tokens
    lengths = [3, 2, 1, 3, 2, 1]
    return {
        "advantages": torch.zeros(6),
        "completion_mask": torch.tensor([[1] * n + [0] * (3 - n) for n in lengths]),
        "num_items_in_batch": torch.tensor(12),
    }


# G = 2, one reward function of weight 1: groups (1, 1) zero variance, (0, 1) informative, (2, 2) zero variance
MASK_REWARDS = torch.tensor([[1.0], [1.0], [0.0], [1.0], [2.0], [2.0]])


def test_mask_mode_on_one_process():
    metrics = defaultdict(list)
    zv = ZeroVarianceFilter("mask", 2, torch.tensor([1.0]), loss_type="grpo", metrics=lambda: metrics)
    output, rewards, zero_variance = zv.select(_mask_batch(), MASK_REWARDS, [], {}, generate_round=None)
    assert rewards.tolist() == [1.0, 1.0, 0.0, 1.0, 2.0, 2.0]
    assert zero_variance.tolist() == [True, True, False, False, True, True]
    kept = zv.kept_rows(zero_variance)
    zv.mask(output, kept, zv.local_rows(6))
    assert output["tool_mask"][:, 0].tolist() == [0, 0, 1, 1, 0, 0]
    assert int(output["num_items_in_batch"]) == 1 + 3  # the kept rows' tokens
    assert output["zero_variance_keep"].tolist() == [0.0, 0.0, 1.0, 1.0, 0.0, 0.0]
    assert float(output["zero_variance_loss_scale"]) == 3.0  # grpo: 6 rows / 2 kept
    assert dict(metrics) == {
        "zero_variance/frac_uniform_before": [pytest.approx(4 / 6)],  # a float32 mean
        # the run's rewards span [0, 2] (no declared range): (2, 2) is all right, (1, 1) tied
        "zero_variance/frac_uniform_wrong": [0.0], "zero_variance/frac_uniform_right": [pytest.approx(1 / 3)],
        "zero_variance/frac_uniform_cut": [0.0], "zero_variance/frac_uniform_tied": [pytest.approx(1 / 3)],
        "zero_variance/frac_completions_uniform": [pytest.approx(4 / 6)],  # equal groups: the same share
        "zero_variance/completions_masked": [4.0],
        "zero_variance/frac_uniform_after": [pytest.approx(2 / 3)],  # 2 of the 3 groups masked
    }


def test_mask_mode_on_the_second_of_two_processes():
    # both processes hold the same local batch (a symmetric stand-in for accelerate's gather): 12 gathered rows
    def gather(t):
        return torch.stack([t, t]) if t.ndim == 0 else torch.cat([t, t])

    zv = ZeroVarianceFilter("mask", 2, torch.tensor([1.0]), loss_type="dapo", gather=gather, process_index=1,
                            num_processes=2)
    output = _mask_batch()
    zero_variance = zv.judge(torch.cat([MASK_REWARDS, MASK_REWARDS]))
    local = zv.local_rows(6)
    assert (local.start, local.stop) == (6, 12)
    zv.mask(output, zv.kept_rows(zero_variance), local)
    assert int(output["num_items_in_batch"]) == 2 * 4  # kept tokens of both processes
    assert float(output["zero_variance_loss_scale"]) == 1.0  # dapo is token-normalised
    assert zv.own_metrics["zero_variance/completions_masked"] == [8.0]


def test_loss_rescale_skip_and_guarded_step():
    zv = ZeroVarianceFilter("mask", 2, torch.tensor([1.0]), reduce=lambda t: t + 0)
    loss = zv.scale_loss(torch.tensor(0.5), {"zero_variance_keep": torch.tensor([0.0, 0.0]),
                                             "zero_variance_loss_scale": torch.tensor(3.0)})
    assert float(loss) == 1.5
    assert float(zv.scale_loss(torch.tensor(0.5), {})) == 0.5  # a batch the filter did not see
    zv.end_window()  # nothing kept in the window: the next optimizer step is skipped
    calls = []
    step = zv.guard_step(lambda: calls.append("step") or "stepped")
    assert step() is None and calls == [] and zv.own_metrics["zero_variance/no_update"] == [1.0]
    assert step() == "stepped" and calls == ["step"]
    zv.scale_loss(torch.tensor(0.5), {"zero_variance_keep": torch.tensor([1.0, 0.0]),
                                      "zero_variance_loss_scale": torch.tensor(2.0)})
    zv.end_window()  # one row kept: no skip
    assert step() == "stepped" and zv.skipped_updates == 1


def _resample_batch():
    return {
        "prompt_ids": torch.tensor([[1, 2], [1, 2], [3, 4], [3, 4]]),
        "prompt_mask": torch.ones(4, 2, dtype=torch.long),
        "completion_ids": torch.tensor([[5, EOS], [6, EOS], [7, 8], [8, PAD]]),
        "completion_mask": torch.tensor([[1, 1], [1, 1], [1, 1], [1, 0]]),
        "advantages": torch.zeros(4),
        "num_items_in_batch": torch.tensor(7),
    }


def test_resample_replaces_a_group_and_logs_the_trained_batch(tmp_path):
    # G = 2, 2 groups: (1, 1) zero variance, (0, 1) informative. The estimate p starts at 1/2; the round size for 1
    # missing group at p = 1/2 (not the last round) is 1 prompt (2 would waste 0.25 > 0.05). The round returns the
    # informative group (0, 2), which replaces group 0.
    metrics = defaultdict(list)
    metrics["reward"] = [9.0, 0.5]  # 9.0 from an earlier batch (mark 1); 0.5: TRL's value of this batch's generation
    drawn = []

    def generate_round(indices):
        drawn.append(list(indices))
        metrics["reward"].append(1.0)  # TRL's value of the extra round
        extra = {
            "prompt_ids": torch.tensor([[7, 7], [7, 7]]),
            "prompt_mask": torch.ones(2, 2, dtype=torch.long),
            "completion_ids": torch.tensor([[3, EOS], [4, 4]]),
            "completion_mask": torch.ones(2, 2, dtype=torch.long),
            "advantages": torch.zeros(2),
            "num_items_in_batch": torch.tensor(4),
        }
        return extra, torch.tensor([[0.0], [2.0]]), [[3, EOS], [4, 4]]

    zv = ZeroVarianceFilter("resample", 2, torch.tensor([1.0]), max_rounds=2, dataset_size=4, seed=0,
                            reward_names=["r"], eos_and_pad={EOS, PAD}, pad_token_id=PAD, metrics=lambda: metrics)
    output, rewards, zero_variance = zv.select(
        _resample_batch(), torch.tensor([[1.0], [1.0], [0.0], [1.0]]), [[5, EOS], [6, EOS], [7, 8], [8]],
        {"reward": 1}, generate_round)
    assert len(drawn) == 1 and len(drawn[0]) == 1 and 0 <= drawn[0][0] < 4
    assert rewards.tolist() == [0.0, 2.0, 0.0, 1.0] and not zero_variance.any()
    assert output["completion_ids"].tolist() == [[3, EOS], [4, 4], [7, 8], [8, PAD]]
    assert output["prompt_ids"][:2].tolist() == [[7, 7], [7, 7]]
    assert not any(key.startswith("zero_variance_") for key in output)  # the carried row figures are removed
    # estimate: (1 of 2 groups) then (0 of 1): U = 0.9·1 + 0 = 0.9, N = 0.9·2 + 1 = 2.8
    assert metrics["zero_variance/uniform_fraction_estimate"] == [pytest.approx(0.9 / 2.8)]
    assert metrics["zero_variance/resample_rounds"] == [1.0] and metrics["zero_variance/prompts_drawn"] == [1.0]
    assert metrics["zero_variance/shortfall_groups"] == [0.0]
    assert metrics["zero_variance/frac_uniform_before"] == [0.5]
    # TRL's metrics of the trained batch [0, 2, 0, 1]: mean 0.75; sample std sqrt(2.75 / 3); groups (0, 2), (0, 1)
    # both informative; lengths 2, 2, 2, 1; truncated (last token not EOS / pad): no, yes, yes, yes
    assert metrics["reward"] == [9.0, 0.75]  # this batch's TRL values replaced by the trained batch's
    assert metrics["zero_variance/rounds/reward"] == [0.5, 1.0]  # every round's TRL value, under its own name
    assert metrics["reward_std"] == [pytest.approx(math.sqrt(2.75 / 3))]
    assert metrics["rewards/r/mean"] == [0.75] and metrics["frac_reward_zero_std"] == [0.0]
    assert metrics["completions/mean_length"] == [1.75] and metrics["completions/clipped_ratio"] == [0.75]
    assert metrics["completions/mean_terminated_length"] == [2.0]
    # the state a checkpoint keeps, and its round trip
    assert zv.state_dict() == {"resample_cursor": 1, "uniform_fraction_estimate": {"uniform": 0.9, "groups": 2.8},
                               "reward_range": {"low": 0.0, "high": 1.0}}  # the first round's: (1, 1) all right
    assert zv.causes == ["right", None]
    zv.save_state(str(tmp_path))
    resumed = ZeroVarianceFilter("resample", 2, torch.tensor([1.0]), dataset_size=4, seed=0)
    resumed.load_state(str(tmp_path))
    assert resumed.state_dict() == zv.state_dict()
    resumed.load_state(None)  # no checkpoint: nothing to restore


def test_off_judges_but_changes_nothing():
    zv = ZeroVarianceFilter("off", 2, torch.tensor([1.0]))
    output, _, zero_variance = zv.select(_mask_batch(), MASK_REWARDS, [], {}, generate_round=None)
    assert not zv.enabled and zero_variance.sum() == 4 and zv.kept_rows(zero_variance).all()
    assert set(output) == {"advantages", "completion_mask", "num_items_in_batch"}
    # groups [1, 1], [0, 1], [2, 2]: two of three uniform. Logged with the filter off too: the console's share of
    # groups, which TRL's frac_reward_zero_std is not under scale_rewards "batch"
    # and why each uniform group was uniform: no reward range declared, the run's rewards span [0, 2], so [2, 2] is
    # all right and [1, 1] tied (neither extreme); no completion was cut
    assert zv.own_metrics == {"zero_variance/frac_uniform_before": [pytest.approx(2 / 3)],
                              "zero_variance/frac_uniform_wrong": [0.0],
                              "zero_variance/frac_uniform_right": [pytest.approx(1 / 3)],
                              "zero_variance/frac_uniform_cut": [0.0],
                              "zero_variance/frac_uniform_tied": [pytest.approx(1 / 3)],
                              "zero_variance/frac_completions_uniform": [pytest.approx(2 / 3)]}
    assert zv.causes == ["tied", None, "right"]
    assert zv.state_dict() == {"reward_range": {"low": 0.0, "high": 2.0}}


# --- the group mask with a tolerance -----------------------------------------------------------------------------------
def test_group_mask_tolerance_and_std_kind():
    rewards = torch.tensor([0.0, 0.0, 0.0, 1.0], dtype=torch.float64)  # sample σ = 0.5, population σ = sqrt(3)/4 = 0.433
    assert not zero_variance_group_mask(rewards, 4, tolerance=0.49).any()
    assert zero_variance_group_mask(rewards, 4, tolerance=0.5).all()  # <= tolerance
    assert not zero_variance_group_mask(rewards, 4, tolerance=0.45, std_kind="sample").any()
    assert zero_variance_group_mask(rewards, 4, tolerance=0.45, std_kind="population").all()


def test_judged_reward_column():
    # accuracy [0, 0] and format [1, 0]: the total (weights 1, 0.1) varies, accuracy alone does not
    zv = ZeroVarianceFilter("mask", 2, torch.tensor([1.0, 0.1]), judged_index=0)
    assert zv.judge(torch.tensor([[0.0, 1.0], [0.0, 0.0]])).tolist() == [True, True]
    assert not ZeroVarianceFilter("mask", 2, torch.tensor([1.0, 0.1])).judge(torch.tensor([[0.0, 1.0], [0.0, 0.0]])).any()


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"tolerance": -0.1}, r"tolerance=-0.1 must be a number >= 0"),
    ({"tolerance": math.inf}, r"tolerance=inf must be a number >= 0"),
    ({"std_kind": "biased"}, r"std_kind='biased' is not valid"),
])
def test_group_mask_refuses_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        zero_variance_group_mask(torch.zeros(4), 2, **kwargs)


# --- settings ----------------------------------------------------------------------------------------------------------
SETTINGS = {"zero_variance_filter": "mask"}
BATCH = dict(num_generations=4, generation_batch_size=None, steps_per_generation=None, gradient_accumulation_steps=2,
             per_device_train_batch_size=4)


def check(changes=None, batch=None, world_size=1, reward_names=None):
    """``(canonical judged reward, the warning or None)`` of the settings, checked as the rule ``zero_variance`` does."""
    warned = []
    view = SimpleNamespace(get={**SETTINGS, **(changes or {})}.get, batch={**BATCH, **(batch or {})},
                           world_size=world_size, reward_names=reward_names, warn=warned.append)
    return check_zero_variance_settings(view), (warned or [None])[0]


def test_settings_accepted():
    assert check() == (None, None)
    assert check({"zero_variance_filter": "resample"}) == (None, None)  # 4 × 2 = 8 completions: 2 groups
    assert check({"zero_variance_reward": "mine"})[0] == "mine"  # no registry
    # registry rewards: an alias gives the canonical name, the one TRL logs
    names = ["accuracy", "format"]
    assert check({"zero_variance_reward": "math_accuracy"}, reward_names=names)[0] == "accuracy"
    with pytest.raises(ValueError, match=r"zero_variance_reward='length' is not one of this run's rewards"):
        check({"zero_variance_reward": "length"}, reward_names=names)
    # filter off: the judged reward decides the logged share and causes, so it is checked and canonical there too
    assert check({"zero_variance_filter": "off", "zero_variance_reward": "math_accuracy"}, reward_names=names)[0] \
        == "accuracy"
    assert judged_reward_index("b", ["a", "b"]) == 1 and judged_reward_index(None, ["a"]) is None


def test_filter_without_effect_beside_normalize_then_sum_is_a_warning():
    _, warning = check({"multi_objective_aggregation": "normalize_then_sum"})
    assert warning.startswith("zero_variance_filter='mask' has no effect with multi_objective_aggregation=")


@pytest.mark.parametrize(("changes", "batch", "world_size", "match"), [
    ({"zero_variance_filter": "off", "zero_variance_reward": "length"}, {}, 1,
     r"zero_variance_reward='length' is not one of this run's rewards"),  # checked with the filter off too
    # 2 processes, micro-batch 3 × steps_per_generation 2 = 6 completions each, not whole groups of 4
    ({"zero_variance_filter": "resample"}, {"per_device_train_batch_size": 3}, 2,
     r"holds micro_batch_size \(3\) × steps_per_generation \(2\) = 6 .* a multiple of 4"),
    # generation_batch_size 12 over 2 processes: 6 each; a multiple of 2 × 4 = 8 would do
    ({"zero_variance_filter": "resample"}, {"generation_batch_size": 12}, 2, r"/ 2 processes = 6 .* multiple of 8"),
    ({"rollout_budget": "adaptive"}, {"generation_batch_size": 12}, 2, r"rollout_budget='adaptive' needs whole groups"),
])
def test_settings_refused(changes, batch, world_size, match):
    with pytest.raises(ValueError, match=match):
        check(changes, batch, world_size, reward_names=["accuracy"])


def test_judged_reward_index_unknown_name():
    with pytest.raises(ValueError, match=r"zero_variance_reward='c' is not one of this run's rewards \(a, b\)"):
        judged_reward_index("c", ["a", "b"])
