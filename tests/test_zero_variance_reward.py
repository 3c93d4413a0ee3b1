"""`zero_variance_reward`: the filter judges one chosen reward function instead of the weighted total.

The example of the docs: accuracy [0, 0, 0, 0] and a 0.1-weighted format reward [1, 0, 1, 1]. The weighted totals
[0.1, 0, 0.1, 0.1] do not have zero variance: TRL's advantages are (r − 0.075) / (0.05 + 1e-4) ≈ [0.5, −1.5, 0.5, 0.5] (mean
0.075; sample std √((3 · 0.025² + 0.075²) / 3) = 0.05), so the format reward alone trains the group although no
completion is correct. Judged on accuracy, the group has zero variance and is filtered.
"""

import pytest
import torch
from datasets import Dataset
from factories import tiny_trainer

from trl_grpo_ext import GRPOExtConfig, GRPOExtTrainer
from trl_grpo_ext.advantages import compute_advantages
from trl_grpo_ext.config.advantage_settings import resolve_advantage_settings
from trl_grpo_ext.models.embedded import tiny
from trl_grpo_ext.zero_variance import judged_rewards, zero_variance_group_mask

G = 4
ACCURACY = [0.0, 0.0, 0.0, 0.0]
FORMAT = [1.0, 0.0, 1.0, 1.0]
WEIGHTS = torch.tensor([1.0, 0.1])


def _rewards_per_func() -> torch.Tensor:
    return torch.tensor([ACCURACY, FORMAT]).T  # (4, 2)


def test_example_is_kept_on_the_total_and_filtered_on_accuracy():
    rewards = _rewards_per_func()
    total = judged_rewards(rewards, WEIGHTS, None)
    torch.testing.assert_close(total, torch.tensor([0.1, 0.0, 0.1, 0.1]))
    assert not zero_variance_group_mask(total, G, 0.0).any()
    settings, _ = resolve_advantage_settings()  # TRL's defaults: group mean, group sample std, ε 1e-4
    expected = torch.tensor([0.025, -0.075, 0.025, 0.025]) / (0.05 + 1e-4)
    torch.testing.assert_close(compute_advantages(total, G, settings), expected, rtol=1e-5, atol=1e-6)

    on_accuracy = judged_rewards(rewards, WEIGHTS, 0)
    torch.testing.assert_close(on_accuracy, torch.tensor(ACCURACY))
    assert zero_variance_group_mask(on_accuracy, G, 0.0).all()
    assert not zero_variance_group_mask(judged_rewards(rewards, WEIGHTS, 1), G, 0.0).any()  # format alone varies


def accuracy(completions, **kwargs):
    """Never correct: the accuracy of the example."""
    return [0.0] * len(completions)


def format_reward(completions, **kwargs):
    """[1, 0, 1, 1] in every group: the format reward of the example."""
    return [FORMAT[i % G] for i in range(len(completions))]


def _trainer(tmp_path, **overrides) -> GRPOExtTrainer:
    settings = dict(prompts_per_step=2, num_generations=G, micro_batch_size=8, total_training_steps=1,
                    max_completion_length=4, learning_rate=1e-3, seed=0, zero_variance_filter="mask",
                    reward_weights=[1.0, 0.1])
    return tiny_trainer(tmp_path, [accuracy, format_reward], Dataset.from_list(tiny.count_char_rows(4)),
                        **{**settings, **overrides})


@pytest.mark.parametrize(("judged", "fraction"), [(None, 0.0), ("accuracy", 1.0), ("format_reward", 0.0)])
def test_training_step_filters_the_zero_variance_groups_of_the_judged_reward(tmp_path, judged, fraction):
    trainer = _trainer(tmp_path, zero_variance_reward=judged)
    trainer.train()
    (log,) = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert log["zero_variance/frac_uniform_before"] == fraction
    assert log["zero_variance/completions_masked"] == fraction * 8
    if judged == "accuracy":  # both groups filtered: no update
        assert log["zero_variance/no_update"] == 1.0
    else:  # kept: the format reward drives the advantages, ≈ [0.5, -1.5, 0.5, 0.5] per group
        assert log["advantages/abs_mean"] == pytest.approx((3 * 0.025 + 0.075) / 4 / (0.05 + 1e-4), rel=1e-4)


def test_with_the_filter_off_the_judged_reward_decides_the_logged_share_not_the_advantages(tmp_path, capsys):
    # accuracy [0, 0, 0, 0] in both groups: uniform on accuracy (share 1.0, both all wrong at the run's lowest), yet
    # nothing is masked and the format reward drives the advantages, as in plain TRL
    trainer = _trainer(tmp_path, zero_variance_filter="off", zero_variance_reward="accuracy")
    trainer.train()
    (log,) = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert log["zero_variance/frac_uniform_before"] == 1.0
    assert log["advantages/abs_mean"] == pytest.approx((3 * 0.025 + 0.075) / 4 / (0.05 + 1e-4), rel=1e-4)
    # every completion got a non-zero advantage from the weighted total: none is counted without gradient, and
    # neither the step line nor the closing line says "zero advantages" (a TRL user's find)
    assert log["zero_variance/frac_completions_no_gradient"] == 0.0
    out = capsys.readouterr().out
    assert "zero advantages (zero_variance_filter off" not in out
    assert "; 0 of 1 steps had zero advantages (every group uniform;" in out, out


def test_unknown_judged_reward_is_refused_before_the_model_loads(tmp_path, monkeypatch):
    from trl import GRPOTrainer

    def no_loading(*args, **kwargs):
        raise AssertionError("TRL's __init__ (which loads the model) was reached")

    monkeypatch.setattr(GRPOTrainer, "__init__", no_loading)
    with pytest.raises(ValueError, match=r"zero_variance_reward='acc' is not one of this run's rewards "
                                         r"\(accuracy, format_reward\)"):
        _trainer(tmp_path, zero_variance_reward="acc")


def test_config_checks_the_judged_reward_against_the_selected_rewards(tmp_path):
    common = dict(output_dir=str(tmp_path), use_cpu=True, prompts_per_step=2, num_generations=4)
    with pytest.raises(ValueError, match="zero_variance_reward='length' is not one of this run's rewards"):
        GRPOExtConfig(**common, zero_variance_filter="mask", rewards=["accuracy", "format"],
                      zero_variance_reward="length")
    # filter off: the reward judges the logged uniform share and its causes only (checked as with the filter on)
    assert GRPOExtConfig(**common, rewards=["accuracy"], zero_variance_reward="math_accuracy").resolved.zero_variance \
        .zero_variance_reward == "accuracy"
    with pytest.raises(ValueError, match="zero_variance_reward='length' is not one of this run's rewards"):
        GRPOExtConfig(**common, rewards=["accuracy", "format"], zero_variance_reward="length")
    alias = GRPOExtConfig(**common, zero_variance_filter="mask", rewards=["accuracy", "format"],
                          zero_variance_reward="math_accuracy")
    assert alias.zero_variance_reward == "math_accuracy"  # the user's field stays as given
    assert alias.resolved.zero_variance.zero_variance_reward == "accuracy"  # the canonical name, the one TRL logs
