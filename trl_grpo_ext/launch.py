"""What the recipes need around the trainer: their arguments, parsing with clear errors, and the run record.

`parse_recipe_args` reads the config through the front door (`frontdoor.read_run_args`: YAML + CLI, unknown keys
fatal) so that every mistake a user can make in
a config — a missing file, an unknown key, an invalid quantity, bf16 on a CPU, a model that cannot be found offline,
any value `validation.validate_run_args` refuses — ends with one line naming the field, the value and the fix, before
any model is loaded.
"""

from __future__ import annotations

import copy
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from trl import ModelConfig, ScriptArguments

from .config import GRPOExtConfig
from .frontdoor import read_run_args
from .hub.push import HubPushArguments
from .hub.secrets import scrub_secrets
from .models import check_model_path
from .rewards.spec import build_reward_funcs, with_run_defaults

RUN_CONFIG_FILE = "run_config.json"


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
                          "eval_results.json and the model card.", "choices": ["none", "adapter", "compare_base"]},
    )
    final_eval_num_samples: int = field(
        default=0,
        metadata={"help": "K samples per held-out prompt at the training temperature in the final evaluation, for "
                          "pass@k and the σ = 0 forecast (0: greedy only)."},
    )
    embedded_target: str = field(default="a", metadata={"help": "Character rewarded by the embedded task."})
    plot: bool = field(default=True, metadata={"help": "Write reward_plot.png after training."})


RECIPE_DATACLASSES = (RecipeArguments, GRPOExtConfig, ModelConfig, HubPushArguments)


class RecipeArgumentError(SystemExit):
    """Raised (exit code 2) with a one-line message when a recipe's arguments are wrong."""

    def __init__(self, message: str):
        super().__init__(2)
        self.message = message

    def __str__(self) -> str:
        return self.message


def parse_recipe_args(argv: list[str] | None = None):
    """Parse ``--config NAME_OR_PATH`` plus CLI overrides through the front door (`trl_grpo_ext.frontdoor`).

    Returns the front door's ``RunArgs``, which unpacks as ``(script_args, training_args, model_args, push_args)``.

    Raises:
        RecipeArgumentError: with the message printed to stderr; nothing has been loaded.
    """
    try:
        run = read_run_args(argv)
        script_args, training_args, model_args, push_args = run
        check_model_path(model_args.model_name_or_path)
        push_args.resolve(copy.copy(training_args))  # a push without a repository id fails here, not after training
        if not training_args.rewards:
            raise ValueError("rewards is empty: the recipe needs `rewards: [name, ...]` (see `trl-grpo-ext rewards`).")
        # unknown reward parameters fail here, not when the trainer builds the rewards after loading the model
        build_reward_funcs(with_run_defaults(list(training_args.resolved.rewards), training_args.max_completion_length))
    except (ValueError, OSError, yaml.YAMLError) as err:
        raise _fail(" ".join(str(err).split())) from err
    return run


def _fail(message: str) -> RecipeArgumentError:
    print(f"error: {message}", file=sys.stderr)
    return RecipeArgumentError(message)


def write_run_config(output_dir: str, script_args, training_args, model_args, push_args) -> Path:
    """Write ``run_config.json``: every argument of the run, secrets redacted (`hub.secrets.scrub_secrets`). Returns its path.

    ``training_args`` is `GRPOExtConfig.to_dict()`: the user's fields as given, TRL's fields as written, the resolved
    values under ``"resolved"`` (`ResolvedConfig.to_dict`) and the plan under ``"run_plan"`` once training started.
    """
    record = scrub_secrets(
        {
            "script_args": vars(script_args),
            "model_args": vars(model_args),
            "training_args": training_args.to_dict(),
            "push_args": vars(push_args),
        },
        token=getattr(training_args, "hub_token", None),
    )
    path = Path(output_dir) / RUN_CONFIG_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2, default=str))
    return path


def set_offline_defaults() -> None:
    """Keep the embedded default and tests off the network: telemetry off; offline when the model is local."""
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
