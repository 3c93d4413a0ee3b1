"""`trl_grpo_ext.validation`: the tables cover every field they claim to, and each kind of check on its own."""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import sys
import typing
from pathlib import Path

import pytest
import yaml

from trl_grpo_ext import validation
from trl_grpo_ext.validation import (
    CHOICES,
    DEFAULTS,
    RANGES,
    RULES,
    Range,
    RunArgumentError,
    check_lora_targets,
    check_reward_columns,
    user_values_from_argv,
    validate_run_args,
)

ROOT = Path(__file__).resolve().parents[1]


def check_user_values(values):
    """The front door's single-value checks of ``values``, raised as `Problems` raises them."""
    from trl_grpo_ext.validation.problems import Problems

    problems = Problems()
    validation.check_user_values(values, problems)
    problems.raise_if_any(RunArgumentError)


def _recipe_fields():
    from trl_grpo_ext.config.recipe_parse import RECIPE_DATACLASSES

    out = {}
    for cls in RECIPE_DATACLASSES:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            out.setdefault(f.name, (hints[f.name], f))
    return out


def test_every_table_key_is_a_field():
    fields = set(_recipe_fields())
    needs = {name for rule in RULES if rule.needs for name in rule.fields}
    for table in (RANGES, CHOICES, needs, DEFAULTS):
        assert sorted(set(table) - fields) == []


def test_defaults_are_the_dataclass_defaults():
    for name, value in DEFAULTS.items():
        _, f = _recipe_fields()[name]
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        assert value == getattr(default, "value", default), name


def test_every_listed_choice_is_a_value_the_code_handles(tmp_path):
    """CHOICES is what the code behind each field accepts: TRL's loss and aggregation branches, and for ours the
    config, the reward guard and the adapter cast (not a comparison of the table with a copy of itself)."""
    import torch
    from trl import GRPOTrainer

    from trl_grpo_ext import GRPOExtConfig
    from trl_grpo_ext.rewards.guard import RewardGuard
    from trl_grpo_ext.training.adapter_precision import cast_trainable_to

    loss_source = inspect.getsource(GRPOTrainer._compute_loss)
    for loss_type in CHOICES["loss_type"]:
        assert f'"{loss_type}"' in loss_source
    aggregation_source = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    for value in CHOICES["multi_objective_aggregation"]:
        assert f'"{value}"' in aggregation_source
    base = dict(output_dir=str(tmp_path), use_cpu=True, report_to=[], num_generations=4, max_completion_length=8,
                prompts_per_step=4, micro_batch_size=16)
    for mode in CHOICES["zero_variance_filter"]:
        assert GRPOExtConfig(**base, zero_variance_filter=mode).zero_variance_filter == mode
    for policy in CHOICES["reward_error_policy"]:
        guard = RewardGuard(lambda completions, **kwargs: [float("nan") if c == "bad" else 1.0 for c in completions],
                            "r", on_error=policy)
        if policy == "none":  # (invalid on every completion of a call stops whatever the policy: tested in guard's)
            assert guard(prompts=["p", "q"], completions=["c", "bad"]) == [1.0, None]
    layer = torch.nn.Linear(2, 2)
    for dtype in CHOICES["adapter_dtype"]:
        cast_trainable_to(layer, dtype)
        assert layer.weight.dtype == getattr(torch, dtype)
    for name in ("zero_variance_filter", "reward_error_policy", "adapter_dtype"):
        with pytest.raises(RunArgumentError, match=rf"{name}='x' is not valid"):
            check_user_values({name: "x"})
        with pytest.raises(ValueError, match=rf"{name}='x' is not valid"):
            GRPOExtConfig(**{**base, name: "x"})


