"""The front door: one way to read a config for plan, train and the recipe (trl_grpo_ext.config.frontdoor)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
from factories import tiny_cpu_yaml, unset_env

from trl_grpo_ext.config.frontdoor import ConfigError, read_run_args, resolve_config, shipped_configs

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _one_process(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)


@pytest.mark.parametrize("light", [True, False], ids=["plan", "recipe"])
def test_every_unknown_key_is_named_once_and_list_values_are_not_keys(tmp_path, light):
    path = tiny_cpu_yaml(tmp_path, learnig_rate=1e-5, num_generatons=4, lora_target_modules=["q_proj", "k_proj"],
                   reward_modle=["accuracy", "format"])
    with pytest.raises(ConfigError) as info:
        read_run_args(["--config", path, "--totl_epochs", "2"], light=light)
    message = str(info.value)
    assert "\n" not in message
    for key, close in [("learnig_rate", "learning_rate"), ("num_generatons", "num_generations"),
                       ("--totl_epochs", "total_epochs")]:
        assert message.count(f"'{key}'") == 1 and f"'{key}' (did you mean '{close}'?)" in message
    assert message.count("'reward_modle'") == 1
    assert "q_proj" not in message and "accuracy" not in message


@pytest.mark.parametrize("light", [True, False], ids=["plan", "recipe"])
def test_renamed_keys_are_read_under_their_new_name(tmp_path, capsys, light):
    path = tiny_cpu_yaml(tmp_path, torch_dtype="float32", warmup_ratio=0.1, lr_scheduler_type="cosine")
    script_args, training_args, model_args, _ = read_run_args(["--config", path], light=light)
    assert model_args.dtype == "float32"
    assert training_args.warmup_steps == 0.1  # transformers 5: below 1 is a fraction of the steps
    err = capsys.readouterr().err
    assert "note: torch_dtype read as dtype" in err and "note: warmup_ratio read as warmup_steps" in err


def test_old_and_new_name_together_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="'warmup_ratio' and 'warmup_steps' are both set"):
        read_run_args(["--config", tiny_cpu_yaml(tmp_path, warmup_ratio=0.1, warmup_steps=5)], light=True)


def test_trl_s_deprecated_cap_is_read_by_trl(tmp_path):
    """`vllm_importance_sampling_cap` is TRL's own deprecated field: its GRPOConfig copies it over clip_max."""
    run = read_run_args(["--config", tiny_cpu_yaml(tmp_path, vllm_importance_sampling_cap=2.0)])
    assert run.training_args.vllm_importance_sampling_clip_max == 2.0


@pytest.mark.parametrize("key, value, says", [
    ("vllm_device", "auto", "vllm_mode"),
    ("dataset_configs", ["default"], "did you mean 'dataset_config'?"),
    ("cosine_max_len", 1000, "kwargs"),
    ("benchmarks", ["aime24"], "trl-grpo-ext eval"),
])
def test_removed_or_unsupported_keys_say_what_to_do(tmp_path, key, value, says):
    with pytest.raises(ConfigError) as info:
        read_run_args(["--config", tiny_cpu_yaml(tmp_path, **{key: value})], light=True)
    assert f"'{key}'" in str(info.value) and says in str(info.value)


def test_empty_open_r1_lists_are_accepted(tmp_path):
    run = read_run_args(["--config", tiny_cpu_yaml(tmp_path, benchmarks=[], callbacks=[])], light=True)
    assert "benchmarks" not in run.user_values


@pytest.mark.parametrize("light", [True, False], ids=["plan", "recipe"])
def test_reward_funcs_is_another_name_for_rewards(tmp_path, light):
    path = tiny_cpu_yaml(tmp_path, drop=["rewards"], reward_funcs=["char_fraction", "trl_grpo_ext.rewards.builtin.Format"])
    _, training_args, _, _ = read_run_args(["--config", path], light=light)
    names = [r if isinstance(r, str) else r["name"] for r in training_args.rewards]
    assert names == ["char_fraction", "trl_grpo_ext.rewards.builtin.Format"]
    with pytest.raises(ConfigError, match="'reward_funcs' and 'rewards' are both set"):
        read_run_args(["--config", tiny_cpu_yaml(tmp_path, reward_funcs=["format"])], light=light)


def test_reward_funcs_on_the_command_line(tmp_path):
    path = tiny_cpu_yaml(tmp_path, drop=["rewards"])
    _, training_args, _, _ = read_run_args(["--config", path, "--reward_funcs", "char_fraction", "format"], light=True)
    assert training_args.rewards == ["char_fraction", "format"]


