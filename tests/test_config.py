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
        ({"max_resample_rounds": 0}, r"max_resample_rounds=0 must be an integer >= 1"),
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
        match=r"num_generations \(4\).*micro_batch_size \(2\) × steps_per_generation \(1\) = 2 completions.*"
        r"multiple of 4.*zero_variance_filter: mask",
    ):
        _config(tmp_path, prompts_per_step=1, micro_batch_size=2, zero_variance_filter="resample")


def test_resample_refuses_raw_steps_per_generation_split_mid_group(tmp_path, monkeypatch):
    # raw TRL fields: 2 per device × 2 processes × 3 steps per generation = 12 completions (3 prompts): TRL accepts
    # it, but each process holds 6 completions, one and a half groups.
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
def test_filter_beside_normalize_then_sum_warns(tmp_path, mode):
    # the trainer applies the filter only to the weighted total (sum_then_normalize): beside TRL's other aggregation
    # it has no effect, which a warning says (it is not silently ignored)
    from trl_grpo_ext.config.checks import IneffectiveSettingWarning

    with pytest.warns(IneffectiveSettingWarning, match=rf"zero_variance_filter='{mode}' has no effect with "
                      "multi_objective_aggregation='normalize_then_sum'"):
        _config(tmp_path, prompts_per_step=4, micro_batch_size=16, zero_variance_filter=mode,
                multi_objective_aggregation="normalize_then_sum")
    # with the filter off, TRL's own aggregation stays available
    assert _config(tmp_path, prompts_per_step=4, micro_batch_size=16, multi_objective_aggregation="normalize_then_sum")


def test_a_dr_grpo_config_with_weighted_rewards_resolves(tmp_path):
    from trl_grpo_ext import GRPOExtConfig

    config = GRPOExtConfig(
        output_dir=str(tmp_path), use_cpu=True, prompts_per_step=4, num_generations=4, micro_batch_size=8,
        total_training_steps=10, total_epochs=2, advantage_preset="dr_grpo", zero_variance_filter="mask",
        rewards=["char_fraction", {"name": "length", "weight": 0.5, "kwargs": {"min_length": 1, "max_length": 5}}],
    )
    # 4 prompts x 4 completions / 8 per micro-batch = 2 accumulation steps; Dr. GRPO: no std scaling
    assert (config.gradient_accumulation_steps, config.loss_type, config.scale_rewards) == (2, "dr_grpo", "none")
    assert config.reward_weights == [1.0, 0.5]


def test_a_dr_grpo_config_resolves_its_preset(tmp_path):
    from trl_grpo_ext.config.advantage_settings import AdvantageSettings

    config = _config(tmp_path, prompts_per_step=2, micro_batch_size=8, advantage_preset="dr_grpo")
    # Dr. GRPO (arXiv 2503.20783): group-mean baseline, no std scaling; ε and std kind keep their fallbacks
    assert config.resolved.advantages == AdvantageSettings("group_mean", "none", 1e-4, "sample")
    # the user's fields as given; TRL's own fields written, because TRL reads them
    assert (config.advantage_baseline, config.advantage_std_scaling, config.advantage_epsilon) == (None, None, None)
    assert (config.scale_rewards, config.loss_type) == ("none", "dr_grpo")


def test_a_config_with_prompts_per_step_and_weighted_rewards_resolves(tmp_path):
    from trl_grpo_ext.rewards.spec import RewardSpec

    rewards = [{"name": "char_fraction", "weight": 2.0}, {"name": "length", "kwargs": {"min_length": 1}}]
    config = _config(tmp_path, prompts_per_step=4, total_training_steps=10, rewards=rewards)
    # kept as given: no micro_batch_size, no epochs, the reward items untouched
    assert (config.prompts_per_step, config.micro_batch_size, config.total_epochs) == (4, None, None)
    assert config.rewards == rewards
    # 4 prompts × G 4 = 16 completions; default micro-batch: the largest divisor of 16 up to 8 -> 8, so GA 2
    resolved = config.resolved
    assert (resolved.prompts_per_step, resolved.micro_batch_size, resolved.gradient_accumulation_steps) == (4, 8, 2)
    assert (config.per_device_train_batch_size, config.gradient_accumulation_steps) == (8, 2)
    # total_training_steps alone: max_steps 10 and an epoch limit of 10 passes that cannot bind first
    assert (config.max_steps, config.num_train_epochs, resolved.stop_semantics) == (10, 10.0, "first_reached")
    assert resolved.rewards == (RewardSpec("char_fraction", 2.0, {}), RewardSpec("length", 1.0, {"min_length": 1}))
    assert config.reward_weights == [2.0, 1.0] and resolved.reward_weights == (2.0, 1.0)


def test_to_dict_holds_the_resolved_values(tmp_path):
    import json

    config = _config(tmp_path, prompts_per_step=2, total_epochs=1.5, advantage_std_kind="population",
                     rewards=["char_fraction"])
    values = json.loads(json.dumps(config.to_dict()))  # JSON-serialisable, as run_config.json and trackers need
    assert (values["prompts_per_step"], values["micro_batch_size"], values["advantage_baseline"]) == (2, None, None)
    resolved = values["resolved"]
    # 2 prompts × G 4 = 8 completions: micro-batch 8, GA 1; total_epochs alone: max_steps -1, 1.5 epochs
    assert {k: resolved[k] for k in ("world_size", "prompts_per_step", "micro_batch_size",
                                     "gradient_accumulation_steps", "max_steps", "num_train_epochs",
                                     "stop_semantics")} == {
        "world_size": 1, "prompts_per_step": 2, "micro_batch_size": 8, "gradient_accumulation_steps": 1,
        "max_steps": -1, "num_train_epochs": 1.5, "stop_semantics": "first_reached"}
    assert resolved["advantages"] == {"baseline": "group_mean", "std_scaling": "group", "epsilon": 1e-4,
                                      "std_kind": "population"}
    assert resolved["rewards"] == [{"name": "char_fraction", "weight": 1.0, "kwargs": {}}]
    assert resolved["reward_weights"] == [1.0]


