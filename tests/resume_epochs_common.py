"""Shared by tests/test_resume_epochs.py (1 process) and tests/resume_epochs_worker.py (2 processes, torchrun).

The task: 4 prompts with ids 0-3, 2 per optimizer step, G 4, LoRA on the embedded tiny model. Prompts with an odd
id get the constant reward 1.0 (their groups are uniform, which the zero-variance filter acts on); prompts with an
even id get the number of distinct characters of the completion / 8, so the rewards (and through them the adapter) depend
on every generated token. `RecordingReward` logs, per call, the optimizer step and the ids and rewards it scored.
"""

from __future__ import annotations

import torch
from datasets import Dataset
from factories import tiny_trainer

from trl_grpo_ext import GRPOExtTrainer
from trl_grpo_ext.models.embedded import tiny

G = 4
NUM_PROMPTS = 4
PROMPTS_PER_STEP = 2


def dataset() -> Dataset:
    rows = tiny.count_char_rows(NUM_PROMPTS, target="a")
    for i, row in enumerate(rows):
        row["id"] = i
    return Dataset.from_list(rows)


class RecordingReward:
    """Reward (see the module docstring) that appends ``(global_step, ids, rewards)`` to ``calls`` at every call."""

    __name__ = "recording_reward"

    def __init__(self):
        self.calls: list[tuple[int, list[int], list[float]]] = []

    def __call__(self, completions, id, trainer_state, **kwargs):
        texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
        rewards = [1.0 if i % 2 else len(set(text)) / 8 for text, i in zip(texts, id)]
        self.calls.append((trainer_state.global_step, list(id), rewards))
        return rewards


def trainer(output_dir, reward: RecordingReward, **overrides) -> GRPOExtTrainer:
    """A trainer of the task above: LoRA r 4 on q/v, one micro-batch per step, a checkpoint every step."""
    from peft import LoraConfig

    settings = dict(prompts_per_step=PROMPTS_PER_STEP, num_generations=G, micro_batch_size=PROMPTS_PER_STEP * G,
                    total_epochs=3, max_completion_length=8, learning_rate=3e-2, save_strategy="steps", save_steps=1,
                    seed=0)
    return tiny_trainer(output_dir, reward, dataset(),
                        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
                        **{**settings, **overrides})


def trl_prompt_order(epochs: int, seed: int = 0) -> list[list[int]]:
    """The prompt ids of each optimizer step of TRL's uninterrupted `RepeatSampler`, worked out from its definition:
    one generator seeded once, one ``randperm`` per epoch, cut into chunks of PROMPTS_PER_STEP."""
    generator = torch.Generator().manual_seed(seed)
    steps = []
    for _ in range(epochs):
        order = torch.randperm(NUM_PROMPTS, generator=generator).tolist()
        steps += [order[i : i + PROMPTS_PER_STEP] for i in range(0, NUM_PROMPTS, PROMPTS_PER_STEP)]
    return steps


def step_log(trainer_) -> list[dict]:
    """Per optimizer step: the step and the logged values that depend on the data and the weights."""
    keys = ("step", "reward", "loss", "grad_norm", "frac_reward_zero_std")
    return [{k: e.get(k) for k in keys} for e in trainer_.state.log_history if "loss" in e]
