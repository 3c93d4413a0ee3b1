"""`GRPOExtTrainer` called the way TRL's documentation and examples call `GRPOTrainer`: no `args`, a plain
`trl.GRPOConfig`, `generation_kwargs`, a `peft_config`, an `IterableDataset` with `max_steps`, a reward owned by an
environment. Each run trains on the embedded tiny model (CPU, seconds) and every trainable parameter must change.

The reward counts the letter "a" in the completion (a fraction, so the G completions of a prompt differ and the
advantages are not all 0); the learning rate is high (0.1, as TRL's own tests use) so that every trainable weight
moves visibly in two or three steps.
"""

import logging

import pytest
import torch
from datasets import Dataset
from factories import lora
from trl import GRPOConfig

from trl_grpo_ext import GRPOExtConfig, GRPOExtTrainer
from trl_grpo_ext.models.embedded import tiny

#: what TRL's tests pass to keep a tiny run small, plus the CPU (the tiny model has no bf16 kernels to test here)
SMALL = dict(learning_rate=0.1, per_device_train_batch_size=4, num_generations=4, max_completion_length=8,
             report_to="none", use_cpu=True, bf16=False, save_strategy="no", disable_tqdm=True)


def a_fraction(completions, **kwargs) -> list[float]:
    """Share of "a" in each completion (conversational or plain)."""
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [text.count("a") / max(len(text), 1) for text in texts]


@pytest.fixture(scope="module")
def model_path():
    return str(tiny.ensure_tiny_model())


@pytest.fixture(scope="module")
def tokenizer(model_path):
    return tiny.load_tokenizer(model_path)


def prompts(n: int = 4) -> Dataset:
    return Dataset.from_list(tiny.count_char_rows(n, target="a"))


def trains(trainer) -> None:
    """Train; assert TRL's summary is logged and every trainable parameter changed (TRL's own test)."""
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters() if p.requires_grad}
    assert before
    trainer.train()
    assert trainer.state.log_history[-1]["train_loss"] is not None
    unchanged = [name for name, p in trainer.model.named_parameters() if name in before and torch.equal(p, before[name])]
    assert unchanged == []


def test_no_args_trains_with_the_defaults_and_trl_s_output_dir(model_path, tokenizer, tmp_path, monkeypatch):
    """As TRL's `test_init_minimal`, then trained: defaults everywhere, ``output_dir`` ``<model name>-GRPO``.
    TRL's defaults: 8 completions per device, G 8, 3 epochs: 1 prompt per step, 2 prompts -> 6 steps."""
    monkeypatch.chdir(tmp_path)
    trainer = GRPOExtTrainer(model_path, reward_funcs=a_fraction, train_dataset=prompts(2), processing_class=tokenizer)
    assert isinstance(trainer.args, GRPOExtConfig)
    assert trainer.args.output_dir == f"{model_path.rstrip('/').split('/')[-1]}-GRPO"
    assert (trainer.args.num_generations, trainer.args.per_device_train_batch_size) == (8, 8)
    assert trainer.plan.total_steps == 6
    trains(trainer)
    assert trainer.state.global_step == 6


def test_a_plain_grpo_config_trains_with_its_values_and_says_so(model_path, tokenizer, tmp_path, caplog):
    config = GRPOConfig(output_dir=str(tmp_path), max_steps=3, **SMALL)
    with caplog.at_level(logging.INFO, logger="trl_grpo_ext"):
        trainer = GRPOExtTrainer(model_path, reward_funcs=a_fraction, args=config, train_dataset=prompts(),
                                 processing_class=tokenizer)
    assert isinstance(trainer.args, GRPOExtConfig) and trainer.args.zero_variance_filter == "off"
    # the values the user's config holds, the derived pair included: 4 completions a step = 1 prompt of G 4
    assert (trainer.args.max_steps, trainer.args.learning_rate, trainer.args.generation_batch_size,
            trainer.args.steps_per_generation) == (3, 0.1, 4, 1)
    assert [r.message for r in caplog.records if "plain trl.GRPOConfig" in r.message] != []
    trains(trainer)
    assert trainer.state.global_step == 3


