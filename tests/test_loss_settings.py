"""Settings that would change nothing or change with a memory setting (issue 22, item 6): the clip without an
off-policy update, ``bnpo``'s dependence on ``micro_batch_size``, and YAML 1.1 booleans for choice fields."""

from __future__ import annotations

import logging

import pytest
from factories import tiny_config

from trl_grpo_ext.cli import plan as plan_cli
from trl_grpo_ext.config.checks import choice_from_yaml
from trl_grpo_ext.config.loss_settings import bnpo_accumulation_warning, clip_takes_effect, ignored_clipping
from trl_grpo_ext.config.recipe_parse import parse_recipe_args
from trl_grpo_ext.validation import RunArgumentError, validate_run_args

BASE_YAML = """\
model_name_or_path: embedded:tiny-qwen2
dataset_name: embedded:count-char
embedded_num_prompts: 64
rewards: [char_fraction]
prompts_per_step: 4
num_generations: 8
total_training_steps: 2
max_completion_length: 8
use_cpu: true
bf16: false
report_to: none
"""


@pytest.mark.parametrize(
    ("ga", "spg", "mu", "acts"),
    [
        (4, 4, 1, False),  # one generation batch per optimizer step, used once: always on-policy
        (4, 4, 2, True),  # μ = 2: the second pass runs after the first optimizer step
        (1, 4, 1, True),  # one generation batch spans 4 optimizer steps
        (4, 2, 2, False),  # two passes over a half-step batch, both inside one optimizer step
        (6, 4, 1, True),  # 6 % 4 = 2: a batch straddles an optimizer step
        (8, 2, 1, False),
    ],
)
def test_the_clip_acts_only_when_an_update_is_off_policy(ga, spg, mu, acts):
    assert clip_takes_effect(ga, spg, mu) is acts


def test_ignored_clipping_names_fields_numbers_and_fix():
    message = ignored_clipping({"epsilon": 0.2, "epsilon_high": 0.28, "delta": None}, loss_type="dapo",
                               gradient_accumulation_steps=4, steps_per_generation=4, num_iterations=1)
    assert message.startswith("epsilon_high=0.28 only takes effect when an update is off-policy, but with "
                              "num_iterations=1, steps_per_generation=4 and gradient_accumulation_steps=4")
    assert "π/π_old is exactly 1" in message and "trl#3757" in message
    assert message.endswith("Fix: set num_iterations: 2 (or more) to reuse each generation batch for several updates, "
                            "or remove epsilon_high.")
    common = dict(gradient_accumulation_steps=4, steps_per_generation=4)
    assert ignored_clipping({"epsilon_high": 0.28}, loss_type="dapo", num_iterations=2, **common) is None
    assert ignored_clipping({"epsilon": 0.2}, loss_type="dapo", num_iterations=1, **common) is None  # TRL's default
    assert ignored_clipping({"epsilon_high": 0.28}, loss_type="sapo", num_iterations=1, **common) is None  # no clip


def test_grpo_ext_config_warns_of_a_clip_that_never_acts(tmp_path):
    from trl_grpo_ext.config.checks import IneffectiveSettingWarning

    with pytest.warns(IneffectiveSettingWarning, match=r"epsilon_high=0\.28 only takes effect when an update is off-po"):
        assert tiny_config(tmp_path, epsilon_high=0.28).epsilon_high == 0.28
    with pytest.warns(IneffectiveSettingWarning, match=r"epsilon=0\.1, delta=1\.5 only take effect"):
        tiny_config(tmp_path, epsilon=0.1, delta=1.5)
    assert tiny_config(tmp_path, epsilon_high=0.28, num_iterations=2).epsilon_high == 0.28
    assert tiny_config(tmp_path, epsilon=0.2).epsilon == 0.2