@pytest.mark.parametrize(
    "rng, good, bad",
    [
        (Range(low=0, high=1, low_open=True, fix="f."), [1.0, 1e-9, "0.5"], [0.0, 1.0000001, -1, "x", float("nan")]),
        (RANGES["lora_dropout"], [0.0, 0.999], [1.0, -0.01]),
        (RANGES["lora_r"], [1, 4.0, 64], [0, 2.5, True]),
        (Range(low=0, high=2**32 - 1, integer=True, fix="f."), [0, 2**32 - 1], [-1, 2**32]),
        (RANGES["temperature"], [1e-6, 2.0], [0, -1, float("inf")]),
        (Range(low=1, low_open=True, fix="f."), [1.0001, 3], [1.0, 0.5]),
        (RANGES["max_steps"], [-1, 1], [-2, 1.5]),
    ],
)
def test_range_bounds(rng, good, bad):
    for value in good:
        rng.check("x", value)
    for value in bad:
        with pytest.raises(RunArgumentError, match=r"^x=.* must be .*\. Fix: "):
            rng.check("x", value)


def test_range_describes_itself():
    assert Range(low=0, high=1, low_open=True).describe() == "a number in (0, 1]"
    assert Range(low=1, integer=True).describe() == "an integer >= 1"
    assert Range(low=0, low_open=True).describe() == "a number > 0"


def test_user_values_are_the_yaml_keys_and_the_command_line_arguments(tmp_path):
    from trl import TrlParser

    from trl_grpo_ext.config.frontdoor import read_run_args
    from trl_grpo_ext.config.recipe_parse import RECIPE_DATACLASSES

    config = tmp_path / "c.yaml"
    config.write_text("dataset_name: embedded:count-char\nrewards: [char_fraction]\nmicro_batch_size: 4\n"
                      "learning_rate: 1.0e-5\nenv: {A: b}\n")
    cli = ["--per_device_train", "8", "--load-in-4bit", "--lora_target_modules", "q_proj", "k_proj",
           "--learning_rate=3e-4"]
    values = user_values_from_argv(cli, TrlParser(RECIPE_DATACLASSES))  # the command line alone, typed
    assert values == {"learning_rate": 3e-4, "per_device_train_batch_size": 8, "load_in_4bit": True,
                      "lora_target_modules": ["q_proj", "k_proj"]}
    # the front door: the YAML's keys (its `env` excluded), overridden by the command line
    user = read_run_args(["--config", str(config), "--learning_rate=3e-4", "--use_peft"], light=True).user_values
    assert user == {"dataset_name": "embedded:count-char", "rewards": ["char_fraction"], "micro_batch_size": 4,
                    "learning_rate": 3e-4, "use_peft": True}


def test_conflicts_are_judged_by_set_keys_not_values():
    from trl_grpo_ext.plan import resolve_trl_fields

    # without set_fields (the dataclass path) an explicit default looks unset ...
    assert resolve_trl_fields({"micro_batch_size": 4, "per_device_train_batch_size": 8}, 1)["micro_batch_size"] == 4
    # ... with the keys the user set it is a conflict naming both
    def validate(user):
        user = {"rewards": ["format"], **user}  # a run needs a reward (the `rewards_set` rule)
        validate_run_args(None, user, None, None, user_values=user, check_model=False)

    with pytest.raises(RunArgumentError, match="micro_batch_size=4 conflicts with per_device_train_batch_size=8"):
        validate({"micro_batch_size": 4, "per_device_train_batch_size": 8})
    validate({"micro_batch_size": 4, "per_device_train_batch_size": 4})  # the same value is no conflict
    validate({"micro_batch_size": 4, "num_generations": 8})


def test_required_columns_and_packages_are_declared_by_the_rewards():
    from trl_grpo_ext.rewards import get_reward

    assert get_reward("exact_match").required_columns == (("solution", "answer"),)
    assert get_reward("exact_match", column="gold").required_columns == (("gold",),)
    assert get_reward("char_fraction").required_columns == (("target",),)
    assert get_reward("accuracy").required_packages == (("math_verify", "math-verify"),)
    assert get_reward("accuracy_reward").required_columns == (("solution",),)
    assert get_reward("format").required_columns == () and get_reward("format").required_packages == ()


def test_check_reward_columns_names_reward_column_and_fix():
    from trl_grpo_ext.rewards.spec import parse_reward_specs

    specs = parse_reward_specs(["char_fraction", {"name": "numeric_match", "kwargs": {"column": "gold"}}])
    check_reward_columns(["prompt", "target", "gold"], specs)
    with pytest.raises(RunArgumentError, match=r"rewards\[1\] 'numeric_match' reads the dataset column 'gold'.*Fix"):
        check_reward_columns(["prompt", "target"], specs)