def test_rewards_parse_from_yaml_and_from_the_command_line(tmp_path):
    """`rewards` holds names and mappings (`list[RewardEntry]`): TRL's parser takes both from YAML, names and JSON
    objects from the command line, and keeps them as given."""
    import yaml
    from transformers import HfArgumentParser
    from trl import TrlParser

    from trl_grpo_ext.rewards.spec import RewardSpec

    base = {"output_dir": str(tmp_path), "use_cpu": True, "report_to": [], "num_generations": 4,
            "prompts_per_step": 2}
    given = ["char_fraction", {"name": "length", "weight": 0.5, "kwargs": {"min_length": 1}}]
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({**base, "rewards": given}))
    (from_yaml,) = TrlParser((GRPOExtConfig,)).parse_args_and_config(["--config", str(path)])
    assert from_yaml.rewards == given
    expected = (RewardSpec("char_fraction", 1.0, {}), RewardSpec("length", 0.5, {"min_length": 1}))
    assert from_yaml.resolved.rewards == expected

    argv = [f"--{k}={v}" for k, v in base.items() if k != "report_to"]
    words = ["char_fraction", '{"name": "length", "weight": 0.5, "kwargs": {"min_length": 1}}']
    (from_cli,) = HfArgumentParser((GRPOExtConfig,)).parse_args_into_dataclasses(argv + ["--rewards", *words])
    assert from_cli.rewards == words
    assert from_cli.resolved.rewards == expected


def test_reward_weights_given_twice_or_as_booleans_are_refused(tmp_path):
    """The weights the config writes into TRL's reward_weights are recognised on replace(); the user's are checked."""

    common = dict(output_dir=str(tmp_path), use_cpu=True, prompts_per_step=2, num_generations=4)
    with pytest.raises(ValueError, match="Weights are given both in reward_weights"):
        GRPOExtConfig(**common, rewards=["char_fraction", {"name": "length", "weight": 0.5}], reward_weights=[1.0, 0.5])
    with pytest.raises(ValueError, match="weight=True must be a finite number"):
        GRPOExtConfig(**common, rewards=["char_fraction"], reward_weights=[True])
    config = GRPOExtConfig(**common, rewards=["char_fraction", {"name": "length", "weight": 0.5}])
    assert config.reward_weights == [1.0, 0.5]
    plain = GRPOExtConfig(**common, rewards=["char_fraction", "length"], reward_weights=[1.0, 0.3])
    assert plain.resolved.reward_weights == (1.0, 0.3)


def test_quantity_fields_is_deprecated_for_resolved(tmp_path):
    config = GRPOExtConfig(output_dir=str(tmp_path), use_cpu=True, prompts_per_step=2, num_generations=4)
    with pytest.warns(FutureWarning, match=r"config.resolved.quantity_fields\(\)"):
        fields = config.quantity_fields()
    assert fields == config.resolved.quantity_fields() and fields["prompts_per_step"] == 2


def test_the_users_reward_weights_are_kept_and_weights_on_items_are_written(tmp_path):
    common = dict(output_dir=str(tmp_path), use_cpu=True, prompts_per_step=2, num_generations=4)
    given = GRPOExtConfig(**common, rewards=["char_fraction", "format"], reward_weights=[3.0, 1.0])
    assert given.reward_weights == [3.0, 1.0] and given.resolved.reward_weights == (3.0, 1.0)
    on_items = GRPOExtConfig(**common, rewards=[{"name": "char_fraction", "weight": 2.0},
                                                {"name": "format", "weight": 0.5}])
    assert on_items.reward_weights == [2.0, 0.5]
    assert GRPOExtConfig(**common, reward_weights=[1.0, 0.5]).resolved.reward_weights == (1.0, 0.5)




def test_one_recipe_launch_checks_the_zero_variance_settings_once(tmp_path, monkeypatch):
    """The front door checks the recipe's values (the rule `zero_variance`); the real config it builds and the trainer
    check nothing again (the check ran 5 times per launch before)."""
    from factories import count_char_mix, tiny_cpu_yaml

    from trl_grpo_ext import GRPOExtTrainer
    from trl_grpo_ext.config.recipe_parse import parse_recipe_args
    from trl_grpo_ext.zero_variance import settings

    calls = []
    check = settings.check_zero_variance_settings
    monkeypatch.setattr(settings, "check_zero_variance_settings", lambda *args: calls.append(args) or check(*args))
    path = tiny_cpu_yaml(tmp_path, drop=("eval_steps", "num_generations_eval"), zero_variance_filter="mask",
                         eval_strategy="no")
    run = parse_recipe_args(["--config", path], datasets=False)
    assert [view.get("zero_variance_filter") for view, *_ in calls] == ["mask"]
    assert run.training_args.resolved.zero_variance.zero_variance_filter == "mask"
    GRPOExtTrainer("embedded:tiny-qwen2", args=run.training_args, train_dataset=count_char_mix(8))
    assert len(calls) == 1
    # a config built in Python is checked once, by __post_init__ (the rule; its canonical reward is not asked again)
    from factories import tiny_config

    tiny_config(tmp_path / "py", zero_variance_filter="mask", rewards=["char_fraction"])
    assert len(calls) == 2