@pytest.mark.parametrize("light", [True, False], ids=["plan", "recipe"])
def test_command_line_overrides_the_file_and_given_keys_are_recorded(tmp_path, light):
    run = read_run_args(["--config", tiny_cpu_yaml(tmp_path), "--learning_rate", "0.5", "--no_plot"], light=light)
    assert run.training_args.learning_rate == 0.5 and run.script_args.plot is False
    assert {"learning_rate", "plot", "prompts_per_step", "rewards"} <= set(run.user_values)
    assert "per_device_train_batch_size" not in run.user_values


@pytest.mark.parametrize("light", [True, False], ids=["plan", "recipe"])
def test_a_list_on_the_command_line_is_hf_argument_parsers_spelling(tmp_path, light):
    run = read_run_args(["--config", tiny_cpu_yaml(tmp_path), "--lora_target_modules", "k_proj", "o_proj", "--plot",
                         "false"], light=light)
    assert run.model_args.lora_target_modules == ["k_proj", "o_proj"] and run.script_args.plot is False


def test_bad_value_type_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match="num_generations.*invalid int value: 'two'"):
        read_run_args(["--config", tiny_cpu_yaml(tmp_path), "--num_generations", "two"], light=True)


def test_an_unknown_accelerator_config_key_is_one_line_not_a_traceback(tmp_path):
    """transformers raises a TypeError for it when the recipe's config is built (before any model loads)."""
    with pytest.raises(ConfigError, match=r"^AcceleratorConfig.__init__\(\) got an unexpected keyword argument 'bogus'"):
        read_run_args(["--config", tiny_cpu_yaml(tmp_path, accelerator_config={"bogus": 1})], announce=False)


@pytest.mark.parametrize("light", [True, False], ids=["plan", "recipe"])
@pytest.mark.parametrize("key, value, says", [
    # argparse types only string defaults: these reached TrainingArguments / LoraConfig as written
    ("use_peft", 2, "use_peft=2 must be true or false. Fix: write true or false."),
    ("gradient_checkpointing", [], "gradient_checkpointing=[] must be true or false."),
    ("learning_rate", [1e-4], "learning_rate=[0.0001] must be a number. Fix: write a number."),
    ("run_name", 5, 'run_name=5 must be a string. Fix: quote it: run_name: "5".'),
    ("hub_model_id", True, "hub_model_id=True must be a string."),
    # PEFT iterates a string's characters (modules_to_save 'l', 'm', ...)
    ("lora_modules_to_save", "lm_head", "lora_modules_to_save='lm_head' must be a list of strings. Fix: write "
                                        "[lm_head]."),
    ("reward_weights", 1.0, "reward_weights=1.0 must be a list of numbers."),
    ("lora_target_modules", [1, 2], "lora_target_modules=[1, 2] must be a list of strings."),
    # a whole-valued float passed the range and reached PEFT (nn.Linear(..., 8.0): a TypeError traceback)
    ("lora_r", 8.0, "lora_r=8.0 must be a whole number. Fix: write a whole number without a decimal point."),
])
def test_a_yaml_value_of_the_wrong_type_is_refused(tmp_path, light, key, value, says):
    with pytest.raises(ConfigError, match=re.escape(says)):
        read_run_args(["--config", tiny_cpu_yaml(tmp_path, **{key: value})], light=light)


@pytest.mark.parametrize("key, value, read", [
    ("gradient_checkpointing", "yes", True),  # a string: argparse's string_to_bool reads it
    ("learning_rate", 1, 1),  # an int for a float
    ("lora_target_modules", "all-linear", "all-linear"),  # PEFT's own word
    ("learning_rate", "5e-1", 0.5),  # PyYAML reads 5e-1 as a string, argparse types it
])
def test_a_yaml_value_its_field_can_read_is_kept(tmp_path, key, value, read):
    run = read_run_args(["--config", tiny_cpu_yaml(tmp_path, **{key: value})], light=True)
    assert {**vars(run.training_args), **vars(run.model_args)}[key] == read


def test_shipped_configs_by_name():
    assert {"tiny_cpu", "qwen2.5-0.5b-instruct_gsm8k"} <= set(shipped_configs())
    assert resolve_config("tiny_cpu") == resolve_config("tiny_cpu.yaml") == shipped_configs()["tiny_cpu"]
    assert resolve_config("cpu", kind="accelerate_configs").name == "cpu.yaml"
    with pytest.raises(ConfigError, match="Did you mean 'tiny_cpu'"):
        resolve_config("tiny_cpy")


