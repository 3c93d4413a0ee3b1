"""Tests for trl_grpo_ext.config.advantage_settings (pure: no torch)."""

import dataclasses
import json
import subprocess
import sys

import pytest

from trl_grpo_ext.config.advantage_settings import (
    FIELD_DEFAULTS,
    PRESETS,
    AdvantageConfigError,
    AdvantageSettings,
    normalize_scale_rewards,
    resolve_advantage_settings,
)


def test_module_does_not_import_torch():
    code = "import sys, trl_grpo_ext.config.advantage_settings; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_settings_defaults_are_trl_defaults():
    settings = AdvantageSettings()
    assert dataclasses.asdict(settings) == {
        "baseline": "group_mean",
        "std_scaling": "group",
        "epsilon": 1e-4,
        "std_kind": "sample",
    }
    assert json.loads(json.dumps(dataclasses.asdict(settings))) == dataclasses.asdict(settings)
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.baseline = "leave_one_out"


def test_settings_validation():
    with pytest.raises(AdvantageConfigError, match=r"advantage_baseline='leave-one-out' is not valid\. Did you mean "):
        AdvantageSettings(baseline="leave-one-out")
    with pytest.raises(AdvantageConfigError, match="Choose one of 'group', 'batch', 'none'"):
        AdvantageSettings(std_scaling="global")
    with pytest.raises(AdvantageConfigError, match="advantage_std_kind='biased' is not valid"):
        AdvantageSettings(std_kind="biased")
    for bad in (-1e-4, float("nan"), float("inf"), True, "fast"):
        with pytest.raises(AdvantageConfigError, match=r"advantage_epsilon=.* must be a number >= 0\. Fix: use 1e-4"):
            AdvantageSettings(epsilon=bad)
    assert AdvantageSettings(epsilon="1e-3").epsilon == 1e-3  # a numeric string, as TRL's parser casts it
    assert isinstance(AdvantageSettings(epsilon=0).epsilon, float)
    assert issubclass(AdvantageConfigError, ValueError)


@pytest.mark.parametrize(
    ("settings", "native"),
    [
        (AdvantageSettings(), True),
        (AdvantageSettings(std_scaling="batch"), True),
        (AdvantageSettings(std_scaling="none", epsilon=0.0, std_kind="population"), True),  # ε, kind unused
        (AdvantageSettings(epsilon=1e-6), False),
        (AdvantageSettings(std_kind="population"), False),
        (AdvantageSettings(baseline="leave_one_out", std_scaling="none"), False),
    ],
)
def test_is_trl_native(settings, native):
    assert settings.is_trl_native is native


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, "group"),
        (False, "none"),
        ("True", "group"),
        ("false", "none"),
        ("group", "group"),
        ("batch", "batch"),
        ("none", "none"),
    ],
)
def test_normalize_scale_rewards(value, expected):
    assert normalize_scale_rewards(value) == expected


@pytest.mark.parametrize("value", ["Group", "global", 1, None])
def test_normalize_scale_rewards_rejects(value):
    with pytest.raises(AdvantageConfigError, match=r"scale_rewards=.* is not valid"):
        normalize_scale_rewards(value)


def test_resolve_nothing_set_gives_trl_defaults():
    settings, trl_fields = resolve_advantage_settings()
    assert settings == AdvantageSettings("group_mean", "group", 1e-4, "sample")
    assert trl_fields == {"scale_rewards": "group", "loss_type": "dapo"}


@pytest.mark.parametrize(("scale_rewards", "expected"), [(False, "none"), ("batch", "batch"), (True, "group")])
def test_resolve_follows_trl_scale_rewards(scale_rewards, expected):
    settings, trl_fields = resolve_advantage_settings(scale_rewards=scale_rewards)
    assert settings.std_scaling == expected and trl_fields["scale_rewards"] == expected


def test_resolve_our_field_is_written_to_trl():
    settings, trl_fields = resolve_advantage_settings(advantage_std_scaling="batch", advantage_std_kind="population")
    assert (settings.std_scaling, settings.std_kind) == ("batch", "population")
    assert trl_fields["scale_rewards"] == "batch"


def test_resolve_agreeing_fields():
    settings, _ = resolve_advantage_settings(scale_rewards="batch", advantage_std_scaling="batch")
    assert settings.std_scaling == "batch"


