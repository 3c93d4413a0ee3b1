"""Tests of trl_grpo_ext.rewards.spec: parsing the `rewards` setting (YAML / CLI JSON) and building TRL's arguments."""

from __future__ import annotations

import json

import pytest
import yaml

from trl_grpo_ext.rewards import RewardGuard, RewardSpec, UnknownRewardError, build_reward_funcs, parse_reward_specs

YAML = """
rewards:
  - accuracy
  - {name: format, weight: 0.5}
  - name: length
    weight: 0.25
    kwargs: {max_length: 8, unit: chars}
  - trl_grpo_ext.rewards.builtin:TagCount
"""


def test_yaml_forms():
    specs = parse_reward_specs(yaml.safe_load(YAML)["rewards"])
    assert specs == [
        RewardSpec("accuracy"),
        RewardSpec("format", 0.5),
        RewardSpec("length", 0.25, {"max_length": 8, "unit": "chars"}),
        RewardSpec("trl_grpo_ext.rewards.builtin:TagCount"),
    ]
    assert parse_reward_specs([s.to_dict() for s in specs]) == specs  # round trip through the saved config
    assert json.loads(json.dumps([s.to_dict() for s in specs]))[2] == {
        "name": "length", "weight": 0.25, "kwargs": {"max_length": 8, "unit": "chars"},
    }  # fmt: skip


def test_cli_json_strings_and_single_values():
    specs = parse_reward_specs(["accuracy", '{"name": "format", "weight": 2, "kwargs": {"answer_tag": "ans"}}'])
    assert specs == [RewardSpec("accuracy"), RewardSpec("format", 2.0, {"answer_tag": "ans"})]
    assert parse_reward_specs("exact_match") == [RewardSpec("exact_match")]
    assert parse_reward_specs(None) == [] and parse_reward_specs([]) == []


def test_reward_weights_list():
    specs = parse_reward_specs(["accuracy", "format"], reward_weights=[1, 0.5])
    assert [s.weight for s in specs] == [1.0, 0.5]
    with pytest.raises(
        ValueError, match=r"reward_weights has 1 values but 2 rewards are selected \(\['accuracy', 'format'\]\)"
    ):
        parse_reward_specs(["accuracy", "format"], reward_weights=[1.0])
    with pytest.raises(ValueError, match=r"Weights are given both in reward_weights=\[1.0, 2.0\] and on rewards\[1\]"):
        parse_reward_specs(["accuracy", {"name": "format", "weight": 2}], reward_weights=[1.0, 2.0])
    with pytest.raises(ValueError, match=r"reward_weights\[1\]: weight=nan must be a finite number"):
        parse_reward_specs(["accuracy", "format"], reward_weights=[1.0, float("nan")])


@pytest.mark.parametrize(
    ("item", "message"),
    [
        (
            {"name": "format", "wieght": 1},
            r"rewards\[1\] .* has unknown key\(s\) \['wieght'\]; allowed keys are \['name', 'weight', 'kwargs'\]",
        ),
        ({"weight": 1}, r"rewards\[1\] .* needs a `name`"),
        ({"name": "format", "weight": "high"}, r"rewards\[1\] .*: weight='high' must be a finite number"),
        ({"name": "format", "weight": True}, r"weight=True must be a finite number"),
        ({"name": "format", "kwargs": [1]}, r"rewards\[1\] .*: kwargs must be a mapping"),
        (3, r"rewards\[1\] \(3\) must be a reward name or a mapping"),
        ('{"name": "format",', r"rewards\[1\] .* is not a valid mapping"),
    ],
)
def test_malformed_items_name_the_item(item, message):
    with pytest.raises(ValueError, match=message):
        parse_reward_specs(["accuracy", item])


def test_names_checked_before_any_model_loads():
    with pytest.raises(UnknownRewardError, match=r"Unknown reward 'acurracy'\. Did you mean 'accuracy'\?"):
        parse_reward_specs(["acurracy"])
    assert parse_reward_specs(["acurracy"], check_names=False) == [RewardSpec("acurracy")]
    with pytest.raises(ValueError, match=r"rewards\[0\] and rewards\[1\] both select 'accuracy'"):
        parse_reward_specs(["accuracy", "math_accuracy"])


