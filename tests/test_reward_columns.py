"""A reward's named arguments are dataset columns: each one that TRL does not supply must be a column of the training
and evaluation datasets, checked before the model loads, for built-in, decorated, entry-point and import-path rewards.

The failing report (issue 22): ``def f(completions, assistant, **kw)`` on a dataset without ``assistant`` passed
`plan`, loaded the model and died at the first reward call with a ``RewardFunctionError`` traceback.
"""

from __future__ import annotations

import copy
import functools
import importlib
import json
import sys
from pathlib import Path

import pytest
import yaml

from trl_grpo_ext.rewards import register_reward
from trl_grpo_ext.rewards import registry as reg
from trl_grpo_ext.rewards.parameters import column_arguments
from trl_grpo_ext.rewards.spec import parse_reward_specs
from trl_grpo_ext.validation import RunArgumentError, check_reward_columns, validate_run_args

ROOT = Path(__file__).resolve().parents[1]

MODULE = '''
def needs_assistant(completions, assistant, **kwargs):
    return [float(a in c) for a, c in zip(assistant, completions)]


def needs_prompt(completions, prompt, **kwargs):
    return [0.0 for _ in completions]


class NeedsGold:
    """1.0 where the completion contains the gold. Range {0, 1}. Source: test."""

    def __init__(self, case_sensitive: bool = True):
        self.case_sensitive = case_sensitive
        self.__name__ = "needs_gold"

    def __call__(self, completions, gold, **kwargs):
        return [float(g in c) for g, c in zip(gold, completions)]
'''


@pytest.fixture
def user_rewards(tmp_path, monkeypatch):
    """A user module `user_rewards_mod` on sys.path, and an entry point `needs_gold` to its class; the registry is
    restored afterwards."""
    (tmp_path / "user_rewards_mod.py").write_text(MODULE)
    info = tmp_path / "user_reward_pkg-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: user-reward-pkg\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[trl_grpo_ext.rewards]\nneeds_gold = user_rewards_mod:NeedsGold\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv(reg.DISABLE_ENTRY_POINTS_ENV, raising=False)
    importlib.invalidate_caches()
    reg._ensure_loaded()
    saved = (copy.copy(reg._STATE.entries), dict(reg._STATE.names), reg._STATE.entry_points_loaded)
    reg.reload_entry_points()
    yield tmp_path
    sys.modules.pop("user_rewards_mod", None)
    reg._STATE.entries, reg._STATE.names, reg._STATE.entry_points_loaded = saved


def decorated_reward(completions, target, *, scale: float = 1.0, **kwargs):
    return [scale * float(t in c) for t, c in zip(target, completions)]


def test_column_arguments_are_the_required_named_arguments_trl_does_not_supply():
    def f(prompts, completions, completion_ids, trainer_state, log_extra, log_metric, assistant, *args, n=3,
          **kwargs): ...

    def g(completions, *, answer, scale=1.0, **kwargs): ...

    assert column_arguments(f) == ("assistant",)
    assert column_arguments(g) == ("answer",)
    assert column_arguments(functools.partial(g, answer="x")) == ()  # bound by the registry's parameters
    assert column_arguments(print) == ()  # no readable signature: nothing to check


@pytest.mark.parametrize(
    "reward",
    [
        "user_rewards_mod:needs_assistant",  # an import path
        "user_rewards_mod.needs_assistant",  # the dotted form
    ],
)
def test_an_import_path_reward_argument_must_be_a_column(user_rewards, reward):
    specs = parse_reward_specs(["format", reward])
    with pytest.raises(RunArgumentError) as info:
        check_reward_columns(["prompt", "answer"], specs)
    msg = str(info.value)
    assert msg.startswith(f"rewards[1] {reward!r} takes the argument 'assistant', which TRL fills only from the dataset "
                          "column of that name")
    assert "the training dataset has the columns ['answer', 'prompt']" in msg
    assert "Fix: add a column 'assistant' to the training dataset" in msg and "(assistant=None)" in msg
    check_reward_columns(["prompt", "assistant"], specs)  # the column is there: nothing to say


