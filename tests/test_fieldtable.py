"""The torch-free twins `plan` parses with (trl_grpo_ext/config/_fields.py) match the recipe's dataclasses exactly."""

import argparse
import enum

import pytest

from tools.fieldgen import recipe_tables
from trl_grpo_ext.config.fieldtable import installed_versions, light_dataclasses
from trl_grpo_ext.config.frontdoor import hf_argument_parser


def test_the_generated_table_is_current():
    """Fails after a TRL/transformers upgrade or a new field: regenerate with `python tools/fieldgen.py`."""
    from trl_grpo_ext.config._fields import TABLES, VERSIONS

    assert VERSIONS == installed_versions()

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
    assert "| `max_resample_rounds` | `int` | `3` | an integer >= 0 |" in tables
    assert "| `zero_variance_filter` | `str` | `off` | `off`, `mask`, `resample`, `skip` |" in tables
    assert "| `lost_update_warning_threshold` | `float` | `0.2` | a number in [0, 1] |" in tables
    assert "`learning_rate`" not in tables  # TRL's fields are TRL's to document


def test_declared_checks_reach_the_config_and_the_torch_free_table(tmp_path):
    """A field's Annotated Range/Choices is what GRPOExtConfig refuses with and what `_fields.py` carries to `plan`."""
    from trl_grpo_ext import GRPOExtConfig
    from trl_grpo_ext.config.checks import Range
    from trl_grpo_ext.config.fieldtable import declared_checks, table_checks

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


def _table_with_a_field_the_installed_classes_lack(monkeypatch, versions):
    """``_fields.py`` as if generated on ``versions`` by a TRL whose GRPOConfig had a field ``only_in_the_table``."""
    from trl_grpo_ext.config import _fields

    rows = [*_fields.TABLES["GRPOExtConfig"], ("only_in_the_table", "int", 0, {}, {})]
    monkeypatch.setattr(_fields, "TABLES", {**_fields.TABLES, "GRPOExtConfig": rows})
    monkeypatch.setattr(_fields, "VERSIONS", versions)
    light_dataclasses.cache_clear()


@pytest.fixture
def fresh_twins():
    light_dataclasses.cache_clear()
    yield
    light_dataclasses.cache_clear()


def test_a_table_generated_on_other_versions_is_not_used(monkeypatch, fresh_twins):
    """The drift check: on other installed versions than `_fields.VERSIONS`, `plan` parses with the real classes, so a
    field only the table has is an unknown key; on the table's own versions the twins are used (and accept it)."""
    from trl_grpo_ext.config.frontdoor import ConfigError, dataclass_types, read_run_args
    from trl_grpo_ext.config.recipe_args import RECIPE_DATACLASSES

    argv = ["--config", "tiny_cpu", "--only_in_the_table", "3"]
    _table_with_a_field_the_installed_classes_lack(monkeypatch, installed_versions())
    assert dataclass_types(True) is not RECIPE_DATACLASSES
    assert read_run_args(argv, light=True, announce=False).training_args.only_in_the_table == 3

    _table_with_a_field_the_installed_classes_lack(monkeypatch, {**installed_versions(), "transformers": "5.20.0"})
    assert dataclass_types(True) is RECIPE_DATACLASSES
    with pytest.raises(ConfigError, match="unknown key.*only_in_the_table"):
        read_run_args(argv, light=True, announce=False)
    run = read_run_args(["--config", "tiny_cpu"], light=True, announce=False)  # a valid config still reads
    assert not run.light and run.training_args.resolved.prompts_per_step == 2