def test_missing_package_is_named_with_pip_and_never_on_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "math_verify", None)
    assert importlib.util.find_spec("math_verify") is None
    with pytest.raises(RunArgumentError) as info:
        validation.validate_run_args(None, {"rewards": ["accuracy"]}, None, None, check_model=False)
    assert "pip install math-verify" in str(info.value) and "on_error" not in str(info.value)


def test_lora_targets_on_a_local_model_directory(tiny_model_dir, monkeypatch):
    """A local directory is read through its config.json only (meta device: from_pretrained is never called)."""
    from transformers import AutoModelForCausalLM

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", None)
    base = {"model_name_or_path": str(tiny_model_dir), "use_peft": True}
    check_lora_targets({**base, "lora_target_modules": ["q_proj", "gate_proj", "down_proj"]})
    check_lora_targets({**base, "lora_target_modules": "all-linear"})
    check_lora_targets({**base, "lora_target_modules": [r".*\.q_proj"]})  # one item: a regular expression
    with pytest.raises(RunArgumentError, match="'gate' matches no module .*e.g. gate_proj"):
        check_lora_targets({**base, "lora_target_modules": ["q_proj", "gate"]})


def test_every_shipped_config_passes(monkeypatch):
    for path in sorted((ROOT / "recipes/configs").glob("*.yaml")):
        values = yaml.safe_load(path.read_text())
        validation.validate_run_args(None, values, None, None, user_values=values)


def test_recipe_refuses_a_missing_column_after_loading_the_dataset_before_the_model(tmp_path, monkeypatch, capsys):
    """A local Parquet prompt dataset (whose columns the config rules cannot read without `datasets`: JSON lines and
    CSV they read, `local_columns`) without the reward's column: exit 2 before any weight, from the recipe's argument
    stage, its main, and `plan` (which reads the dataset with `datasets`, as the recipe does)."""
    from datasets import Dataset
    from factories import recipe_stages

    from trl_grpo_ext.cli.plan import main as plan_main

    data = tmp_path / "data"
    data.mkdir()
    Dataset.from_list([{"prompt": f"say {i}", "label": str(i)} for i in range(8)]).to_parquet(str(data / "train.parquet"))
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({
        "model_name_or_path": "embedded:tiny-qwen2", "dataset_name": str(data), "dataset_train_split": "train",
        "rewards": ["exact_match"], "prompts_per_step": 2, "num_generations": 4, "total_training_steps": 1,
        "use_cpu": True, "bf16": False, "report_to": "none", "output_dir": str(tmp_path / "out"),
        "max_completion_length": 8,
    }))
    code, errors, err = recipe_stages(["--config", str(config)], monkeypatch, capsys)
    assert code == 2 and len(errors) == 1, err
    assert "'exact_match' reads the dataset column 'solution' or 'answer'" in errors[0]
    assert "['label', 'prompt']" in errors[0]
    assert plan_main(["--config", str(config)]) == 2
    assert capsys.readouterr().err.splitlines() == [f"trl-grpo-ext plan: {errors[0]}"]


def test_a_reward_failing_on_a_missing_package_is_not_told_to_use_on_error_none():
    from trl_grpo_ext.rewards.guard import RewardFunctionError, guard_reward

    def needs_math_verify(completions, **kwargs):
        raise ModuleNotFoundError("No module named 'math_verify'")

    with pytest.raises(RewardFunctionError) as info:
        guard_reward(needs_math_verify, name="needs_math_verify")(prompts=["p"], completions=["c"])
    assert "math_verify" in str(info.value) and "Install the missing package" in str(info.value)
    assert "on_error" not in str(info.value)


