"""The torch-free twins `plan` parses with (trl_grpo_ext/_fields.py) match the recipe's dataclasses exactly."""

import argparse
import enum

import pytest

from trl_grpo_ext.fieldgen import recipe_tables
from trl_grpo_ext.fieldtable import light_dataclasses
from trl_grpo_ext.frontdoor import hf_argument_parser


def test_the_generated_table_is_current():
    """Fails after a TRL/transformers upgrade or a new field: regenerate with `python -m trl_grpo_ext.fieldgen`."""
    from trl_grpo_ext._fields import TABLES

    current = recipe_tables()
    assert list(TABLES) == list(current) == ["RecipeArguments", "GRPOExtConfig", "ModelConfig", "HubPushArguments"]
    for name in current:
        assert [tuple(row) for row in TABLES[name]] == [tuple(row) for row in current[name]], name


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
    from trl_grpo_ext.launch import RECIPE_DATACLASSES

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
    from trl_grpo_ext.launch import RECIPE_DATACLASSES

    name, value = expected
    base = ["--use_cpu", "true", "--bf16", "false"]
    real = hf_argument_parser(RECIPE_DATACLASSES).parse_args_into_dataclasses(args=base + argv)
    light = hf_argument_parser(light_dataclasses()).parse_args_into_dataclasses(args=base + argv)
    got_real = next(_plain(getattr(ns, name)) for ns in real if hasattr(ns, name))
    got_light = next(getattr(ns, name) for ns in light if hasattr(ns, name))
    assert got_real == got_light == value


def test_the_configuration_reference_is_current():
    """Fails when a field, its help, default or declared check changed: `python -m trl_grpo_ext.fieldgen --docs`."""
    from trl_grpo_ext.fielddocs import DOCS_FILE, render_docs

    committed = DOCS_FILE.read_text(encoding="utf-8")
    assert render_docs(committed) == committed, "docs/configuration.md is stale: run python -m trl_grpo_ext.fieldgen --docs"


def test_the_reference_shows_what_validation_enforces():
    """The generated rows come from the same declarations the checks use: a declared range and choices, worded."""
    from trl_grpo_ext.fielddocs import render_tables

    tables = render_tables()
    assert "| `max_resample_rounds` | `int` | `3` | an integer >= 0 |" in tables
    assert "| `zero_variance_filter` | `str` | `off` | `off`, `mask`, `resample`, `skip` |" in tables
    assert "| `lost_update_warning_threshold` | `float` | `0.2` | a number in [0, 1] |" in tables
    assert "`learning_rate`" not in tables  # TRL's fields are TRL's to document


def test_declared_checks_reach_the_config_and_the_torch_free_table(tmp_path):
    """A field's Annotated Range/Choices is what GRPOExtConfig refuses with and what `_fields.py` carries to `plan`."""
    from trl_grpo_ext import GRPOExtConfig
    from trl_grpo_ext.checks import Range
    from trl_grpo_ext.fieldtable import declared_checks, table_checks

    declared = declared_checks(GRPOExtConfig)
    assert declared["max_resample_rounds"] == {"range": Range(low=0, integer=True, fix="use e.g. 3.",
                                                              source="zero_variance resample")}
    assert declared["adapter_dtype"] == {"choices": ("float32", "bfloat16")}
    assert "learning_rate" not in declared  # TRL's field: a row of validation.RANGES instead
    light = table_checks()
    assert {name: light[name] for name in declared} == declared
    assert light["final_eval"] == {"choices": ("none", "adapter", "compare_base")}  # launch.py's argparse choices
    with pytest.raises(ValueError, match=r"max_resample_rounds=-1 must be an integer >= 0\. Fix: use e\.g\. 3\."):
        GRPOExtConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[], max_resample_rounds=-1)
    with pytest.raises(ValueError, match=r"adapter_dtype='float16' is not valid\. Did you mean 'bfloat16'\? Choose one of 'float32', 'bfloat16'\."):
        GRPOExtConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[], adapter_dtype="float16")
