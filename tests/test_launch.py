"""Bad recipe input fails fast, before any model is loaded, with a message naming the problem and the fix."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from factories import tiny_cpu_yaml

from trl_grpo_ext.config.recipe_parse import RecipeArgumentError, parse_recipe_args, write_run_config
from trl_grpo_ext.rewards.spec import RewardSpec

ROOT = Path(__file__).resolve().parents[1]


def _error(argv) -> str:
    with pytest.raises(RecipeArgumentError) as info:
        parse_recipe_args(argv)
    assert info.value.code == 2
    return str(info.value)


def test_the_embedded_default_parses(tmp_path):
    script_args, training_args, model_args, push_args = parse_recipe_args(["--config", tiny_cpu_yaml(tmp_path)])
    assert model_args.model_name_or_path == "embedded:tiny-qwen2"
    assert training_args.gradient_accumulation_steps == 1 and training_args.per_device_train_batch_size == 16
    assert training_args.rewards == [{"name": "char_fraction", "weight": 1.0}]  # as given
    assert training_args.resolved.rewards == (RewardSpec("char_fraction", 1.0, {}),)
    assert training_args.bf16 is False


def test_missing_config_file_lists_the_available_ones(tmp_path):
    message = _error(["--config", str(tmp_path / "nope.yaml")])
    assert "nope.yaml" in message and "no such file" in message and "tiny_cpu" in message


def test_unknown_yaml_key_is_named_with_a_suggestion(tmp_path):
    message = _error(["--config", tiny_cpu_yaml(tmp_path, learnig_rate=1e-5)])
    assert "learnig_rate" in message and "did you mean 'learning_rate'" in message


def test_model_path_that_does_not_exist_mentions_offline_and_the_embedded_default(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    message = _error(["--config", tiny_cpu_yaml(tmp_path, model_name_or_path="Qwen/Qwen2.5-0.5B-Instruct")])
    assert "HF_HUB_OFFLINE=1" in message and "unreachable offline" in message and "make demo" in message
    message = _error(["--config", tiny_cpu_yaml(tmp_path, model_name_or_path="./no/such/dir")])
    assert "not an existing directory" in message


def test_bf16_on_a_machine_without_bf16(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU; the check is for CPU-only machines")
    message = _error(["--config", tiny_cpu_yaml(tmp_path, bf16=True, use_cpu=False)])  # transformers' own refusal
    assert "doesn't support bf16" in message and "use_cpu" in message


def test_conflicting_quantities_fail_before_loading(tmp_path):
    message = _error(["--config", tiny_cpu_yaml(tmp_path, per_device_train_batch_size=4)])
    assert "per_device_train_batch_size" in message and "micro_batch_size" in message


def test_cli_override_wins_over_yaml(tmp_path):
    _, training_args, _, _ = parse_recipe_args(["--config", tiny_cpu_yaml(tmp_path), "--learning_rate", "0.5"])
    assert training_args.learning_rate == 0.5


def test_recipe_exits_2_with_one_line_and_no_traceback(tmp_path):
    result = subprocess.run(
        [sys.executable, str(ROOT / "recipes" / "grpo_qlora.py"), "--config", tiny_cpu_yaml(tmp_path, learnig_rate=1)],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "error: unknown key(s): 'learnig_rate' (did you mean 'learning_rate'?)" in result.stderr
    assert result.stderr.count("\n") == 1


def test_run_config_never_holds_the_token(tmp_path):
    script_args, training_args, model_args, push_args = parse_recipe_args(
        ["--config", tiny_cpu_yaml(tmp_path), "--hub_token", "hf_abcdefghijklmnopqrstuvwxyz0123456789"])
    path = write_run_config(str(tmp_path), script_args, training_args, model_args, push_args)
    text = path.read_text()
    assert "hf_abcdefghijklmnopqrstuvwxyz0123456789" not in text
    assert '"learning_rate": 0.002' in text and '"max_completion_length": 24' in text


@pytest.mark.parametrize("config", sorted(p.name for p in (ROOT / "recipes" / "configs").glob("*.yaml")))
def test_every_recipe_config_parses_and_plans(config, monkeypatch):
    """The GPU configs cannot run here (Hub ids), but they parse with the recipe's dataclasses and resolve a plan."""
    from trl import TrlParser

    from trl_grpo_ext.config.recipe_parse import RECIPE_DATACLASSES
    from trl_grpo_ext.plan import resolve_plan

    monkeypatch.setenv("WORLD_SIZE", "1")
    script_args, training_args, model_args, push_args = TrlParser(RECIPE_DATACLASSES).parse_args_and_config(
        ["--config", str(ROOT / "recipes" / "configs" / config), "--bf16", "false", "--use_cpu", "true"])
    assert training_args.rewards and model_args.use_peft and training_args.adapter_dtype == "float32"
    if config != "smollm2_arithmetic_cpu.yaml":  # the real-model CPU config keeps a float32 base (docs/recipes.md)
        assert model_args.load_in_4bit and model_args.use_bnb_nested_quant and model_args.bnb_4bit_quant_type == "nf4"
    embedded = script_args.dataset_name.startswith("embedded:")
    dataset_size = script_args.embedded_num_prompts if embedded else 7473
    plan = resolve_plan(training_args.resolved.quantity_fields(), dataset_size, 1, training_args.max_completion_length)
    # GSM8K: 8 prompts/step -> floor(7473 / 8) = 934 steps/epoch, stopped at 500; tiny: 2/step, 120/epoch, 1 epoch =
    # 120; arithmetic: 3/step -> floor(2000 / 3) = 666 steps/epoch, stopped at 40
    expected = {"openai/gsm8k": (934, 500), "embedded:count-char": (120, 120), "embedded:arithmetic": (666, 40)}
    assert (plan.steps_per_epoch, plan.total_steps) == expected[script_args.dataset_name]