def test_generation_kwargs_duplicating_a_field_are_applied_as_trl_applies_them(model_path, tokenizer, tmp_path):
    """TRL's `test_train_with_generation_kwargs` key: ``top_k`` 50 wins over the field, as in TRL."""
    config = GRPOConfig(output_dir=str(tmp_path), max_steps=2, generation_kwargs={"top_k": 50}, **SMALL)
    trainer = GRPOExtTrainer(model_path, reward_funcs=a_fraction, args=config, train_dataset=prompts(),
                             processing_class=tokenizer)
    seen = []
    generate = trainer.model.generate

    def recording_generate(*args, **kwargs):
        seen.append(kwargs["generation_config"].top_k)
        return generate(*args, **kwargs)

    trainer.model.generate = recording_generate
    trains(trainer)
    assert seen and set(seen) == {50}


def test_a_peft_config_trains_the_adapter_only(model_path, tokenizer, tmp_path):
    config = GRPOConfig(output_dir=str(tmp_path), max_steps=3, **SMALL)
    trainer = GRPOExtTrainer(model_path, reward_funcs=a_fraction, args=config, train_dataset=prompts(),
                             processing_class=tokenizer, peft_config=lora())
    trainable = [name for name, p in trainer.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in name for name in trainable)
    trains(trainer)  # lora_A moves from step 2 on, once lora_B (zero at the start) has


def test_an_iterable_dataset_with_max_steps_trains_and_closes_with_the_stop_line(model_path, tokenizer, tmp_path,
                                                                                 caplog):
    config = GRPOConfig(output_dir=str(tmp_path), max_steps=2, **SMALL)
    trainer = GRPOExtTrainer(model_path, reward_funcs=a_fraction, args=config,
                             train_dataset=prompts().to_iterable_dataset(), processing_class=tokenizer)
    assert trainer.plan.epochs_covered is None
    with caplog.at_level(logging.WARNING, logger="trl_grpo_ext"):
        trains(trainer)
    assert "Stopped at optimizer step 2 by the step limit." in [r.getMessage() for r in caplog.records]


TOOL_TEMPLATE = (  # renders tool calls and tool results, which TRL requires of an environment's chat template
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
    "{% if message.get('tool_calls') %}{{ message['tool_calls'] | tojson }}{% endif %}"
    "{% if message.get('name') %}{{ message['name'] }}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


class CountingEnvironment:
    """Owns the data (its reset returns the prompt) and the reward (``get_reward``: 0, 1, 2, 0, ... by rollout, so
    each group of 4 has a spread)."""

    rollouts = 0

    def reset(self, **kwargs):
        type(self).rollouts += 1
        self.value = float(type(self).rollouts % 3)
        return "Write the letter a."

    def get_reward(self) -> float:
        return self.value


def test_a_reward_owned_by_the_environment_is_a_reward_source(model_path, tokenizer, tmp_path, monkeypatch):
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    tokenizer = tiny.load_tokenizer(model_path)
    tokenizer.chat_template = TOOL_TEMPLATE
    config = GRPOConfig(output_dir=str(tmp_path), max_steps=2, **SMALL)
    trainer = GRPOExtTrainer(model_path, args=config, processing_class=tokenizer,
                             environment_factory=CountingEnvironment)
    assert trainer.reward_func_names == ["CountingEnvironment"]
    trains(trainer)


def test_no_reward_source_and_no_dataset_are_refused_in_trl_s_words(model_path, tmp_path):
    config = GRPOConfig(output_dir=str(tmp_path), **SMALL)
    with pytest.raises(ValueError, match="No reward source provided. Pass reward_funcs=, set `rewards: "):
        GRPOExtTrainer(model_path, args=config, train_dataset=prompts())
    with pytest.raises(ValueError, match=r"`train_dataset` is required unless an `environment_factory` is provided"):
        GRPOExtTrainer(model_path, reward_funcs=a_fraction, args=config)


def test_arguments_after_the_dataset_may_be_given_by_position_as_trl_s(model_path, tokenizer, tmp_path):
    """TRL's order: model, reward_funcs, args, train_dataset, eval_dataset, processing_class, ..."""
    config = GRPOConfig(output_dir=str(tmp_path), max_steps=1, **SMALL)
    eval_rows = prompts(2)
    trainer = GRPOExtTrainer(model_path, a_fraction, config, prompts(), eval_rows, tokenizer)
    assert trainer.eval_dataset is eval_rows and trainer.processing_class is tokenizer
