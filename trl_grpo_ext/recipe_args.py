"""The recipe's argument dataclasses: `RecipeArguments` (data and recipe options) and `RECIPE_DATACLASSES`, the four
classes a recipe config fills (`RecipeArguments`, `GRPOExtConfig`, TRL's `ModelConfig`, `HubPushArguments`).

Kept apart from `launch` (which parses them) so that the front door and the field-table generator can import them
without importing `launch`, which imports the front door.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trl import ModelConfig, ScriptArguments

from .config import GRPOExtConfig
from .eval_plan import FINAL_EVAL_CHOICES
from .hub.push import HubPushArguments

__all__ = ["RecipeArguments", "RECIPE_DATACLASSES"]


@dataclass
class RecipeArguments(ScriptArguments):
    """
    Data arguments of the recipes (on top of TRL's `ScriptArguments`: `dataset_name`, `dataset_config`,
    `dataset_train_split`, ...).

    Args:
        dataset_format (`str`, *optional*, defaults to `"prompt"`):
            `"gsm8k"` maps `question` → chat prompt and `answer` → the number after `####`; `"prompt"` expects a
            `prompt` column already.
        system_prompt (`str`, *optional*):
            System message prepended to every prompt (open-r1's key): GSM8K questions, text prompts and chat prompts
            that do not already start with a system message. GSM8K uses a default asking for <think>/<answer> tags
            when it is unset; other datasets get none.
        dataset_prompt_column (`str`, *optional*, defaults to `"prompt"`):
            Column holding the prompts (open-r1's key). A column other than `prompt` is turned into a one-turn chat
            prompt (`[system,] user`) and kept under `prompt`; the other columns stay for the rewards.
        chat_template (`str`, *optional*):
            A Jinja chat template that replaces the tokenizer's (open-r1's key).
        max_prompt_length (`int`, *optional*):
            Drop training prompts longer than this many tokens (after the chat template) before the plan counts them
            [tokens]. TRL ≤ 1.15's key; TRL 1.16 removed it (it cut long prompts from the left; dropping keeps every
            prompt whole). Unset: every prompt is kept.
        overwrite_output_dir (`bool`, *optional*, defaults to `False`):
            Start a new run in an `output_dir` that holds another run's checkpoints (transformers 4's key, removed in
            transformers 5; honoured here by the output-dir check, which otherwise refuses).
        embedded_num_prompts (`int`, *optional*, defaults to `512`):
            Number of prompts of the embedded `embedded:count-char` task [prompts].
        eval_num_prompts (`int`, *optional*):
            Held-out prompts (the first N of `dataset_test_split`) used by TRL's eval loop (`eval_strategy`) and the
            final evaluation [prompts]. Defaults to the whole split (64 prompts for `embedded:count-char`, 500 for
            `embedded:arithmetic`).
        final_eval (`str`, *optional*, defaults to `"none"`):
            After training, evaluate greedily on the held-out prompts: `"adapter"`, or `"compare_base"` (base and
            adapter on the same prompts, with the paired difference and its 95% interval). Written to
            `eval_results.json` and the model card (see `trl_grpo_ext.evaluation`).
        final_eval_num_samples (`int`, *optional*, defaults to `0`):
            K samples per held-out prompt at the training temperature in the final evaluation, for pass@k and the
            σ = 0 forecast.
        embedded_target (`str`, *optional*, defaults to `"a"`):
            The character the embedded task rewards.
        plot (`bool`, *optional*, defaults to `True`):
            Write `reward_plot.png` into `output_dir` after training.
    """

    dataset_format: str = field(default="prompt", metadata={"help": "gsm8k or prompt (rows already have 'prompt')."})
    system_prompt: str | None = field(default=None, metadata={"help": "System message prepended to every prompt."})
    dataset_prompt_column: str = field(default="prompt", metadata={"help": "Column holding the prompts."})
    chat_template: str | None = field(default=None, metadata={"help": "Jinja chat template replacing the tokenizer's."})
    max_prompt_length: int | None = field(
        default=None, metadata={"help": "Drop prompts longer than this many tokens (after the chat template)."})
    overwrite_output_dir: bool = field(
        default=False, metadata={"help": "Start a new run in an output_dir holding another run's checkpoints."})
    embedded_num_prompts: int = field(default=512, metadata={"help": "Prompts in the embedded task [prompts]."})
    eval_num_prompts: int | None = field(
        default=None,
        metadata={"help": "Held-out prompts used by TRL's eval loop and the final evaluation [prompts]; the first N "
                          "of dataset_test_split (default: the whole split; 64 for embedded:count-char, 500 for "
                          "embedded:arithmetic)."},
    )
    final_eval: str = field(
        default="none",
        metadata={"help": "After training, evaluate greedily on the held-out prompts: none, adapter, or compare_base "
                          "(the base and the adapter on the same prompts, with the paired difference). Written to "
                          "eval_results.json and the model card.", "choices": list(FINAL_EVAL_CHOICES)},
    )
    final_eval_num_samples: int = field(
        default=0,
        metadata={"help": "K samples per held-out prompt at the training temperature in the final evaluation, for "
                          "pass@k and the σ = 0 forecast (0: greedy only)."},
    )
    embedded_target: str = field(default="a", metadata={"help": "Character rewarded by the embedded task."})
    plot: bool = field(default=True, metadata={"help": "Write reward_plot.png after training."})


RECIPE_DATACLASSES = (RecipeArguments, GRPOExtConfig, ModelConfig, HubPushArguments)