@pytest.mark.parametrize("name", sorted(shipped_configs()))
def test_front_door_reads_shipped_configs_as_trl_parser_does(name, monkeypatch):
    """The real path gives exactly what TRL's TrlParser gives on the same file and overrides."""
    from trl import TrlParser

    from trl_grpo_ext.config.recipe_parse import RECIPE_DATACLASSES

    argv = ["--config", str(shipped_configs()[name]), "--bf16", "false", "--use_cpu", "true", "--seed", "3"]
    ours = read_run_args(argv)
    theirs = TrlParser(RECIPE_DATACLASSES).parse_args_and_config(argv)
    for mine, trl_one in zip(ours, theirs):
        assert _values(mine) == _values(trl_one)


def _values(args) -> dict:
    return args.to_dict() if hasattr(args, "to_dict") else vars(args)


@pytest.mark.parametrize("name", sorted(shipped_configs()))
def test_twins_hold_the_values_the_recipe_reads(name):
    """Every key a shipped config sets reads the same in plan's twins and in the real dataclasses (except TRL's own
    fields, which the config writes from its resolved values; the user's own fields stay as given)."""
    argv = ["--config", str(shipped_configs()[name]), "--bf16", "false", "--use_cpu", "true"]
    light, real = read_run_args(argv, light=True), read_run_args(argv)
    resolved = {*real.training_args.resolved.trl_fields(), "bf16", "report_to"}  # report_to: "none" -> []
    for twin, actual in zip(light, real):
        for key in set(light.user_values) - resolved:
            if hasattr(twin, key):
                assert getattr(twin, key) == getattr(actual, key), key


def test_validation_runs_for_plan_and_recipe_on_the_keys_the_user_set(tmp_path, monkeypatch):
    from trl_grpo_ext import validation

    seen = []

    def record(*args, **kwargs):
        seen.append((type(args[1]).__name__, hasattr(args[1], "resolved"), "prompts_per_step" in kwargs["user_values"],
                     "weight_decay" in kwargs["user_values"]))

    monkeypatch.setattr(validation, "validate_run_args", record)
    read_run_args(["--config", tiny_cpu_yaml(tmp_path)], light=True)
    read_run_args(["--config", tiny_cpu_yaml(tmp_path), "--weight_decay", "0.01"])
    # the twin carries the real class's name (but no resolved values); the YAML's keys and the command line's are
    # what the user set. plan and the recipe validate once, the same way, on the values as given: every problem at
    # once (the recipe's real dataclasses then run only their own __post_init__).
    assert seen == [("GRPOExtConfig", False, True, False), ("GRPOExtConfig", False, True, True)]


