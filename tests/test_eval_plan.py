"""Evaluation quantities: resolved like the training ones, impossible setups refused before any model loads."""

import json

import pytest

from trl_grpo_ext.plan import QuantityError
from trl_grpo_ext.plan.evaluation import resolve_eval_plan, zero_variance_forecast_warning

BASE = dict(eval_strategy="steps", eval_steps=40, logging_steps=1, num_generations=8, num_generations_eval=2,
            per_device_eval_batch_size=32, world_size=1, total_steps=120, steps_per_epoch=120, final_eval="none")


def test_tiny_demo_eval_plan_by_hand():
    plan = resolve_eval_plan(eval_prompts=64, **BASE)
    # 64 prompts x 2 completions = 128 completions, in batches of 32 -> 4; every 40 of 120 steps -> 3 evaluations
    assert (plan.completions_per_eval, plan.eval_batches, plan.eval_every_steps, plan.evaluations) == (128, 4, 40, 3)


def test_fractional_eval_steps_and_epoch_strategy():
    plan = resolve_eval_plan(eval_prompts=64, **{**BASE, "eval_steps": 0.25})
    assert (plan.eval_every_steps, plan.evaluations) == (30, 4)  # ceil(0.25 * 120) = 30
    plan = resolve_eval_plan(eval_prompts=64, **{**BASE, "eval_strategy": "epoch", "total_steps": 240})
    assert plan.evaluations == 2 and plan.eval_every_steps is None


def test_no_evaluation_gives_no_plan_and_final_eval_alone_gives_one():
    assert resolve_eval_plan(eval_prompts=None, **{**BASE, "eval_strategy": "no"}) is None
    plan = resolve_eval_plan(eval_prompts=200, **{**BASE, "eval_strategy": "no", "final_eval": "compare_base"})
    assert plan.evaluations == 0 and plan.eval_prompts == 200 and plan.final_eval == "compare_base"


@pytest.mark.parametrize(
    "change, match",
    [({"per_device_eval_batch_size": 3}, "per_device_eval_batch_size=3"),
     ({"eval_prompts": 63, "num_generations_eval": 1}, "eval_num_prompts=63"),
     ({"eval_prompts": 0}, "eval_num_prompts=0"),
     ({"eval_steps": 0}, "eval_steps=0"),
     ({"final_eval": "yes"}, "final_eval='yes'")],
)
def test_impossible_eval_setups_name_the_field(change, match):
    kwargs = {**BASE, "eval_prompts": 64, **change}
    with pytest.raises(QuantityError, match=match):
        resolve_eval_plan(**kwargs)


def test_forecast_warning_when_most_groups_would_be_uniform(tmp_path):
    result = {"base": {"uniform_group_forecast": {"2": 0.3, "8": 0.74}, "pass_rates": [0.0, 0.125, 0.0625]}}
    warning = zero_variance_forecast_warning(json.loads(json.dumps(result)), 8)
    assert "74% of groups" in warning and "G=8" in warning and "resample" in warning
    assert zero_variance_forecast_warning(result, 2) is None  # 30% <= half
    assert zero_variance_forecast_warning({"accuracy": 0.1}, 8) is None  # no samples drawn: nothing to forecast


def test_the_warning_prefers_the_forecast_on_the_runs_weighted_reward():
    # pass/fail says 100% uniform, but the weighted (graded) reward varies inside every group: no warning
    result = {"uniform_group_forecast": {"8": 1.0}, "uniform_group_forecast_weighted": {"8": 0.0},
              "correctness_reward": "char_fraction"}
    assert zero_variance_forecast_warning(result, 8) is None
    # G beyond the K samples: only the pass/fail forecast exists, and the warning says what it judged
    result = {"uniform_group_forecast": {"16": 0.9}, "uniform_group_forecast_weighted": {"8": 0.0},
              "correctness_reward": "numeric_match"}
    assert "judged on numeric_match as pass/fail" in zero_variance_forecast_warning(result, 16)


def test_a_graded_reward_is_not_judged_as_pass_fail_beyond_its_samples():
    # a new user's `eval --k 8` on char_fraction: weighted G=8 2% uniform, pass/fail G=8 100% (no completion is all
    # 'a'); at G=16 only the pass/fail table has a value, 100%, which said "raise num_generations" to a run at 16
    result = {"base": {"uniform_group_forecast": {"2": 1.0, "8": 1.0, "16": 1.0},
                       "uniform_group_forecast_weighted": {"2": 0.3, "8": 0.02}, "pass_rates": [0.0, 0.0],
                       "correctness_reward": "char_fraction"}}
    assert zero_variance_forecast_warning(result, 16) is None
    assert zero_variance_forecast_warning(result, 32) is None  # from the pass rates: also pass/fail, also not


def test_forecast_for_a_group_size_the_table_lacks_comes_from_the_pass_rates():
    # G = 6 with q = 0.05 for both prompts: 0.05^6 + 0.95^6 = 0.735
    warning = zero_variance_forecast_warning({"uniform_group_forecast": {"8": 0.9}, "pass_rates": [0.05, 0.05]}, 6)
    assert "74% of groups" in warning


def test_evaluations_during_the_run_count_the_one_at_the_last_step():
    plan = resolve_eval_plan(eval_prompts=64, **{**BASE, "eval_steps": 10, "total_steps": 24})
    assert plan.evaluations == 3  # steps 10, 20 and the last step, 24
