"""The twins `plan` parses with (plain dataclasses read from the recipe's dataclasses, without `__post_init__`) give
the parser exactly the real classes' options, and the field declarations reach the checks and the reference."""

import argparse
import dataclasses
import enum

import pytest

from trl_grpo_ext.config.frontdoor import hf_argument_parser, twins


def light_dataclasses():
    return twins()


def _plain(value):
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _options(types_):
    parser = hf_argument_parser(types_)
    options = {}
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        options[tuple(action.option_strings)] = (
            action.dest, action.nargs, _plain(action.const), _plain(action.default), action.required,
            None if action.choices is None else sorted(map(str, _plain(list(action.choices)))),
        )
    return options


def test_twins_give_the_parser_the_same_options_as_the_real_dataclasses():
    from trl_grpo_ext.config.recipe_parse import RECIPE_DATACLASSES

    real, light = _options(RECIPE_DATACLASSES), _options(light_dataclasses())
    assert len(real) > 250  # every field of the four classes, plus --no_* complements of True booleans
    assert real.keys() == light.keys()
    assert {k: v for k, v in light.items() if real[k] != v} == {}


@pytest.mark.parametrize("argv, expected", [
    (["--learning_rate", "0.5"], ("learning_rate", 0.5)),
    (["--lora_target_modules", "q_proj", "k_proj"], ("lora_target_modules", ["q_proj", "k_proj"])),
    (["--bf16", "false"], ("bf16", False)),
    (["--lr_scheduler_type", "cosine"], ("lr_scheduler_type", "cosine")),
])
def test_twins_parse_values_like_the_real_classes(argv, expected):
    from trl_grpo_ext.config.recipe_parse import RECIPE_DATACLASSES

    name, value = expected
    base = ["--use_cpu", "true", "--bf16", "false"]
    real = hf_argument_parser(RECIPE_DATACLASSES).parse_args_into_dataclasses(args=base + argv)
    light = hf_argument_parser(light_dataclasses()).parse_args_into_dataclasses(args=base + argv)
    got_real = next(_plain(getattr(ns, name)) for ns in real if hasattr(ns, name))
    got_light = next(getattr(ns, name) for ns in light if hasattr(ns, name))
    assert got_real == got_light == value


def test_the_configuration_reference_is_current():
    """Fails when a field, its help, default or declared check changed: `python tools/fieldgen.py --docs`."""
    from tools.fielddocs import DOCS_FILE, render_docs

    committed = DOCS_FILE.read_text(encoding="utf-8")
    assert render_docs(committed) == committed, "docs/configuration.md is stale: run python tools/fieldgen.py --docs"


def test_the_reference_shows_what_validation_enforces():
    """The generated rows come from the same declarations the checks use: a declared range and choices, worded."""
    from tools.fielddocs import render_tables

    tables = render_tables()
    assert "| `max_resample_rounds` | `int` | `3` | an integer >= 1 |" in tables
    assert "| `zero_variance_filter` | `str` | `off` | `off`, `mask`, `resample`, `skip` |" in tables
    assert "| `lost_update_warning_threshold` | `float` | `0.2` | a number in [0, 1] |" in tables
    assert "`learning_rate`" not in tables  # TRL's fields are TRL's to document


def test_declared_checks_reach_the_config_and_the_validation_tables(tmp_path):
    """A field's Annotated Range/Choices is what GRPOExtConfig refuses with and what the validation tables hold."""
    from trl_grpo_ext import GRPOExtConfig
    from trl_grpo_ext.config.checks import Range, declared_checks
    from trl_grpo_ext.validation import CHOICES, RANGES

    declared = declared_checks(GRPOExtConfig)
    assert declared["max_resample_rounds"] == {"range": Range(low=1, integer=True, fix="use e.g. 3 (0 rounds would be zero_variance_filter: mask; set that instead).")}
    assert declared["adapter_dtype"] == {"choices": ("float32", "bfloat16")}
    assert "learning_rate" not in declared  # TRL's field: a row of validation.RANGES instead
    assert RANGES["max_resample_rounds"] is declared["max_resample_rounds"]["range"]
    assert CHOICES["adapter_dtype"] == declared["adapter_dtype"]["choices"]
    assert CHOICES["final_eval"] == ("none", "adapter", "compare_base")  # RecipeArguments' argparse choices
    with pytest.raises(ValueError, match=r"max_resample_rounds=0 must be an integer >= 1\. Fix: use e\.g\. 3 \(0 rounds would be zero_variance_filter: mask"):
        GRPOExtConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[], max_resample_rounds=0)
    with pytest.raises(ValueError, match=r"adapter_dtype='float16' is not valid\. Did you mean 'bfloat16'\? Choose one of 'float32', 'bfloat16'\."):
        GRPOExtConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[], adapter_dtype="float16")


def test_the_twins_are_read_from_the_installed_classes(monkeypatch):
    """No copy of the fields to drift: a field the installed GRPOExtConfig gains is a field of its twin (and one it
    lacks is an unknown key), and the twin holds the value as given (no `__post_init__`)."""
    from trl_grpo_ext.config import frontdoor
    from trl_grpo_ext.config.recipe_args import RECIPE_DATACLASSES

    assert [t.__name__ for t in light_dataclasses()] == [c.__name__ for c in RECIPE_DATACLASSES]
    real = {f.name for f in dataclasses.fields(RECIPE_DATACLASSES[1]) if f.init}
    assert {f.name for f in dataclasses.fields(light_dataclasses()[1])} == real
    assert not hasattr(light_dataclasses()[1], "__post_init__")
    with pytest.raises(frontdoor.ConfigError, match="unknown key.*only_in_a_newer_trl"):
        frontdoor.read_run_args(["--config", "tiny_cpu", "--only_in_a_newer_trl", "3"], light=True, announce=False)

    @dataclasses.dataclass
    class Newer(RECIPE_DATACLASSES[1]):
        only_in_a_newer_trl: int = 0

    frontdoor.twins.cache_clear()
    monkeypatch.setattr("trl_grpo_ext.config.recipe_args.RECIPE_DATACLASSES",
                        (RECIPE_DATACLASSES[0], Newer, *RECIPE_DATACLASSES[2:]))
    try:
        run = frontdoor.read_run_args(["--config", "tiny_cpu", "--only_in_a_newer_trl", "3"], light=True,
                                      announce=False)
        assert run.training_args.only_in_a_newer_trl == 3 and run.training_args.zero_variance_filter == "off"
    finally:
        frontdoor.twins.cache_clear()
