"""The recipe's argument dataclasses: `RecipeArguments` and `RECIPE_DATACLASSES`."""

from __future__ import annotations

from dataclasses import dataclass, field

from trl import ModelConfig, ScriptArguments

from ..plan.evaluation import FINAL_EVAL_CHOICES
from .ext_config import GRPOExtConfig
from .push_settings import HubPushArguments

__all__ = ["RecipeArguments", "RECIPE_DATACLASSES"]


@dataclass
class RecipeArguments(ScriptArguments):
    """Data arguments of the recipes, on top of TRL's `ScriptArguments` (each field's type, default, unit and help:
    docs/configuration.md; docs/recipes.md)."""

    dataset_format: str = field(default="prompt", metadata={"help": "gsm8k or prompt (rows already have 'prompt')."})
    system_prompt: str | None = field(default=None, metadata={"help": "System message prepended to every prompt."})
    dataset_prompt_column: str = field(default="prompt", metadata={"help": "Column holding the prompts."})
    chat_template: str | None = field(default=None, metadata={"help": "Jinja chat template replacing the tokenizer's."})
    max_prompt_length: int | None = field(
        default=None, metadata={"help": "Drop prompts longer than this many tokens (after the chat template)."})
    overwrite_output_dir: bool = field(
        default=False, metadata={"help": "Start a new run in an output_dir holding another run's checkpoints."})
    embedded_num_prompts: int = field(default=512, metadata={"help": "Prompts in the embedded task [prompts]."})
    embedded_seed: int = field(
        default=0, metadata={"help": "Seed of the embedded task's problems (train and test splits); the run's seed "
                                     "leaves them alone, so runs of several seeds share the held-out problems."})
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