def test_plan_takes_overrides_and_refuses_what_the_recipe_refuses(tmp_path):
    path = tiny_cpu_yaml(tmp_path)
    cli = [sys.executable, "-m", "trl_grpo_ext.cli.main", "plan", "--config", path, "--json"]
    ok = subprocess.run([*cli, "--prompts_per_step", "4"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert '"prompts_per_step": 4' in ok.stdout and '"total_steps": 60' in ok.stdout  # floor(240 / 4) = 60, 1 epoch
    bad = subprocess.run([*cli, "--learnig_rate", "3"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "did you mean 'learning_rate'" in bad.stderr


def test_rewards_into_a_closed_pipe_ends_without_a_traceback():
    rewards = f"{sys.executable} -m trl_grpo_ext.cli.main rewards"
    # `| true` closes the pipe before the first write: the old code died there with a BrokenPipeError traceback
    result = subprocess.run(f"{rewards} | head -1; {rewards} | true", shell=True, cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.stdout.count("\n") == 1
    assert "Traceback" not in result.stderr and "BrokenPipe" not in result.stderr


@pytest.mark.parametrize("cli, says", [
    (["--dtype", "float32", "--torch_dtype", "bfloat16"], "'torch_dtype' and 'dtype' are both set on the command line"),
    (["--rewards", "char_fraction", "--reward_funcs", "char_fraction"], "'reward_funcs' and 'rewards' are both set"),
    (["--warmup_ratio", "0.1", "--warmup_steps", "3"], "'warmup_ratio' and 'warmup_steps' are both set"),
])
def test_old_and_new_name_together_on_the_command_line_are_refused(tmp_path, cli, says):
    """Both names on the command line: refused (argparse alone would keep whichever came last, silently)."""
    with pytest.raises(ConfigError, match=says):
        read_run_args(["--config", tiny_cpu_yaml(tmp_path), *cli], light=True)


@pytest.mark.parametrize("light", [True, False], ids=["plan", "recipe"])
def test_old_name_on_the_command_line_overrides_the_new_name_in_the_yaml(tmp_path, light):
    _, _, model_args, _ = read_run_args(["--config", tiny_cpu_yaml(tmp_path, dtype="bfloat16"),
                                         "--torch_dtype", "float32"], light=light)
    assert model_args.dtype == "float32"


def test_wandb_keys_of_the_yaml_set_the_environment_unless_it_is_set(tmp_path, monkeypatch, capsys):
    import os

    unset_env(monkeypatch, "WANDB_PROJECT")
    read_run_args(["--config", tiny_cpu_yaml(tmp_path, wandb_project="grpo-runs")], light=True)
    assert os.environ["WANDB_PROJECT"] == "grpo-runs"
    assert "wandb_project: set WANDB_PROJECT=grpo-runs" in capsys.readouterr().err
    monkeypatch.setenv("WANDB_PROJECT", "preset")
    read_run_args(["--config", tiny_cpu_yaml(tmp_path, wandb_project="mine")], light=True)
    assert os.environ["WANDB_PROJECT"] == "preset"
    assert "WANDB_PROJECT is already set to 'preset' in the environment, which wins" in capsys.readouterr().err


@pytest.mark.parametrize("light", [True, False], ids=["plan", "recipe"])
@pytest.mark.parametrize("mode", ["mask", "resample"])
def test_trl_batch_fields_with_the_zero_variance_filter_are_accepted(tmp_path, light, mode):
    """TRL's own batch fields (no prompts_per_step) with the filter on: the filter's checks run on what the user set,
    not on the generation_batch_size / steps_per_generation TRL derived (a config holds both after __post_init__)."""
    path = tiny_cpu_yaml(tmp_path, drop=("prompts_per_step", "micro_batch_size", "total_training_steps",
                                         "total_epochs"),
                         per_device_train_batch_size=8, gradient_accumulation_steps=2, num_generations=8, max_steps=3,
                         zero_variance_filter=mode)
    _, training_args, _, _ = read_run_args(["--config", path], light=light)
    assert training_args.zero_variance_filter == mode


@pytest.mark.parametrize("light", [True, False], ids=["plan", "recipe"])
def test_refused_and_unknown_keys_are_reported_with_the_values_problems(tmp_path, light):
    """A removed key, a key under both names, an unknown key and a value out of range: four lines in one error."""
    path = tiny_cpu_yaml(tmp_path, vllm_device="auto", warmup_ratio=0.1, warmup_steps=3, lerning_rate=1e-4, temperature=-1,
                         lr_scheduler_type="cosine")
    with pytest.raises(ConfigError) as info:
        read_run_args(["--config", path, "--reward_modle", "x"], light=light)
    problems = info.value.problems
    assert str(info.value).splitlines() == problems and len(problems) == 4, problems
    assert problems[0].startswith("'warmup_ratio' and 'warmup_steps' are both set in the config")
    assert problems[1].startswith("'vllm_device': removed from TRL's GRPOConfig")
    assert problems[2].startswith("unknown key(s): 'lerning_rate' (did you mean 'learning_rate'?), '--reward_modle'")
    assert problems[3].startswith("temperature=-1 must be a number > 0. Fix:")


@pytest.mark.parametrize("words, line", [
    (["--report_to", "wandb", "tensorboard"], "Some specified arguments are not used by the HfArgumentParser: "
                                              "['tensorboard']"),
    (["--use_cpu", "true", "false"], "not used by the HfArgumentParser: ['false']"),
    (["--learning_rate", "-1e-5"], "argument --learning_rate/--learning-rate: expected one argument"),
])
def test_stray_words_and_negative_exponents_get_the_parsers_line(words, line):
    """Several values for a one-value option, and a negative number in exponent form (write --learning_rate=-1e-5):
    refused by TRL's parser and argparse before any model loads (stray words after the config's other problems)."""
    with pytest.raises(ValueError) as caught:
        read_run_args(["--config", "tiny_cpu", "--temperature", "0", *words], light=True)
    lines = str(caught.value).splitlines()
    assert line in lines[-1] and ("temperature=0" in lines[0]) == ("not used" in line)


def test_yaml_merge_keys_are_read_and_may_be_overridden(tmp_path):
    from trl_grpo_ext.config.frontdoor import load_yaml

    path = tmp_path / "merge.yaml"
    path.write_text("base: &kw {weight: 1.0, name: length}\nrewards:\n  - {<<: *kw, name: char_fraction}\n")
    assert load_yaml(path)["rewards"] == [{"weight": 1.0, "name": "char_fraction"}]


@pytest.mark.parametrize("text", ["1: 3\n", "true: 1\n"])
def test_a_key_that_is_no_name_is_one_line(tmp_path, text):
    """`1: 3` crashed the unknown-key message with an AttributeError (a breaker's finding): an unknown key."""
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match="unknown key"):
        read_run_args(["--config", str(path)], light=True)


@pytest.mark.parametrize("command", ["plan", "train", "eval"])
def test_config_given_twice_is_refused_by_every_command(command, capsys):
    """argparse kept the last --config and the recipe's reader the first: plan and the run read different configs."""
    from trl_grpo_ext.cli.main import main

    with pytest.raises(SystemExit) as info:
        main([command, "--config", "tiny_cpu", "--config", "smollm2_arithmetic_cpu"])
    assert info.value.code == 2
    assert "--config is given twice (tiny_cpu, smollm2_arithmetic_cpu)" in capsys.readouterr().err


def test_the_recipe_s_reader_refuses_two_configs_and_reads_config_equals_path():
    with pytest.raises(ConfigError, match="unknown key\\(s\\): '--config'"):
        read_run_args(["--config", "tiny_cpu", "--config=tiny_cpu"], light=True)
    run = read_run_args(["--config=tiny_cpu", "--learning_rate", "1e-3"], light=True)
    assert Path(run.config_path).name == "tiny_cpu.yaml" and run.training_args.learning_rate == 1e-3


def test_a_no_flag_of_a_field_that_defaults_to_false_is_named_with_its_fix(tmp_path):
    """HfArgumentParser makes --no_X only for booleans that default to true; --no_use_peft got its "not used" line."""
    with pytest.raises(ConfigError, match=r"'--no_use_peft' \(did you mean 'use_peft'\?\)"):
        read_run_args(["--config", tiny_cpu_yaml(tmp_path), "--no_use_peft"], light=True)
    run = read_run_args(["--config", tiny_cpu_yaml(tmp_path), "--no_plot"], light=True)  # plot defaults to true
    assert run.script_args.plot is False


@pytest.mark.parametrize("light", [True, False], ids=["plan", "recipe"])
def test_a_hyphenated_yaml_key_is_named_with_the_field_it_means(tmp_path, light):
    # it reached argparse's set_defaults and ended in a TypeError traceback (RunArgs got a fifth namespace)
    with pytest.raises(ConfigError, match=re.escape("unknown key(s): 'zero-variance-filter' (did you mean "
                                                    "'zero_variance_filter'?)")):
        read_run_args(["--config", tiny_cpu_yaml(tmp_path, **{"zero-variance-filter": "mask"})], light=light)


@pytest.mark.parametrize("key", ["use-peft", "use_pef"])
def test_a_misspelt_switch_is_the_only_problem_its_settings_report(tmp_path, key):
    # `use-peft: true` beside `lora_r: 8` also refused lora_r as needing use_peft: true, which the user had written
    with pytest.raises(ConfigError) as caught:
        read_run_args(["--config", tiny_cpu_yaml(tmp_path, drop=("use_peft",), **{key: True, "lora_r": 4})],
                      light=True)
    assert str(caught.value).startswith(f"unknown key(s): '{key}' (did you mean 'use_peft'?)")
    assert "lora_r" not in str(caught.value)


def test_scale_rewards_as_a_yaml_boolean_is_read_as_trl_reads_it(tmp_path):
    # TRL 1.16 documents `scale_rewards: true/false` (GRPOConfig.__post_init__: True -> "group", False -> "none")
    run = read_run_args(["--config", tiny_cpu_yaml(tmp_path, scale_rewards=False)], light=False)
    assert run.training_args.scale_rewards == "none"


def test_a_yaml_string_of_the_wrong_type_gets_argparse_s_line(tmp_path):
    # `num_generations: 1e1` is a string to PyYAML, which argparse types as the command line's
    with pytest.raises(ConfigError, match=re.escape("argument --num_generations/--num-generations: invalid int value: '1e1'")):
        read_run_args(["--config", tiny_cpu_yaml(tmp_path, drop=["num_generations"], num_generations="1e1")],
                      light=True)


def test_a_reward_weights_list_written_with_exponents_is_read_as_numbers(tmp_path):
    path = tiny_cpu_yaml(tmp_path, rewards=["char_fraction"], reward_weights=["5e-1"])  # PyYAML: the string '5e-1'
    assert read_run_args(["--config", path], light=False).training_args.reward_weights == [0.5]