def test_every_field_of_ours_is_in_the_configuration_reference():
    from dataclasses import fields

    from trl import GRPOConfig, ScriptArguments

    from trl_grpo_ext import GRPOExtConfig
    from trl_grpo_ext.config.recipe_parse import RecipeArguments
    from trl_grpo_ext.hub import HubPushArguments

    reference = (ROOT / "docs" / "configuration.md").read_text()
    ours = ({f.name for f in fields(GRPOExtConfig)} - {f.name for f in fields(GRPOConfig)}) | (
        {f.name for f in fields(RecipeArguments)} - {f.name for f in fields(ScriptArguments)}) | {
        f.name for f in fields(HubPushArguments)}
    assert len(ours) > 20
    assert sorted(name for name in ours if f"`{name}`" not in reference) == []


def test_unknown_reward_parameter_fails_before_loading(tmp_path):
    message = _error(["--config", tiny_cpu_yaml(tmp_path, rewards=[{"name": "char_fraction", "kwargs": {"targt": "a"}}])])
    assert "targt" in message


@pytest.mark.slow  # a subprocess run of 8 s or more: `make test-slow`
def test_train_under_accelerate_ends_a_refused_config_with_one_line(tmp_path):
    """`trl-grpo-ext train --accelerate_config cpu`: a refused config ends with its one line, no CalledProcessError
    traceback (it is refused before accelerate starts; a failure inside the recipe runs under accelerate's --quiet)."""
    result = subprocess.run(
        [sys.executable, "-m", "trl_grpo_ext.cli.main", "train", "--config", tiny_cpu_yaml(tmp_path), "--accelerate_config", "cpu",
         "--learnig_rate", "1"],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"})
    assert result.returncode != 0
    assert "Traceback" not in result.stderr and "CalledProcessError" not in result.stderr, result.stderr
    assert [line for line in result.stderr.splitlines() if line.strip()] == [
        "error: unknown key(s): '--learnig_rate' (did you mean 'learning_rate'?). Remove or rename them; valid keys are "
        "the fields of RecipeArguments, GRPOExtConfig (every GRPOConfig field), trl.ModelConfig and HubPushArguments "
        "(docs/configuration.md)."]


#: three independent problems: an unknown key, a value out of range, a setting that would be ignored
THREE_PROBLEMS = {"learnig_rate": 1e-5, "temperature": 0, "max_resample_rounds": 2}
THREE_LINES = [
    "error: unknown key(s): 'learnig_rate' (did you mean 'learning_rate'?).",
    "error: temperature=0 must be a number > 0.",
    "error: max_resample_rounds=2 only takes effect with zero_variance_filter: resample",
]


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error: ")]


def _assert_three(lines: list[str]):
    assert len(lines) == 3, lines
    for start in THREE_LINES:
        assert sum(line.startswith(start) for line in lines) == 1, (start, lines)


@pytest.mark.slow  # a subprocess run of 8 s or more: `make test-slow`
def test_recipe_lists_every_problem_and_exits_2(tmp_path):
    result = subprocess.run(
        [sys.executable, str(ROOT / "recipes" / "grpo_qlora.py"), "--config", tiny_cpu_yaml(tmp_path, **THREE_PROBLEMS)],
        capture_output=True, text=True, cwd=ROOT, timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    _assert_three(_error_lines(result.stderr))
    assert result.stderr.count("\n") == 3


@pytest.mark.slow  # a subprocess run of 8 s or more: `make test-slow`
def test_accelerate_launch_lists_every_problem_and_shows_the_recipe_s_status(tmp_path):
    """Under `accelerate launch` the recipe prints the same three lines and exits 2; accelerate's launcher then exits
    1 whatever its child's status (accelerate/commands/launch.py, simple_launcher), naming the child's 2."""
    result = subprocess.run(
        [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
         str(ROOT / "recipes" / "accelerate_configs" / "cpu.yaml"), str(ROOT / "recipes" / "grpo_qlora.py"),
         "--config", tiny_cpu_yaml(tmp_path, **THREE_PROBLEMS)],
        capture_output=True, text=True, cwd=ROOT, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    # accelerate >= 1.16 tees the script's stderr and repeats its tail after it, as the cause of its traceback
    # ("RuntimeError: error: ..."): the script's own lines are those before
    _assert_three(_error_lines(re.split(r"^(?:RuntimeError: |Traceback \(most recent call last\))", result.stderr,
                                        flags=re.M)[0]))
    assert result.returncode == 1  # accelerate's, not the recipe's
    assert "returned non-zero exit status 2" in result.stderr


@pytest.mark.slow  # a subprocess run of 8 s or more: `make test-slow`
def test_train_under_accelerate_refuses_every_problem_with_exit_2(tmp_path):
    """`trl-grpo-ext train --accelerate_config cpu` checks the config before it starts accelerate: exit 2."""
    result = subprocess.run(
        [sys.executable, "-m", "trl_grpo_ext.cli.main", "train", "--config", tiny_cpu_yaml(tmp_path, **THREE_PROBLEMS),
         "--accelerate_config", "cpu"],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 2
    _assert_three([line for line in result.stderr.splitlines() if line.strip()])