def test_an_entry_point_reward_argument_must_be_a_column(user_rewards):
    specs = parse_reward_specs([{"name": "needs_gold", "kwargs": {"case_sensitive": False}}])
    with pytest.raises(RunArgumentError, match=r"rewards\[0\] 'needs_gold' takes the argument 'gold'.*\['prompt'\]"):
        check_reward_columns(["prompt"], specs)
    check_reward_columns(["prompt", "gold"], specs)


def test_a_decorated_reward_argument_must_be_a_column_and_its_parameters_are_not(user_rewards):
    register_reward("decorated_target")(decorated_reward)
    specs = parse_reward_specs([{"name": "decorated_target", "kwargs": {"scale": 2.0}}])
    with pytest.raises(RunArgumentError, match=r"'decorated_target' takes the argument 'target'.*evaluation dataset"):
        check_reward_columns(["prompt", "answer"], specs, split="evaluation")
    check_reward_columns(["prompt", "target"], specs)  # `scale` is a parameter, given in kwargs: not a column


def test_a_prompt_argument_is_never_a_column_trl_passes(user_rewards):
    specs = parse_reward_specs(["user_rewards_mod:needs_prompt"])
    with pytest.raises(RunArgumentError, match=r"TRL never passes a column named 'prompt' \(it passes prompts"):
        check_reward_columns(["prompt", "answer"], specs)


def test_builtin_rewards_read_only_what_they_declare():
    specs = parse_reward_specs(["format", {"name": "length", "kwargs": {"max_length": 8}}, "repetition_penalty_reward"])
    check_reward_columns(["prompt"], specs)  # their __call__ takes completions (and completion_ids) and **kwargs
    with pytest.raises(RunArgumentError, match=r"'accuracy' reads the dataset column 'solution' or 'answer'"):
        check_reward_columns(["prompt"], parse_reward_specs(["accuracy"]))


def test_plan_refuses_it_for_a_dataset_whose_columns_it_knows(user_rewards):
    values = {"dataset_name": "embedded:count-char", "rewards": ["char_fraction", "user_rewards_mod:needs_assistant"]}
    with pytest.raises(RunArgumentError, match=r"'user_rewards_mod:needs_assistant' takes the argument 'assistant'.*"
                                               r"\['prompt', 'target'\]"):
        validate_run_args(None, values, None, None, check_model=False)


def test_the_recipe_refuses_it_before_the_model_loads(user_rewards, tmp_path, monkeypatch, capsys):
    """Once, at the argument stage (the recipe's main checks no row again): from the local file's columns, and for a
    dataset whose columns are known only once read (a Hub dataset), by the dataset stage with the config's problems."""
    from trl_grpo_ext.config.recipe_parse import parse_recipe_args

    data = tmp_path / "data"
    data.mkdir()
    for split in ("train", "test"):  # a local dataset's splits share their columns (datasets refuses others)
        (data / f"{split}.jsonl").write_text("\n".join(json.dumps({"prompt": f"say {i}"}) for i in range(8)))
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({
        "model_name_or_path": "embedded:tiny-qwen2", "dataset_name": str(data), "dataset_train_split": "train",
        "dataset_test_split": "test", "final_eval": "adapter", "eval_num_prompts": 4,
        "rewards": ["user_rewards_mod:needs_assistant"], "prompts_per_step": 2, "num_generations": 4,
        "total_training_steps": 1, "use_cpu": True, "bf16": False, "report_to": "none",
        "output_dir": str(tmp_path / "out"), "max_completion_length": 8,
    }))
    with pytest.raises(SystemExit) as refused:
        parse_recipe_args(["--config", str(config)])
    assert refused.value.code == 2
    assert "takes the argument 'assistant'" in capsys.readouterr().err
    import trl_grpo_ext.validation.rewards as rewards

    monkeypatch.setattr(rewards, "known_columns", lambda values: None)  # as for a Hub dataset
    with pytest.raises(SystemExit) as refused:
        parse_recipe_args(["--config", str(config)])
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert "the training dataset has the columns ['prompt']" in err and "evaluation dataset" in err