def test_peft_matching_is_restated_exactly(tiny_model_dir):
    from types import SimpleNamespace

    from peft.tuners.tuners_utils import check_target_module_exists

    from trl_grpo_ext.validation import model_modules, peft_target_matches

    names = list(model_modules({"model_name_or_path": str(tiny_model_dir)}))
    assert "model.layers.0.self_attn.q_proj" in names and len(names) > 20
    for target in ("q_proj", r".*\.q_proj", r".*(q|v)_proj", {"q_proj"}, {"q_proj", "mlp.up_proj", "norm"},
                   {"layers.1.self_attn.k_proj"}, {"proj"}):
        probe = SimpleNamespace(target_modules=target, exclude_modules=None, modules_to_save=None,
                                target_parameters=None)
        for name in names:
            assert peft_target_matches(target, name) == bool(check_target_module_exists(probe, name)), (target, name)


def test_module_names_are_cached_so_plan_builds_no_model_twice(tmp_path):
    """After one run has built the meta model, `plan` on a LoRA config reads the module names from the cache."""
    import os
    import subprocess

    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1",
           "TRL_GRPO_EXT_CACHE": str(tmp_path / "cache"), "HOME": str(tmp_path)}
    code = (
        "import sys, transformers\n"
        "from trl_grpo_ext.cli import plan as plan_cli\n"
        "def refuse(*a, **k): raise RuntimeError('built a model')\n"
        "if len(sys.argv) > 1: transformers.AutoModelForCausalLM.from_config = refuse\n"
        "assert plan_cli.main(['--config', 'recipes/configs/tiny_cpu.yaml']) == 0\n"
    )
    first = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env)
    assert first.returncode == 0, first.stderr[-2000:]
    assert len(os.listdir(tmp_path / "cache" / "module-names")) == 1
    second = subprocess.run([sys.executable, "-c", code, "cached"], capture_output=True, text=True, cwd=ROOT, env=env)
    assert second.returncode == 0, second.stderr[-2000:]
    assert len(os.listdir(tmp_path / "cache" / "module-names")) == 1


def test_soft_overlong_with_its_default_length_and_a_cache_is_accepted():
    values = {"max_completion_length": 24, "rewards": [{"name": "soft_overlong", "kwargs": {"soft_punish_cache": 4}}]}
    validation.validate_run_args(None, values, None, None, user_values=values, check_model=False)


def test_a_choice_typo_suggests_the_value_it_means_or_none():
    with pytest.raises(RunArgumentError, match="Did you mean 'info'"):
        check_user_values({"log_level": "INFO"})
    with pytest.raises(RunArgumentError, match="Did you mean 'dr_grpo'"):
        check_user_values({"advantage_preset": "Dr_GRPO"})
    with pytest.raises(RunArgumentError) as refused:
        check_user_values({"dtype": "fp32"})
    assert "Did you mean" not in str(refused.value) and "Fix: dtype: auto" not in str(refused.value)


def test_problems_collects_skips_what_follows_and_raises_once():
    from trl_grpo_ext.plan import QuantityError
    from trl_grpo_ext.validation.problems import Problems, problem_lines

    def fails(message, error=RunArgumentError):
        raise error(message)

    one = Problems()
    assert one.check(fails, "num_generations=1 must be an integer >= 2.", QuantityError,
                     fields=["num_generations"]) is None
    assert one.check(lambda: "ran", blocked_by=["num_generations"]) is None  # reads a refused field: skipped
    assert one.check(lambda: "ran", fields=["beta"]) == "ran"
    with pytest.raises(QuantityError) as info:  # a single problem: the error its check raised, unchanged
        one.raise_if_any(ValueError)
    assert problem_lines(info.value) == ["num_generations=1 must be an integer >= 2."]

    several = Problems()
    several.check(fails, "beta=-1 must be a number >= 0.", fields=["beta"])
    several.add("beta=-1 must be a number >= 0.")  # the same line twice is kept once
    several.add("lora_r=8 only takes effect with use_peft: true,\n  so it would be ignored.", ["lora_r"])
    with pytest.raises(RunArgumentError) as info:
        several.raise_if_any(RunArgumentError)
    assert info.value.problems == ["beta=-1 must be a number >= 0.",
                                   "lora_r=8 only takes effect with use_peft: true, so it would be ignored."]
    assert str(info.value).splitlines() == info.value.problems == problem_lines(info.value)
    Problems().raise_if_any()  # nothing found: nothing raised
