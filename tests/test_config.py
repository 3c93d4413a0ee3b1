"""GRPOExtConfig checks of the zero-variance fields (the other fields are tested with the modules they resolve in)."""

import pytest

from trl_grpo_ext import GRPOExtConfig

BASE = dict(use_cpu=True, report_to=[], num_generations=4, max_completion_length=8)


def _config(tmp_path, **fields):
    return GRPOExtConfig(output_dir=str(tmp_path), **{**BASE, **fields})


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"zero_variance_filter": "drop"}, r"zero_variance_filter='drop'.*'off', 'mask', 'resample'"),
        ({"zero_variance_tolerance": -0.1}, r"zero_variance_tolerance=-0.1 must be a number >= 0"),
        ({"max_resample_rounds": -1}, r"max_resample_rounds=-1 must be an integer >= 0"),
    ],
)
def test_bad_zero_variance_fields(tmp_path, fields, match):
    with pytest.raises(ValueError, match=match):
        _config(tmp_path, prompts_per_step=4, micro_batch_size=16, **fields)


def test_resample_refuses_groups_split_across_processes(tmp_path, monkeypatch):
    # 2 processes, 1 prompt × G = 4 per step, 2 completions per process: each process holds half a group.
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(
        ValueError,
        match=r"micro_batch_size \(2\) × steps_per_generation \(1\) = 2 completions.*"
        r"num_generations \(4\).*multiple of 4.*zero_variance_filter: mask",
    ):
        _config(tmp_path, prompts_per_step=1, micro_batch_size=2, zero_variance_filter="resample")


def test_resample_refuses_raw_steps_per_generation_split_mid_group(tmp_path, monkeypatch):
    # raw TRL fields: 2 per device × 2 processes × 3 steps per generation = 12 completions (3 prompts): TRL accepts
    # it, but each process holds 6 completions, one and a half groups. 4 / gcd(3, 4) = 4.
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match=r"micro_batch_size \(2\) × steps_per_generation \(3\) = 6 .*multiple of 4"):
        _config(tmp_path, per_device_train_batch_size=2, steps_per_generation=3, zero_variance_filter="resample")


def test_resample_accepts_whole_groups_per_process(tmp_path):
    # one process: the generation batch (4 prompts × 4 = 16 completions over 2 micro-batches of 8) holds whole groups
    config = _config(tmp_path, prompts_per_step=4, micro_batch_size=8, zero_variance_filter="resample")
    assert config.per_device_train_batch_size * config.steps_per_generation == 16
    # mask mode has no such constraint: it decides on the gathered batch
    assert _config(tmp_path, prompts_per_step=4, micro_batch_size=16, zero_variance_filter="mask")


@pytest.mark.parametrize("mode", ["mask", "resample"])
def test_filter_refuses_normalize_then_sum(tmp_path, mode):
    # the trainer applies the filter only to the weighted total (sum_then_normalize); it must not be silently ignored
    with pytest.raises(
        ValueError, match=r"multi_objective_aggregation='sum_then_normalize', got 'normalize_then_sum'"
    ):
        _config(
            tmp_path,
            prompts_per_step=4,
            micro_batch_size=16,
            zero_variance_filter=mode,
            multi_objective_aggregation="normalize_then_sum",
        )
    # with the filter off, TRL's own aggregation stays available
    assert _config(tmp_path, prompts_per_step=4, micro_batch_size=16, multi_objective_aggregation="normalize_then_sum")


def test_resolving_twice_changes_nothing(tmp_path):
    """dataclasses.replace re-runs __post_init__ on resolved values: the result must be the same config."""
    import dataclasses

    from trl_grpo_ext import GRPOExtConfig

    config = GRPOExtConfig(
        output_dir=str(tmp_path), use_cpu=True, prompts_per_step=4, num_generations=4, micro_batch_size=8,
        total_training_steps=10, total_epochs=2, advantage_preset="dr_grpo", zero_variance_filter="mask",
        rewards=["char_fraction", {"name": "length", "weight": 0.5, "kwargs": {"min_length": 1, "max_length": 5}}],
    )
    again = dataclasses.replace(config)
    keys = ("per_device_train_batch_size", "gradient_accumulation_steps", "max_steps", "num_train_epochs",
            "prompts_per_step", "total_training_steps", "total_epochs", "rewards", "reward_weights", "loss_type",
            "scale_rewards", "advantage_baseline", "advantage_std_scaling", "advantage_epsilon")
    assert {k: getattr(again, k) for k in keys} == {k: getattr(config, k) for k in keys}
    # 4 prompts x 4 completions / 8 per micro-batch = 2 accumulation steps; Dr. GRPO: no std scaling
    assert (config.gradient_accumulation_steps, config.loss_type, config.scale_rewards) == (2, "dr_grpo", "none")
    assert config.reward_weights == [1.0, 0.5]
