"""GRPOExtTrainer wiring of rewards: Python callables are guarded too; import-path rewards work from the config."""

import sys

import pytest
from factories import tiny_config

from trl_grpo_ext import GRPOExtTrainer
from trl_grpo_ext.models.embedded import tiny
from trl_grpo_ext.rewards.guard import RewardFunctionError

COMMON = dict(prompts_per_step=2, num_generations=4, micro_batch_size=8, total_training_steps=1, max_completion_length=4)


def nan_reward(completions, **kwargs):
    return [float("nan")] * len(completions)


def test_a_python_reward_function_is_guarded(tmp_path, tiny_model_dir, tiny_tokenizer):
    args = tiny_config(tmp_path, **COMMON)
    trainer = GRPOExtTrainer(str(tiny_model_dir), reward_funcs=nan_reward, args=args,
                             train_dataset=tiny.count_char_dataset(8), processing_class=tiny_tokenizer)
    assert trainer.reward_func_names == ["nan_reward"]  # the metric name is the function's own
    with pytest.raises(RewardFunctionError, match="nan_reward"):
        trainer.train()


def test_an_import_path_reward_from_the_config(tmp_path, tiny_model_dir, tiny_tokenizer, monkeypatch):
    (tmp_path / "my_rewards.py").write_text(
        "def ends_with_a(completions, **kwargs):\n"
        "    texts = [c[0]['content'] if isinstance(c, list) else c for c in completions]\n"
        "    return [float(t.endswith('a')) for t in texts]\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    args = tiny_config(tmp_path / "out", rewards=["my_rewards:ends_with_a"], **COMMON)
    trainer = GRPOExtTrainer(str(tiny_model_dir), args=args, train_dataset=tiny.count_char_dataset(8),
                             processing_class=tiny_tokenizer)
    trainer.train()
    assert trainer.state.global_step == 1
    assert "rewards/ends_with_a/mean" in trainer.state.log_history[0]
    sys.modules.pop("my_rewards", None)


def needs_assistant(completions, assistant, **kwargs):  # reads a column the dataset lacks
    return [1.0] * len(completions)


def constant_reward(completions, **kwargs):
    return [1.0] * len(completions)


def test_a_reward_invalid_on_every_completion_stops_the_run_even_with_on_error_none(tmp_path, tiny_model_dir,
                                                                                    tiny_tokenizer):
    """Issue 22: with reward_error_policy none the broken reward was invalid on 8 of 8 completions at every step and
    the run trained to the end on the other reward alone, after one warning."""
    args = tiny_config(tmp_path, reward_error_policy="none", **COMMON)
    trainer = GRPOExtTrainer(str(tiny_model_dir), reward_funcs=[constant_reward, needs_assistant], args=args,
                             train_dataset=tiny.count_char_dataset(8), processing_class=tiny_tokenizer)
    with pytest.raises(RewardFunctionError, match=r"Reward 'needs_assistant': invalid on every one of the 8 completions"
                                                  r" of this call \(completion 0: raised TypeError: .*'assistant'"):
        trainer.train()
    assert trainer.state.global_step == 0


def test_an_embedded_model_name_works_from_python(tmp_path, tiny_model_dir):
    # the README's Python example, offline: the embedded name is built locally as the recipe does (TRL would read it
    # as a Hub repo id and refuse it); TRL loads the tokenizer from the resolved folder
    args = tiny_config(tmp_path, rewards=["char_fraction"], **COMMON)
    trainer = GRPOExtTrainer("embedded:tiny-qwen2", args=args, train_dataset=tiny.count_char_dataset(8))
    assert trainer.model.name_or_path == str(tiny_model_dir)
    trainer.train()
    assert trainer.state.global_step == 1