def test_build_reward_funcs():
    specs = parse_reward_specs(yaml.safe_load(YAML)["rewards"])
    funcs, weights = build_reward_funcs(specs, on_error="none")
    assert weights == [1.0, 0.5, 0.25, 1.0]
    assert [f.__name__ for f in funcs] == ["accuracy", "format", "length", "TagCount"]
    assert all(isinstance(f, RewardGuard) and f.on_error == "none" for f in funcs)
    assert funcs[2](prompts=["p"], completions=["abcdefghijkl"]) == [0.5]  # 12 chars: 1 - (12 - 8)/8
    alias, _ = build_reward_funcs([RewardSpec("math_accuracy")])
    assert alias[0].__name__ == "accuracy"  # metric name is the canonical name
    with pytest.raises(ValueError, match=r"on_error='ignore' is not valid\. Did you mean 'none'\? Choose one of 'raise', 'none'\."):
        build_reward_funcs(specs, on_error="ignore")
    with pytest.raises(ValueError, match=r"Reward 'length' needs the parameter\(s\) max_length"):
        build_reward_funcs([RewardSpec("length")])


def half_nan(completions, **kwargs):
    """Test reward: NaN for the first completion of each call, 0.5 otherwise."""
    return [float("nan") if i == 0 else 0.5 for i in range(len(completions))]


def test_trl_grpo_trainer_accepts_the_built_funcs(tmp_path, monkeypatch):
    """Two optimizer steps of TRL's own GRPOTrainer on the embedded tiny model with rewards chosen by name."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from trl import GRPOConfig, GRPOTrainer

    from trl_grpo_ext.models.embedded import tiny

    specs = parse_reward_specs(
        ["char_fraction", {"name": "length", "weight": 0.5, "kwargs": {"max_length": 8}}, f"{__name__}:half_nan"]
    )
    funcs, weights = build_reward_funcs(specs, on_error="none")
    path = tiny.ensure_tiny_model()
    args = GRPOConfig(
        output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=4, max_completion_length=12,
        max_steps=2, logging_steps=1, bf16=False, use_cpu=True, report_to=[], save_strategy="no",
        reward_weights=weights,
    )  # fmt: skip
    trainer = GRPOTrainer(
        model=str(path), reward_funcs=funcs, args=args, train_dataset=tiny.count_char_dataset(16),
        processing_class=tiny.load_tokenizer(path),
    )  # fmt: skip
    trainer.train()
    logs = [h for h in trainer.state.log_history if "rewards/char_fraction/mean" in h]
    assert len(logs) == 2
    for log in logs:
        assert log["rewards/half_nan/invalid"] == 1.0  # one NaN per call of 4 completions, counted, not fatal
        assert log["rewards/half_nan/mean"] == 0.5 and log["rewards/char_fraction/invalid"] == 0.0
        assert 0.0 <= log["rewards/char_fraction/mean"] <= 1.0 and 0.0 <= log["rewards/length/mean"] <= 1.0


def test_a_cli_list_string_is_read_as_the_list():
    # `--rewards '[accuracy, {"name": "format", "weight": 0.5}]'` reaches the parser as one string
    specs = parse_reward_specs(['[accuracy, {"name": "format", "weight": 0.5}]'])
    assert specs == [RewardSpec("accuracy", 1.0, {}), RewardSpec("format", 0.5, {})]
    assert parse_reward_specs('["accuracy"]') == [RewardSpec("accuracy", 1.0, {})]
    with pytest.raises(ValueError, match=r"is not a valid list .* --rewards accuracy format"):
        parse_reward_specs(["[accuracy, "])


def test_a_yaml_flow_mapping_on_the_cli_is_read_as_json_would_be():
    assert parse_reward_specs(["{name: accuracy, weight: 2}"]) == [RewardSpec("accuracy", 2.0, {})]


def test_a_weight_written_as_an_exponent_is_a_number():
    # PyYAML (YAML 1.1) reads `5e-1` as the string '5e-1'; argparse reads `learning_rate: 5e-1` as 0.5
    (spec,) = parse_reward_specs(yaml.safe_load("[{name: accuracy, weight: 5e-1}]"))
    assert spec.weight == 0.5
    (spec,) = parse_reward_specs(["accuracy"], ["2"])  # a quoted number, as `num_generations: "8"` is read
    assert spec.weight == 2.0
    with pytest.raises(ValueError, match="weight='half' must be a finite number"):
        parse_reward_specs(yaml.safe_load("[{name: accuracy, weight: half}]"))