def test_resolve_conflict_names_both_fields():
    with pytest.raises(
        AdvantageConfigError, match=r"advantage_std_scaling='none' conflicts with scale_rewards='batch'"
    ):
        resolve_advantage_settings(scale_rewards="batch", advantage_std_scaling="none")
    with pytest.raises(AdvantageConfigError, match=r"conflicts with scale_rewards=False"):
        resolve_advantage_settings(scale_rewards=False, advantage_std_scaling="group")


@pytest.mark.parametrize(
    ("preset", "expected", "loss_type"),
    [
        ("grpo", AdvantageSettings("group_mean", "group", 1e-4, "sample"), "grpo"),
        ("dr_grpo", AdvantageSettings("group_mean", "none"), "dr_grpo"),
        ("rloo", AdvantageSettings("leave_one_out", "none"), "dr_grpo"),
        ("dapo", AdvantageSettings("group_mean", "group", 1e-4, "sample"), "dapo"),
    ],
)
def test_presets(preset, expected, loss_type):
    settings, trl_fields = resolve_advantage_settings(preset=preset)
    assert settings == expected
    assert trl_fields == {"scale_rewards": expected.std_scaling, "loss_type": loss_type}


def test_every_preset_resolves_and_names_only_known_fields():
    for name, fields in PRESETS.items():
        assert set(fields) <= set(FIELD_DEFAULTS) - {"advantage_preset", "scale_rewards"}, name
        resolve_advantage_settings(preset=name)


def test_preset_with_agreeing_explicit_fields():
    settings, trl_fields = resolve_advantage_settings(
        preset="dr_grpo", scale_rewards=False, advantage_std_scaling="none", loss_type="dr_grpo"
    )
    assert settings.std_scaling == "none" and trl_fields["loss_type"] == "dr_grpo"


def test_preset_conflicts():
    with pytest.raises(
        AdvantageConfigError,
        match=r"advantage_preset='dr_grpo' \(which sets advantage_std_scaling='none'\) conflicts with "
        r"scale_rewards='batch'.*Remove scale_rewards",
    ):
        resolve_advantage_settings(preset="dr_grpo", scale_rewards="batch")
    with pytest.raises(AdvantageConfigError, match=r"advantage_preset='dr_grpo'.*conflicts with loss_type='grpo'"):
        resolve_advantage_settings(preset="dr_grpo", loss_type="grpo")
    with pytest.raises(AdvantageConfigError, match=r"conflicts with advantage_baseline='group_mean'"):
        resolve_advantage_settings(preset="rloo", advantage_baseline="group_mean")
    with pytest.raises(AdvantageConfigError, match=r"conflicts with advantage_epsilon=0.001"):
        resolve_advantage_settings(preset="grpo", advantage_epsilon=1e-3)


def test_explicit_means_different_from_the_default():
    # With a non-None default, a value equal to it counts as unset: the preset wins, no error (documented limit).
    defaults = {**FIELD_DEFAULTS, "advantage_baseline": "group_mean"}
    settings, _ = resolve_advantage_settings(preset="rloo", advantage_baseline="group_mean", defaults=defaults)
    assert settings.baseline == "leave_one_out"
    # The TRL default loss_type "dapo" written out is indistinguishable from unset too.
    _, trl_fields = resolve_advantage_settings(preset="grpo", loss_type="dapo")
    assert trl_fields["loss_type"] == "grpo"


def test_loss_type_passes_through_without_preset():
    _, trl_fields = resolve_advantage_settings(loss_type="bnpo")
    assert trl_fields["loss_type"] == "bnpo"


def test_unknown_values_list_the_valid_ones():
    with pytest.raises(AdvantageConfigError, match=r"advantage_preset='grop' is not valid\. Did you mean 'grpo'\?.*'rloo'"):
        resolve_advantage_settings(preset="grop")
    with pytest.raises(AdvantageConfigError, match="advantage_baseline='mean' is not valid.*'leave_one_out'"):
        resolve_advantage_settings(advantage_baseline="mean")
    with pytest.raises(AdvantageConfigError, match="scale_rewards='global' is not valid"):
        resolve_advantage_settings(scale_rewards="global")
    with pytest.raises(AdvantageConfigError, match="advantage_epsilon=-1.0 must be a number >= 0"):
        resolve_advantage_settings(advantage_epsilon=-1.0)
