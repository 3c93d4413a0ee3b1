"""`config.checks`: the examples its docstrings used to carry, as tests."""

import pytest

from trl_grpo_ext.config.checks import Range, RunArgumentError, check_choice, choice_from_yaml


def test_a_range_returns_an_integral_float_as_int():
    assert Range(low=1, integer=True, fix="try 8.").check("num_generations", 4.0) == 4


def test_a_choice_typo_names_the_closest_choice():
    with pytest.raises(RunArgumentError, match=r"^zero_variance_filter='masc' is not valid\. Did you mean 'mask'\? "
                                               r"Choose one of 'off', 'mask', 'resample'\.$"):
        check_choice("zero_variance_filter", "masc", ("off", "mask", "resample"))


def test_a_yaml_boolean_reads_as_the_word_written():
    assert choice_from_yaml(False, ("off", "mask", "resample")) == "off"
    assert choice_from_yaml(False, ("no", "steps", "epoch")) == "no"
    assert choice_from_yaml(True, ("off", "mask")) is True
    assert choice_from_yaml("mask", ("off", "mask")) == "mask"


def test_a_choice_names_the_closest_choice_by_case_then_spelling():
    with pytest.raises(RunArgumentError, match="Did you mean 'dr_grpo'"):
        check_choice("advantage_preset", "Dr_GRPO", ("grpo", "dr_grpo", "rloo"))
    with pytest.raises(RunArgumentError, match=r"is not valid\. Choose one of"):
        check_choice("dtype", "fp32", ("auto", "bfloat16", "float16", "float32"))


@pytest.mark.parametrize("raw", ["abc", "0", "-2", "1.5"])
def test_world_size_from_the_environment_is_one_or_more_processes(raw):
    from trl_grpo_ext.config.checks import RunArgumentError, world_size_from_env

    # "0" and "-2" were read as 1 process, silently (torchrun and accelerate set 1 or more)
    with pytest.raises(RunArgumentError, match=f"WORLD_SIZE='{raw}' in the environment is not a whole number of "
                                               r"processes \(1 or more\)\. Fix: unset it"):
        world_size_from_env({"WORLD_SIZE": raw})
    assert world_size_from_env({}) == 1 and world_size_from_env({"WORLD_SIZE": "4"}) == 4