def test_plan_accepts_the_clip_with_several_updates_per_rollout(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text(BASE_YAML + "epsilon_high: 0.28\nnum_iterations: 2\n")
    assert plan_cli.main(["--config", str(path)]) == 0


@pytest.mark.parametrize(
    ("loss_type", "micro_batch_size", "warned"),
    [("bnpo", 8, True), ("bnpo", 32, False), ("dapo", 8, False), ("grpo", 8, False)],
)
def test_plan_warns_that_bnpo_changes_with_micro_batch_size(loss_type, micro_batch_size, warned, tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text(BASE_YAML + f"loss_type: {loss_type}\nmicro_batch_size: {micro_batch_size}\n")
    assert plan_cli.main(["--config", str(path)]) == 0
    err = capsys.readouterr().err
    # 4 prompts × 8 completions = 32 per step; micro-batches of 8: 4 accumulation steps
    expected = ("warning: loss_type='bnpo' divides each micro-batch's token loss by that micro-batch's own token count "
                "and averages the 4 micro-batches of a step (micro_batch_size=8 of 32 completions per process)")
    assert (expected in err) is warned, err
    if warned:
        assert "Fix: use loss_type: dapo" in err and "or micro_batch_size: 32 (one micro-batch per step)" in err


def test_bnpo_warning_counts_completions_per_process():
    message = bnpo_accumulation_warning("bnpo", 2, 8, 32, world_size=2)  # 16 completions on each of 2 processes
    assert "the 2 micro-batches of a step (micro_batch_size=8 of 16 completions per process)" in message
    assert "micro_batch_size: 16 (one micro-batch per step)" in message


def test_the_trainer_warns_about_bnpo_too(tmp_path, tiny_model_dir, tiny_tokenizer, caplog):
    from trl_grpo_ext import GRPOExtTrainer
    from trl_grpo_ext.models.embedded import tiny

    args = tiny_config(tmp_path, prompts_per_step=2, num_generations=4, micro_batch_size=4, total_training_steps=1,
                       max_completion_length=4, loss_type="bnpo")
    with caplog.at_level(logging.WARNING, logger="trl_grpo_ext.trainer"):
        GRPOExtTrainer(str(tiny_model_dir), reward_funcs=lambda completions, **kw: [0.0] * len(completions), args=args,
                       train_dataset=tiny.count_char_dataset(8), processing_class=tiny_tokenizer)
    assert "averages the 2 micro-batches of a step (micro_batch_size=4 of 8 completions per process)" in caplog.text


# ------------------------------------------------------------------ YAML 1.1 booleans for choice fields
def test_choice_from_yaml():
    assert choice_from_yaml(False, ("off", "mask", "resample")) == "off"
    assert choice_from_yaml(False, ("no", "steps", "epoch")) == "no"
    assert choice_from_yaml(True, ("off", "mask", "resample")) is True  # no choice means "on": refused later
    assert choice_from_yaml(False, ("group", "batch", "none")) is False
    assert choice_from_yaml("mask", ("off", "mask")) == "mask"


def test_unquoted_off_and_no_are_read_as_written_by_plan_and_recipe(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text(BASE_YAML + "zero_variance_filter: off\nsave_strategy: no\neval_strategy: no\n")
    assert plan_cli.main(["--config", str(path)]) == 0
    _, training, _, _ = parse_recipe_args(["--config", str(path)])
    assert training.zero_variance_filter == "off"
    assert (training.save_strategy.value, training.eval_strategy.value) == ("no", "no")


def test_grpo_ext_config_and_validation_read_false_as_off(tmp_path):
    assert tiny_config(tmp_path, zero_variance_filter=False).zero_variance_filter == "off"
    validate_run_args(None, {"zero_variance_filter": False, "save_strategy": False, "rewards": ["format"]}, None, None,
                      check_model=False)
    with pytest.raises(RunArgumentError, match=r"zero_variance_filter=True is not valid\..*write the value in quotes"):
        validate_run_args(None, {"zero_variance_filter": True}, None, None, check_model=False)


def test_the_former_docstring_examples():
    from trl_grpo_ext.training.console import zero_loss_note

    assert [clip_takes_effect(4, 4, 1), clip_takes_effect(4, 4, 2), clip_takes_effect(1, 4, 1),
            clip_takes_effect(4, 2, 2)] == [False, True, True, False]
    assert bnpo_accumulation_warning("dapo", 4, 8, 32) is None and bnpo_accumulation_warning("bnpo", 1, 32, 32) is None
    assert zero_loss_note(0.0, beta=0.04, loss_type="grpo", gradient_accumulation_steps=1, steps_per_generation=1,
                          num_iterations=1) is None
