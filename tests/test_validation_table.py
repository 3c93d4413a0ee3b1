"""Every bad input refused before any weight loads, through both `plan` and the recipe's argument stage.

Each row of `INVALID` is a change to a valid base config (the embedded tiny model, 4-bit + LoRA, the embedded
count-char task). Both entry points must refuse it with exit status 2 and a one-line message naming every field in
the row's `fields` and containing the row's fix text, and neither may load a weight (`from_pretrained`, the tiny
model builder and safetensors' loader raise `AssertionError`, which no error handler turns into an exit status).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import yaml

from trl_grpo_ext.cli import plan as plan_cli
from trl_grpo_ext.config.recipe_parse import RecipeArgumentError, parse_recipe_args

BASE = {
    "model_name_or_path": "embedded:tiny-qwen2",
    "load_in_4bit": True,
    "bnb_4bit_quant_type": "nf4",
    "use_peft": True,
    "lora_r": 8,
    "lora_alpha": 16,
    "lora_dropout": 0.0,
    "lora_target_modules": ["q_proj", "v_proj"],
    "dataset_name": "embedded:count-char",
    "embedded_num_prompts": 64,
    "rewards": [{"name": "char_fraction", "weight": 1.0}],
    "prompts_per_step": 2,
    "num_generations": 8,
    "micro_batch_size": 16,
    "total_training_steps": 20,
    "total_epochs": 1,
    "max_completion_length": 24,
    "use_cpu": True,
    "bf16": False,
    "learning_rate": 2.0e-3,
    "lost_update_steps": 10,
    "save_strategy": "steps",
    "save_steps": 50,
    "report_to": "none",
}
DROP = object()
SOLUTION_ROWS = str(Path(__file__).resolve().parent / "data" / "solution_rows")  # 8 prompts with a solution column
ADAPTER = str(Path(__file__).resolve().parent / "data" / "tiny_adapter")  # an adapter_config.json of the tiny model
#: `eval --k 2` results: 2 samples per prompt (fewer than G 8); 8 samples of two prompts no training set holds
SEED_K2 = str(Path(__file__).resolve().parent / "data" / "skip_history_k2.json")
SEED_OTHER = str(Path(__file__).resolve().parent / "data" / "skip_history_other_prompts.json")
SEED_NONE_UNIFORM = str(Path(__file__).resolve().parent / "data" / "skip_history_none_uniform.json")  # written below
_SKIP = {"zero_variance_filter": "skip", "total_training_steps": 80, "total_epochs": 3}
FIX = "Fix:"


#: The base's LoRA fields, dropped where a row turns use_peft off (else each is also refused as ignored).
_NO_LORA = {"lora_r": DROP, "lora_alpha": DROP, "lora_dropout": DROP, "lora_target_modules": DROP}
#: The base's 4-bit fields off, where a row turns use_peft off (a quantized base needs an adapter).
_NO_4BIT = {"load_in_4bit": False, "bnb_4bit_quant_type": DROP}


def row(id_, change, fields, fix=FIX, missing_module=None):
    return pytest.param(change, fields, fix, missing_module, id=id_)


_ROWS = [
    # ranges of numeric fields (ours, TRL, transformers, PEFT)
    row("epsilon<0", {"epsilon": -0.2}, ["epsilon"]),
    row("beta<0", {"beta": -0.01}, ["beta"]),
    row("temperature=0", {"temperature": 0}, ["temperature"]),
    row("temperature<0", {"temperature": -1.0}, ["temperature"]),
    row("lora_r=0", {"lora_r": 0}, ["lora_r"]),
    row("lora_r=2.5", {"lora_r": 2.5}, ["lora_r"]),
    row("lora_alpha=0", {"lora_alpha": 0}, ["lora_alpha"]),
    row("lora_dropout=1", {"lora_dropout": 1.0}, ["lora_dropout"]),
    row("lora_dropout<0", {"lora_dropout": -0.1}, ["lora_dropout"]),
    row("learning_rate=0", {"learning_rate": 0}, ["learning_rate"]),
    row("learning_rate<0", {"learning_rate": -1.0e-5}, ["learning_rate"]),
    row("learning_rate=str", {"learning_rate": "fast"}, ["learning_rate"]),
    row("warmup_steps<0", {"warmup_steps": -1}, ["warmup_steps"]),
    row("max_completion_length=0", {"max_completion_length": 0}, ["max_completion_length"]),
    row("num_generations=1", {"num_generations": 1}, ["num_generations"]),
    row("prompts_per_step=0", {"prompts_per_step": 0}, ["prompts_per_step"]),
    row("micro_batch_size=0", {"micro_batch_size": 0}, ["micro_batch_size"]),
    row("total_training_steps=0", {"total_training_steps": 0}, ["total_training_steps"]),
    row("total_epochs=0", {"total_epochs": 0}, ["total_epochs"]),
    row("num_iterations=0", {"num_iterations": 0}, ["num_iterations"]),
    row("gradient_accumulation_steps=0", {"gradient_accumulation_steps": 0}, ["gradient_accumulation_steps"]),
    row("num_train_epochs<0", {"num_train_epochs": -1}, ["num_train_epochs"]),
    row("logging_steps=0", {"logging_steps": 0}, ["logging_steps"]),
    row("max_resample_rounds=0", {"zero_variance_filter": "resample", "max_resample_rounds": 0},
        ["max_resample_rounds"]),
    row("zero_variance_tolerance<0", {"zero_variance_filter": "mask", "zero_variance_tolerance": -0.1},
        ["zero_variance_tolerance"]),
    row("zero_variance_signal=bogus", {"zero_variance_signal": "bogus"}, ["zero_variance_signal"]),
    row("rollout_budget=bogus", {"rollout_budget": "bogus"}, ["rollout_budget"]),
    row("rollout_budget adaptive with skip", {"rollout_budget": "adaptive", "zero_variance_filter": "skip",
                                              "total_training_steps": 80, "total_epochs": 3}, ["rollout_budget"]),
    row("zero_variance_signal_coef=0", {"zero_variance_signal": "entropy", "zero_variance_signal_coef": 0.0},
        ["zero_variance_signal_coef"]),
    row("zero_variance_signal with resample", {"zero_variance_signal": "entropy", "zero_variance_filter": "resample"},
        ["zero_variance_signal"]),
    row("skip_exploration_probability=0", {"zero_variance_filter": "skip", "skip_exploration_probability": 0.0,
                                           "total_training_steps": 80, "total_epochs": 3}, ["skip_exploration_probability"]),
    row("skip_exploration_probability>1", {"zero_variance_filter": "skip", "skip_exploration_probability": 1.5,
                                           "total_training_steps": 80, "total_epochs": 3}, ["skip_exploration_probability"]),
    row("advantage_epsilon<0", {"advantage_epsilon": -1.0}, ["advantage_epsilon"]),
    row("lost_update_steps<0", {"lost_update_steps": -1}, ["lost_update_steps"]),
    row("lost_update_warning_threshold>1", {"lost_update_warning_threshold": 1.5}, ["lost_update_warning_threshold"]),
    row("embedded_num_prompts=0", {"embedded_num_prompts": 0}, ["embedded_num_prompts"]),
    # choices that would fail after the model loads or at step 1
    row("loss_type typo", {"loss_type": "dapoo"}, ["loss_type"], "Did you mean 'dapo'"),
    row("multi_objective_aggregation typo", {"multi_objective_aggregation": "sum"}, ["multi_objective_aggregation"]),
    row("importance_sampling_level typo", {"importance_sampling_level": "seq"}, ["importance_sampling_level"]),
    row("dataset_format typo", {"dataset_format": "gsm8"}, ["dataset_format"], "Did you mean 'gsm8k'"),
    row("bnb_4bit_quant_type typo", {"bnb_4bit_quant_type": "nf5"}, ["bnb_4bit_quant_type"]),
    row("eval_strategy typo", {"eval_strategy": "step"}, ["eval_strategy"], "Did you mean 'steps'"),
    row("zero_variance_filter typo", {"zero_variance_filter": "masked"}, ["zero_variance_filter"], "Did you mean 'mask'"),
    row("advantage_baseline typo", {"advantage_baseline": "loo"}, ["advantage_baseline"], "Choose one of"),
    row("advantage_preset typo", {"advantage_preset": "drgrpo"}, ["advantage_preset"], "Did you mean 'dr_grpo'"),
    row("advantage_std_scaling typo", {"advantage_std_scaling": "groups"}, ["advantage_std_scaling"],
        "Did you mean 'group'"),
    row("advantage_std_kind typo", {"advantage_std_kind": "pop"}, ["advantage_std_kind"], "Choose one of 'sample'"),
    row("scale_rewards typo", {"scale_rewards": "maybe"}, ["scale_rewards"], "Choose one of"),
    # mutually exclusive fields, both named
    row("4bit+8bit", {"load_in_8bit": True}, ["load_in_4bit", "load_in_8bit"]),
    row("bf16+fp16", {"bf16": True, "fp16": True}, ["bf16", "fp16"]),
    row("generation_batch_size+steps_per_generation",
        {"prompts_per_step": DROP, "micro_batch_size": DROP, "per_device_train_batch_size": 8,
         "generation_batch_size": 16, "steps_per_generation": 2}, ["generation_batch_size", "steps_per_generation"],
        "remove one"),  # the plan's own resolution refuses it (plan.resolve)
    # conflicts judged by the keys the user set, even at TRL's default value
    row("per_device_train_batch_size=8 (default) + micro_batch_size",
        {"micro_batch_size": 4, "per_device_train_batch_size": 8}, ["micro_batch_size", "per_device_train_batch_size"],
        "Remove per_device_train_batch_size"),
    row("gradient_accumulation_steps=1 (default) + prompts_per_step",
        {"micro_batch_size": 4, "gradient_accumulation_steps": 1}, ["prompts_per_step", "gradient_accumulation_steps"],
        "Remove gradient_accumulation_steps"),
    row("steps_per_generation + prompts_per_step", {"micro_batch_size": 4, "steps_per_generation": 1},
        ["prompts_per_step", "steps_per_generation"], "Remove steps_per_generation"),
    row("max_steps=-1 (default) + total_training_steps", {"max_steps": -1}, ["total_training_steps", "max_steps"],
        "Remove max_steps"),
    row("num_train_epochs=3 (default) + total_epochs", {"num_train_epochs": 3}, ["total_epochs", "num_train_epochs"],
        "Remove num_train_epochs"),
    row("scale_rewards=group (default) + advantage_std_scaling",
        {"scale_rewards": "group", "advantage_std_scaling": "none"}, ["scale_rewards", "advantage_std_scaling"],
        "Set only one of them"),
    row("loss_type=dapo (default) + rloo preset", {"advantage_preset": "rloo", "loss_type": "dapo"},
        ["advantage_preset", "loss_type"], "Remove loss_type"),
    row("scale_rewards=group (default) + dr_grpo preset", {"advantage_preset": "dr_grpo", "scale_rewards": "group"},
        ["advantage_preset", "scale_rewards"], "Remove scale_rewards"),
    # settings that would be silently ignored
    row("lora_r without use_peft", {"use_peft": False, **_NO_4BIT}, ["lora_r", "use_peft"]),
    # torch's CPU autocast fails at the first step on bf16 over float16 weights ("Unexpected floating ScalarType")
    row("bf16 over a float16 base on a CPU", {"bf16": True, "dtype": "float16"}, ["dtype", "bf16", "use_cpu"],
        "Fix: --dtype float32 (or bfloat16) with bf16: true, or --bf16 false."),
    # transformers' get_scheduler passes the kwargs to the schedule's function: a TypeError at the first step
    row("lr_scheduler_kwargs key the schedule does not take", {"lr_scheduler_type": "cosine",
                                                               "lr_scheduler_kwargs": {"num_cycle": 0.5}},
        ["lr_scheduler_kwargs has keys lr_scheduler_type='cosine' does not take: 'num_cycle' (it takes num_cycles"],
        "Fix: remove or rename them"),
    row("bnb_4bit_quant_type without load_in_4bit", {"load_in_4bit": False, "bnb_4bit_quant_type": "fp4"},
        ["bnb_4bit_quant_type", "load_in_4bit"]),
    row("max_resample_rounds without resample", {"max_resample_rounds": 2}, ["max_resample_rounds",
                                                                             "zero_variance_filter"]),
    row("zero_variance_tolerance without a filter", {"zero_variance_tolerance": 0.1}, ["zero_variance_tolerance",
                                                                                       "zero_variance_filter"]),
    row("skip_history_file without skip", {"skip_history_file": SEED_OTHER},
        ["skip_history_file", "zero_variance_filter"]),
    # (the dataset stage reads the file against the training prompts, as the trainer will)
    row("skip_history_file with fewer samples than G", {**_SKIP, "skip_history_file": SEED_K2},
        ["skip_history_file", "num_generations=8"], "config.yaml --split train --k 8 --output"),  # the run's --config
    # (a second breaker's finding: '' passed plan and crashed the recipe with a traceback)
    row("skip_history_file empty", {**_SKIP, "skip_history_file": ""}, ["skip_history_file=''", "names no file"],
        "Fix: give the path of an eval --split train --k 8 result, or remove skip_history_file."),
    row("skip_history_file starting no prompt uniform", {**_SKIP, "skip_history_file": SEED_NONE_UNIFORM},
        ["skip_history_file", "starts none of the 64 training prompts it evaluated uniform"],
        "Fix: remove skip_history_file"),
    row("skip_history_file of other prompts", {**_SKIP, "skip_history_file": SEED_OTHER},
        ["skip_history_file", "none of the 64 training prompts"], "Fix: write it with trl-grpo-ext eval"),
    row("skip_exploration_probability without skip", {"zero_variance_filter": "mask",
                                                      "skip_exploration_probability": 0.5},
        ["skip_exploration_probability", "zero_variance_filter"]),
    row("eval_steps without eval_strategy steps", {"eval_steps": 10}, ["eval_steps", "eval_strategy"]),
    row("save_steps with save_strategy no", {"save_strategy": "no"}, ["save_steps", "save_strategy"]),
    # a YAML boolean that no choice stands for (an unquoted `on` / `yes` / `true`)
    row("zero_variance_filter: on", {"zero_variance_filter": True}, ["zero_variance_filter"],
        "write the value in quotes"),
    row("log_completions_hub_repo without log_completions", {"log_completions_hub_repo": "me/x"},
        ["log_completions_hub_repo='me/x'", "log_completions: true"], "Fix: set log_completions: true"),
    row("auto_find_batch_size", {"auto_find_batch_size": True}, ["auto_find_batch_size=True"],
        "Fix: remove it and lower micro_batch_size"),
    row("pad_to_multiple_of not a number", {"pad_to_multiple_of": "bogus"}, ["pad_to_multiple_of='bogus'"],
        "Fix: remove it"),
    # TRL 1.16 compares with "auto" exactly and int()s any other string: 'Auto' raised a ValueError in GRPOConfig
    row("pad_to_multiple_of Auto", {"pad_to_multiple_of": "Auto"}, ["pad_to_multiple_of='Auto'", "'auto' (lower case)"],
        "Fix: remove it"),
    # transformers raises "wandbb is not supported" when the trainer is built, after the weights load
    row("report_to typo", {"report_to": "wandbb"}, ["report_to='wandbb'", "no integration transformers knows"],
        "Fix: report_to: wandb"),
    row("report_to typo in a list", {"report_to": ["tensorbord"]}, ["'tensorbord'"], "Fix: report_to: tensorboard"),
    # mapping fields: transformers json.loads a string that starts with "{" and keeps any other string (TRL then
    # fails on it after the weights load); accelerator_config / fsdp_config / deepspeed also read a file's path
    row("generation_kwargs a list", {"generation_kwargs": [1, 2]}, ["generation_kwargs=[1, 2] is not a mapping (a list)"],
        "Fix: write it as a mapping in the YAML (generation_kwargs: {key: value})"),
    # clip settings with every update on-policy (num_iterations 1, one generation batch per step): ratio 1, trl#3757
    row("epsilon_high with num_iterations 1", {"epsilon_high": 0.28}, ["epsilon_high", "num_iterations"],
        "Fix: set num_iterations: 2"),
    row("epsilon other than 0.2 with num_iterations 1", {"epsilon": 0.1}, ["epsilon", "num_iterations"],
        "the clip never acts"),
    # a chat_template TRL would fail to render at the first generation, after the model loads (the breaker's finding)
    row("chat_template that is not Jinja", {"chat_template": "{% for m in messages %}{{ m['content'] }{% endfor %}"},
        ["chat_template"], "Fix: close every {{ ... }}"),
    # a template's name from another tool's config (axolotl's `chat_template: chatml`): every prompt would render as it
    row("chat_template without Jinja", {"chat_template": "chatml"},
        ["chat_template='chatml' has no Jinja in it"], "Fix: give a Jinja template that reads messages"),
    # TRL updates its own GenerationConfig arguments with generation_kwargs: num_return_sequences broke torch.cat at
    # the first step (max_new_tokens, top_k, ... are applied, as TRL does)
    # transformers refused it when loading the model, with a traceback
    row("attn_implementation unknown", {"attn_implementation": "bogus"},
        ["attn_implementation='bogus' is not an attention transformers knows"], "Fix: use one of 'eager'"),
    row("generation_kwargs num_return_sequences", {"generation_kwargs": {"num_return_sequences": 4}},
        ["generation_kwargs ['num_return_sequences']", "fails on them at the first step"], "Fix: remove them"),
    row("model_init_kwargs a word", {"model_init_kwargs": "fast"}, ["model_init_kwargs='fast' is not a mapping"],
        "or as JSON on the command line (--model_init_kwargs '{\"key\": 1}')"),
    row("gradient_checkpointing_kwargs bad JSON", {"gradient_checkpointing_kwargs": "{use_reentrant: false}"},
        ["gradient_checkpointing_kwargs='{use_reentrant: false}' is not JSON"], "Fix: write it as a mapping"),
    row("lr_scheduler_kwargs bad JSON", {"lr_scheduler_kwargs": "{min_lr_rate: 0.1}"},
        ["lr_scheduler_kwargs='{min_lr_rate: 0.1}' is not JSON"], "Fix: write it as a mapping"),
    row("accelerator_config no such file", {"accelerator_config": "missing.json"},
        ["accelerator_config='missing.json' names no JSON file it can read"], "Fix: give the file's path"),
    # evaluation without a test split
    row("eval_strategy steps without a test split", {"eval_strategy": "steps", "dataset_test_split": None},
        ["eval_strategy", "dataset_test_split"]),
    row("eval_strategy epoch without a test split", {"eval_strategy": "epoch", "dataset_test_split": ""},
        ["eval_strategy", "dataset_test_split"]),
    # choices of transformers' enum fields, which argparse checks on the command line only
    row("lr_scheduler_type typo", {"lr_scheduler_type": "cosin"}, ["lr_scheduler_type"],
        "Fix: lr_scheduler_type: cosine"),
    row("optim typo", {"optim": "adamw_torc"}, ["optim"], "Fix: optim: adamw_torch"),
    row("lr_scheduler_type: off", {"lr_scheduler_type": False}, ["lr_scheduler_type"], "write the value in quotes"),
    row("lr_scheduler_type: null", {"lr_scheduler_type": None}, ["lr_scheduler_type"]),
    # transformers' Trainer evaluates on eval_strategy alone: do_eval=True with eval_strategy no evaluates nothing
    row("do_eval without eval_strategy", {"do_eval": True}, ["do_eval", "eval_strategy"], "set eval_strategy: steps"),
    row("final_eval without a test split", {"final_eval": "adapter", "dataset_test_split": None},
        ["final_eval", "dataset_test_split"]),
    row("final_eval typo", {"final_eval": "adaptor"}, ["final_eval"], "Did you mean 'adapter'"),
    row("adapter_dtype typo", {"adapter_dtype": "bf16"}, ["adapter_dtype"], "Choose one of 'float32', 'bfloat16'"),
    row("memory_probe typo", {"memory_probe": "always"}, ["memory_probe"], "Choose one of 'auto', 'on', 'off'"),
    # the trainer casts the adapter of a quantized model only: on a float32 base the setting changes nothing
    row("reward_error_policy typo", {"reward_error_policy": "skip"}, ["reward_error_policy"], "Choose one of"),
    row("push_to_hub_mode typo", {"push_to_hub_mode": "merge"}, ["push_to_hub_mode"], "Did you mean 'merged'"),
    row("merge_dtype typo", {"merge_dtype": "fp16"}, ["merge_dtype"], "Choose one of 'bfloat16', 'float16'"),
    row("eval_num_prompts without an evaluation", {"eval_num_prompts": 16}, ["eval_num_prompts", "eval_strategy"]),
    # TRL's eval loop alone reads them, and TRL prints completions only with log_completions: accepted silently
    row("num_generations_eval without eval_strategy", {"num_generations_eval": 4},
        ["num_generations_eval=4", "eval_strategy: steps or epoch"], "Fix: set eval_strategy: steps"),
    row("eval_num_prompts=0", {"eval_strategy": "steps", "eval_num_prompts": 0}, ["eval_num_prompts"]),
    row("zero-variance mask + normalize_then_sum", {"zero_variance_filter": "mask",
                                                    "multi_objective_aggregation": "normalize_then_sum"},
        ["zero_variance_filter", "multi_objective_aggregation"]),
    # rewards: packages, dataset columns, names and parameters
    row("accuracy without math-verify", {"rewards": [{"name": "accuracy", "kwargs": {"column": "target"}}]},
        ["accuracy", "math-verify"], "pip install math-verify", missing_module="math_verify"),
    # (a local dataset with a `solution` column, tests/data/solution_rows: on the embedded one, the missing column
    # would be a second problem, reported too; see test_every_problem_is_reported_at_once)
    row("accuracy_reward without math-verify", {"rewards": ["accuracy_reward"], "dataset_name": SOLUTION_ROWS,
                                                "embedded_num_prompts": DROP},
        ["accuracy_reward", "math-verify"], "pip install math-verify", missing_module="math_verify"),
    # TRL's reward reads a fixed column: the fix does not offer a column parameter it lacks (the breaker's finding)
    row("accuracy_reward needs solution", {"rewards": ["accuracy_reward"]}, ["accuracy_reward", "solution"],
        "accuracy_reward has no column parameter), or use {name: accuracy, kwargs: {column: <name>}}"),
    row("exact_match needs an answer column", {"rewards": ["exact_match"]}, ["exact_match", "answer"]),
    row("char_fraction column missing", {"rewards": [{"name": "char_fraction", "kwargs": {"column": "letter"}}]},
        ["char_fraction", "letter"]),
    row("numeric_match column missing", {"rewards": [{"name": "numeric_match", "kwargs": {"column": "answer"}}]},
        ["numeric_match", "answer"]),
    row("reward name typo", {"rewards": ["char_fractoin"]}, ["char_fractoin"], "Did you mean 'char_fraction'"),
    row("reward parameter typo", {"rewards": [{"name": "length", "kwargs": {"max_len": 8}}]}, ["length", "max_len"],
        "max_length"),
    row("reward parameter out of range", {"rewards": [{"name": "length", "kwargs": {"max_length": 0}}]},
        ["length", "max_length"], "e.g. max_length: 256"),
    row("reward_weights length", {"rewards": ["char_fraction"], "reward_weights": [1.0, 2.0]}, ["reward_weights"],
        "give one weight per reward"),
    # LoRA target modules against the model's module names (meta-device model)
    row("lora target typo", {"lora_target_modules": ["q_proj", "k_projj"]}, ["lora_target_modules", "k_projj"],
        "e.g. k_proj"),
    row("lora one-item list is a regex", {"lora_target_modules": ["q_proj"]}, ["lora_target_modules", "q_proj"],
        ".*q_proj"),
    row("lora target lm_head", {"lora_target_modules": ["lm_head", "q_proj"]}, ["lora_target_modules", "lm_head"],
        "lora_modules_to_save"),
    # generation and engine settings the run would ignore or cannot run (plan used to pass these)
    row("use_vllm on a 4-bit base", {"use_vllm": True}, ["use_vllm", "load_in_4bit"], "allow_vllm_4bit_merge: true"),
    row("compare_base without an adapter", {"final_eval": "compare_base", "use_peft": False, **_NO_LORA, **_NO_4BIT},
        ["final_eval=compare_base", "use_peft"], "final_eval: adapter"),
    row("push without an adapter", {"push_to_hub_mode": "adapter", "hub_repo_id": "you/x", "use_peft": False,
                                    **_NO_LORA, **_NO_4BIT},
        ["push_to_hub_mode='adapter'", "use_peft=False"], "Fix: set use_peft: true"),
    # the recipe refused these after its checks; plan accepted them (a breaker's finding)
    row("push without a repository", {"push_to_hub_mode": "merged"}, ["push_to_hub_mode='merged' needs a repository"],
        "e.g. --hub_repo_id your-name/your-model"),
    row("TRL's push_to_hub without a repository", {"push_to_hub": True},
        ["push_to_hub=True (a push of the adapter) needs a repository"], "set hub_repo_id"),
    # ignored before: the recipe turns TRL's own push off and pushes once, after the local files are written
    # both were found only after training: the push refused the id, or pushed although push_to_hub_mode said none
    row("push to an invalid repository id", {"push_to_hub_mode": "adapter", "hub_repo_id": "not a valid repo id!!"},
        ["hub_repo_id='not a valid repo id!!' is not a valid Hub repository id"], "Fix: e.g. --hub_repo_id your-name"),
    row("push to an invalid hub_model_id", {"push_to_hub": True, "hub_model_id": "bad id!!"},
        ["hub_model_id='bad id!!' is not a valid Hub repository id"], "Fix: e.g. --hub_model_id your-name"),
    row("push_to_hub beside push_to_hub_mode none", {"push_to_hub": True, "hub_model_id": "me/x",
                                                     "push_to_hub_mode": "none"},
        ["push_to_hub=True and push_to_hub_mode='none' disagree"], "Fix: keep one of them"),
    row("push_to_hub false beside a push mode", {"push_to_hub": False, "hub_repo_id": "me/x",
                                                 "push_to_hub_mode": "adapter"},
        ["push_to_hub=False and push_to_hub_mode='adapter' disagree"], "Fix: keep one of them"),
    row("hub_private without a push", {"hub_private": False}, ["hub_private=False only takes effect with a push"],
        "Fix: set push_to_hub_mode: adapter, or remove hub_private"),
    row("merge_dtype without a merged push", {"push_to_hub_mode": "adapter", "hub_repo_id": "you/x",
                                              "merge_dtype": "float16"},
        ["merge_dtype='float16' only takes effect with push_to_hub_mode: merged"], "Fix: set push_to_hub_mode: merged"),
    # a second breaker round on the new checks (2026-12-04)
    row("report_to a YAML number", {"report_to": 1}, ["report_to=1: 1 is no integration transformers knows"], "Fix: report_to: none"),
    row("report_to a YAML false", {"report_to": False}, ["report_to=False"], "Fix: report_to: none"),
    row("report_to codecarbon without the package", {"report_to": "codecarbon"}, ["needs the codecarbon package"],
        "pip install codecarbon", missing_module="codecarbon"),
    # accelerate cannot send GRPO's text batches (a TypeError at the first step), or cuts each process's batch
    row("accelerator_config dispatch_batches", {"accelerator_config": {"dispatch_batches": True}},
        ["accelerator_config.dispatch_batches=True", "a GRPO batch is prompts (text)"],
        "Fix: remove dispatch_batches"),
    row("accelerator_config split_batches as JSON", {"accelerator_config": '{"split_batches": true}'},
        ["accelerator_config.split_batches=True divides each process's batch"], "Fix: remove split_batches"),
    # a second breaker's findings: accelerate reads 1 as true; num_steps is written over gradient_accumulation_steps
    # (the run trained 4x the plan's batch); use_configured_state passed plan and was refused by the recipe
    row("accelerator_config dispatch_batches 1", {"accelerator_config": {"dispatch_batches": 1}},
        ["accelerator_config.dispatch_batches=1 has process 0 read every batch"], "Fix: remove dispatch_batches"),
    row("accelerator_config use_configured_state", {"accelerator_config": {"use_configured_state": True}},
        ["accelerator_config.use_configured_state=True reuses an AcceleratorState"], "Fix: remove use_configured_state"),
    row("hub_private and hub_private_repo", {"push_to_hub_mode": "adapter", "hub_repo_id": "you/x",
                                             "hub_private": True, "hub_private_repo": False},
        ["'hub_private_repo' and 'hub_private' are both set"], "keep one"),
    row("dataloader_prefetch_factor without workers", {"dataloader_prefetch_factor": 2},
        ["dataloader_prefetch_factor=2 only takes effect with dataloader_num_workers > 0"],
        "Fix: set dataloader_num_workers: 2 (say) or remove dataloader_prefetch_factor."),
    # a breaker's findings: TRL raises for the first three after the model loads; the others TRL or transformers
    # read only under the other setting
    row("eval_on_start without evaluation", {"eval_on_start": True}, ["eval_on_start=True only takes effect with "
        "eval_strategy: steps or epoch"], "Fix: set eval_strategy: steps"),
    row("sync_ref_model with PEFT", {"sync_ref_model": True, "beta": 0.04},
        ["use_peft=True and sync_ref_model=True cannot both be set"], "Fix: remove sync_ref_model"),
    row("sync_ref_model without a reference", {"sync_ref_model": True, "use_peft": False, **_NO_LORA, **_NO_4BIT,
                                               "final_eval": "adapter"},
        ["sync_ref_model=True only takes effect with beta > 0"], "Fix: remove sync_ref_model or set beta: 0.04"),
    row("DeepSpeed with use_cpu", {"deepspeed": {"zero_optimization": {"stage": 2}}}, ["use_cpu", "DeepSpeed"],
        "Fix: set use_cpu: false"),
    row("report_to wandb without wandb", {"report_to": ["wandb"]}, ["report_to", "wandb"], "pip install wandb",
        missing_module="wandb"),
    row("lora target on another model's names", {"lora_target_modules": ["c_attn", "c_proj"]},
        ["lora_target_modules", "c_attn"]),
    # an empty reward list (plan passed it; the recipe refused it, with another message)
    row("rewards: []", {"rewards": []}, ["rewards=[]"], "Fix: list at least one reward"),
    # no reward at all (the recipe refused it, plan passed it)
    row("rewards not set", {"rewards": DROP}, ["rewards=None selects no reward"], "Fix: list at least one reward"),
    row("rewards: null", {"rewards": None}, ["rewards=None selects no reward"], "Fix: list at least one reward"),
    # every weight 0: every advantage 0, no step updates (plan only warned)
    row("every reward weight 0", {"rewards": [{"name": "char_fraction", "weight": 0}]},
        ["every reward has weight 0", "rewards[0] 'char_fraction' weight 0"], "Fix: give at least one reward a "
        "non-zero weight"),
    # a quantized base without an adapter: transformers refuses it after the model has loaded
    row("4-bit base without use_peft", {"use_peft": False, **_NO_LORA}, ["load_in_4bit=True", "use_peft=False"],
        "Fix: set use_peft: true (QLoRA), or load_in_4bit: false for a full fine-tune"),
    row("8-bit base without use_peft", {"use_peft": False, **_NO_LORA, **_NO_4BIT, "load_in_8bit": True},
        ["load_in_8bit=True", "use_peft=False"], "or load_in_8bit: false for a full fine-tune"),
    # transformers' Trainer settings the twins of plan do not check (a breaker's findings): refused after the model
    # loaded (the scheduler at the first step, Trainer.__init__) or by the real class only, without a fix
    row("cosine_with_min_lr without a floor", {"lr_scheduler_type": "cosine_with_min_lr"},
        ["lr_scheduler_type='cosine_with_min_lr'", "lr_scheduler_kwargs"], "Fix: give one of them, e.g. lr_scheduler_kwargs: {min_lr_rate"),
    row("reduce_lr_on_plateau without an evaluation", {"lr_scheduler_type": "reduce_lr_on_plateau"},
        ["lr_scheduler_type='reduce_lr_on_plateau'", "eval_strategy='no'"], "Fix: set eval_strategy: steps"),
    row("save_strategy best without a metric", {"save_strategy": "best", "save_steps": DROP},
        ["save_strategy='best'", "metric_for_best_model"], "Fix: set metric_for_best_model"),
    row("load_best_model_at_end without an evaluation", {"load_best_model_at_end": True},
        ["load_best_model_at_end=True", "eval_strategy='no'", "save_strategy='steps'"], "Fix: set both to steps"),
    # a continued adapter the run cannot train (the recipe refused these; plan accepted them)
    row("continued adapter without use_peft", {"model_name_or_path": ADAPTER, "use_peft": False, **_NO_LORA,
                                               **_NO_4BIT}, [f"model_name_or_path={ADAPTER!r}", "use_peft is false"],
        "Fix: set use_peft: true"),
    row("output_dir is the continued adapter", {"model_name_or_path": ADAPTER, "output_dir": ADAPTER},
        [f"output_dir={ADAPTER!r}"], "Fix: choose another output_dir"),
    # merging the adapter for generation: only into a float32 base held whole by this process
    row("merged generation on a 4-bit base", {"merge_adapter_for_generation": True},
        ["merge_adapter_for_generation=True with load_in_4bit=True"], "Fix: remove merge_adapter_for_generation"),
    row("merged generation on a bf16 base", {"merge_adapter_for_generation": True, **_NO_4BIT, "dtype": "bfloat16"},
        ["merge_adapter_for_generation=True with the base loaded as 'bfloat16'"], "or load the base with dtype: float32"),
    row("merged generation without use_peft", {"merge_adapter_for_generation": True, "use_peft": False, **_NO_LORA,
                                               **_NO_4BIT},
        ["merge_adapter_for_generation=True only takes effect with use_peft: true"], "Fix: set use_peft: true"),
]
#: Settings without effect: accepted, with one warning line naming the fields and the fix (the severity ladder).
WARNED_IDS = {
    'lora_r without use_peft',
    'bnb_4bit_quant_type without load_in_4bit',
    'max_resample_rounds without resample',
    'zero_variance_tolerance without a filter',
    'skip_history_file without skip',
    'skip_exploration_probability without skip',
    'eval_steps without eval_strategy steps',
    'save_steps with save_strategy no',
    'do_eval without eval_strategy',
    'eval_num_prompts without an evaluation',
    'num_generations_eval without eval_strategy',
    'zero-variance mask + normalize_then_sum',
    'epsilon_high with num_iterations 1',
    'epsilon other than 0.2 with num_iterations 1',
    'chat_template without Jinja',
    'push_to_hub beside push_to_hub_mode none',
    'push_to_hub false beside a push mode',
    'hub_private without a push',
    'merge_dtype without a merged push',
}
#: Values TRL's or transformers' config refuses when it is built: the recipe refuses them with their message (before
#: any model loads); `plan` reads twins of the classes and leaves them to the run.
UPSTREAM_IDS = {  # id: what their message says
    "log_completions_hub_repo without log_completions": "log_completions_hub_repo is set, but log_completions is False",
    "dataloader_prefetch_factor without workers": "--dataloader_prefetch_factor can only be set when data is loaded",
    "auto_find_batch_size": "auto_find_batch_size is not supported by GRPO",
    "reduce_lr_on_plateau without an evaluation": "lr_scheduler_type reduce_lr_on_plateau requires an eval strategy",
    "load_best_model_at_end without an evaluation": "--load_best_model_at_end requires the save and eval strategy to",
    "pad_to_multiple_of not a number": "invalid literal for int() with base 10: 'bogus'",
    "pad_to_multiple_of Auto": "invalid literal for int() with base 10: 'Auto'",
    "accelerator_config use_configured_state": "requires a pre-configured `AcceleratorState` or `PartialState`",
    "bf16+fp16": "At most one of fp16 and bf16 can be True, but not both",  # training_args.py:1785
    "logging_steps=0": "requires non-zero --logging_steps",  # training_args.py:1733
    "warmup_steps<0": "Expected value warmup_steps >= 0",  # training_args.py:1801
    "lr_scheduler_type typo": "cosin is not a valid SchedulerType",  # training_args.py:1562
    "optim typo": "adamw_torc is not a valid OptimizerNames",  # training_args.py:1563
    "lr_scheduler_type: off": "False is not a valid SchedulerType",
    "lr_scheduler_type: null": "None is not a valid SchedulerType",
}
INVALID = [p for p in _ROWS if p.id not in WARNED_IDS | set(UPSTREAM_IDS)]
WARNED = [p for p in _ROWS if p.id in WARNED_IDS]
UPSTREAM = [p for p in _ROWS if p.id in UPSTREAM_IDS]


#: Each rule of `validation.rules.RULES` -> the id of a row above that only it refuses.
RULE_ROWS = {
    "load_in_4bit and load_in_8bit": "4bit+8bit",
    "use_peft and sync_ref_model": "sync_ref_model with PEFT",
    "quantity_conflicts": "per_device_train_batch_size=8 (default) + micro_batch_size",
    "advantage_conflicts": "loss_type=dapo (default) + rloo preset",
    "evaluation_split": "eval_strategy steps without a test split",
    "compare_base_adapter": "compare_base without an adapter",
    "cpu_bf16_on_float16": "bf16 over a float16 base on a CPU",
    "push_needs_adapter": "push without an adapter",
    "push_needs_repository": "push without a repository",
    "reward_specs": "reward name typo",
    "zero_variance": "zero_variance_signal with resample",
    "generation": "generation_kwargs num_return_sequences",
    "chat_template": "chat_template that is not Jinja",
    "clipping": "epsilon_high with num_iterations 1",
    "vllm_quantization": "use_vllm on a 4-bit base",
    "reward_packages": "accuracy without math-verify",
    "reward_columns": "exact_match needs an answer column",
    "run_packages": "report_to wandb without wandb",
    "engine_settings": "DeepSpeed with use_cpu",
    "batch_dispatch": "accelerator_config dispatch_batches",
    "lora_targets": "lora target typo",
    "rewards_set": "rewards not set",
    "reward_weights": "every reward weight 0",
    "quantized_needs_adapter": "4-bit base without use_peft",
    "trainer_settings": "cosine_with_min_lr without a floor",
    "continued_adapter": "output_dir is the continued adapter",
    "merged_generation": "merged generation on a 4-bit base",
}


def test_every_rule_has_a_row():
    """A rule added to `RULES` without a row here fails: every rule is shown refused (or warned) by plan and by the
    recipe; the rows of settings that need another (`tables.NEEDS`) are tested by the loop at the end."""
    from trl_grpo_ext.validation.rules import RULES

    assert len({rule.name for rule in RULES}) == len(RULES)
    assert set(RULE_ROWS) == {rule.name for rule in RULES if not rule.needs}
    assert WARNED_IDS | set(UPSTREAM_IDS) <= {p.id for p in _ROWS}
    ids = {p.id for p in INVALID + WARNED}
    assert {name: id_ for name, id_ in RULE_ROWS.items() if id_ not in ids} == {}


@pytest.mark.parametrize("name", sorted(RULE_ROWS))
def test_each_rule_refuses_its_row(name, monkeypatch):
    """The row of each rule is refused by that rule (run alone on the row's values), not only by another check."""
    from trl_grpo_ext.validation.problems import Problems
    from trl_grpo_ext.validation.rules import RULES, RunView
    from trl_grpo_ext.validation.user_values import flatten_values

    (param,) = [p for p in INVALID + WARNED if p.id == RULE_ROWS[name]]
    if param.values[3]:
        monkeypatch.setitem(sys.modules, param.values[3], None)
    user = {k: v for k, v in {**BASE, **param.values[0]}.items() if v is not DROP}
    (rule,) = [rule for rule in RULES if rule.name == name]
    problems = Problems()
    view = RunView(flatten_values(user), user, problems=problems)
    problems.check(rule, view)
    assert len(problems.messages) + len(problems.warnings) >= 1, name


def _config(tmp_path, change) -> str:
    config = dict(BASE)
    for key, value in change.items():
        if value is DROP:
            config.pop(key, None)
        else:
            config[key] = value
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


@pytest.fixture
def no_weights(monkeypatch):
    """Loading or building any weights fails the test (AssertionError is never turned into an exit status)."""
    import safetensors.torch
    from transformers import AutoModelForCausalLM, PreTrainedModel

    from trl_grpo_ext.models.embedded import tiny

    def fail(*args, **kwargs):
        raise AssertionError("a weight was loaded before the arguments were validated")

    monkeypatch.setattr(PreTrainedModel, "from_pretrained", classmethod(fail))
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", classmethod(fail))
    monkeypatch.setattr(tiny, "ensure_tiny_model", fail)
    monkeypatch.setattr(safetensors.torch, "load_file", fail)


def _check_message(message: str, fields, fix):
    assert "\n" not in message.strip(), message
    for name in fields:
        assert name in message, f"{name!r} not named in: {message}"
    assert fix in message, f"fix {fix!r} not in: {message}"


def test_the_base_config_is_valid(tmp_path, capsys, no_weights):
    path = _config(tmp_path, {})
    assert plan_cli.main(["--config", path]) == 0
    parse_recipe_args(["--config", path])


def test_every_declared_check_is_refused_end_to_end():
    """Each range or choice a field declares (and each row of RANGES/CHOICES for a field of ours) has a row above
    whose value that very check refuses, so the parametrized test shows plan and recipe refusing it."""
    from trl_grpo_ext.config.checks import Choices, declared_checks
    from trl_grpo_ext.config.recipe_args import RECIPE_DATACLASSES
    from trl_grpo_ext.validation import RANGES

    declared = {name: found for cls in RECIPE_DATACLASSES for name, found in declared_checks(cls).items()}
    checks = {name: found.get("range") or Choices(found["choices"]) for name, found in declared.items()}
    checks.update({name: RANGES[name] for name in ("embedded_num_prompts", "eval_num_prompts")})
    assert len(checks) >= 15

    def refuses(check, name, value):
        try:
            check.check(name, value)
        except ValueError:
            return True
        return False

    missing = [name for name, check in checks.items()
               if not any(refuses(check, name, p.values[0][name]) for p in INVALID if name in p.values[0])]
    assert missing == []


@pytest.mark.parametrize("change, fields, fix, missing_module", INVALID)
def test_invalid_config_is_refused_by_plan_and_recipe(change, fields, fix, missing_module, tmp_path, capsys,
                                                      no_weights, monkeypatch):
    if missing_module:
        monkeypatch.setitem(sys.modules, missing_module, None)  # importlib.util.find_spec then returns None
    path = _config(tmp_path, change)

    assert plan_cli.main(["--config", path]) == 2
    plan_error = capsys.readouterr().err.strip()
    assert plan_error.startswith("trl-grpo-ext plan: error: ")
    _check_message(plan_error, fields, fix)

    with pytest.raises(RecipeArgumentError) as info:
        parse_recipe_args(["--config", path])
    assert info.value.code == 2
    _check_message(info.value.message, fields, fix)
    assert capsys.readouterr().err.strip() == f"error: {info.value.message}"


@pytest.mark.parametrize("change, fields, fix, missing_module", WARNED)
def test_a_setting_without_effect_is_accepted_with_a_warning_by_plan_and_recipe(change, fields, fix, missing_module,
                                                                                  tmp_path, capsys, no_weights):
    """plan and the recipe accept the row and list the same warnings once, together, naming its fields and fix."""
    path = _config(tmp_path, change)
    assert plan_cli.main(["--config", path]) == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning: ")]
    _check_message(" ".join(warned), fields, fix)
    parse_recipe_args(["--config", path], datasets=False)  # (a Hub dataset's rows cannot be read here)
    recipe = capsys.readouterr().err.splitlines()
    assert all(line in warned for line in recipe) and len(recipe) == len(set(recipe)), (recipe, warned)
    assert {line for line in warned if any(name in line for name in change)} <= set(recipe)


@pytest.mark.parametrize("says", [pytest.param(UPSTREAM_IDS[p.id], id=p.id) for p in UPSTREAM])
def test_a_value_trl_or_transformers_refuses_is_refused_by_the_recipe_with_their_message(says, request, tmp_path,
                                                                                        capsys, no_weights, monkeypatch):
    """Not copied here: the recipe builds the real classes before any model loads and shows their refusal."""
    from accelerate import PartialState

    (change,) = [p.values[0] for p in UPSTREAM if p.id == request.node.callspec.id]
    monkeypatch.setattr(PartialState, "_shared_state", {})  # a fresh process, as the recipe is (use_configured_state)
    with pytest.raises(RecipeArgumentError) as info:
        parse_recipe_args(["--config", _config(tmp_path, change)])
    assert info.value.code == 2 and says in info.value.message, info.value.message


def test_a_command_line_override_counts_as_set(tmp_path, no_weights):
    """`--per_device_train_batch_size 8` (TRL's default value) next to micro_batch_size in the YAML is refused."""
    path = _config(tmp_path, {"micro_batch_size": 4})
    parse_recipe_args(["--config", path])
    with pytest.raises(RecipeArgumentError) as info:
        parse_recipe_args(["--config", path, "--per_device_train_batch_size", "8"])
    assert "per_device_train_batch_size=8" in info.value.message and "micro_batch_size=4" in info.value.message
    with pytest.raises(RecipeArgumentError) as info:
        parse_recipe_args(["--config", path, "--epsilon=-0.1"])
    assert "epsilon=-0.1" in info.value.message


def test_a_feature_switched_off_in_the_yaml_or_on_the_command_line_leaves_one_warning(tmp_path, capsys, no_weights):
    """`save_strategy: no` beside `save_steps: 50`, in the YAML or as `--save_strategy no`: accepted, one warning."""
    path = _config(tmp_path, {})
    for argv in (["--config", _config(tmp_path, {"save_strategy": "no"})], ["--config", path, "--save_strategy", "no"]):
        run = parse_recipe_args(argv)
        assert run.training_args.save_steps == 50
        assert capsys.readouterr().err.splitlines() == [
            "warning: save_steps=50 only takes effect with save_strategy: steps. Fix: set "
            "save_strategy: steps or remove save_steps."]


def test_a_needs_field_written_at_its_default_is_not_warned_of(tmp_path, capsys, no_weights):
    """open-r1's recipes write `do_eval: false`: the default, so nothing is lost without an evaluation (a drop-in
    user's finding); `do_eval: true` without one is warned of."""
    assert plan_cli.main(["--config", _config(tmp_path, {"eval_strategy": "no", "do_eval": False})]) == 0
    assert "do_eval" not in capsys.readouterr().err
    assert plan_cli.main(["--config", _config(tmp_path, {"eval_strategy": "no", "do_eval": True})]) == 0
    assert "warning: do_eval=True only takes effect with eval_strategy: steps or epoch" in capsys.readouterr().err


def test_sync_ref_model_with_beta_0_is_refused_even_when_beta_comes_from_the_command_line(tmp_path, no_weights):
    """TRL raises for sync_ref_model with beta 0 (GRPOTrainer.__init__), so `--beta 0` does not switch it off: plan
    and the recipe refuse it alike (plan warned and the recipe refused the ref_model_* fields instead)."""
    path = _config(tmp_path, {"use_peft": False, **_NO_LORA, **_NO_4BIT, "beta": 0.04, "sync_ref_model": True,
                              "ref_model_sync_steps": 8})
    parse_recipe_args(["--config", path])
    assert plan_cli.main(["--config", path, "--beta", "0"]) == 2
    with pytest.raises(RecipeArgumentError, match=r"^sync_ref_model=True only takes effect with beta > 0"):
        parse_recipe_args(["--config", path, "--beta", "0"])


def test_an_empty_lr_scheduler_kwargs_beside_a_constant_schedule_is_accepted(tmp_path, no_weights):
    from trl_grpo_ext import GRPOExtConfig

    assert plan_cli.main(["--config", _config(tmp_path, {"lr_scheduler_type": "constant", "lr_scheduler_kwargs": {}})]) == 0
    assert plan_cli.main(["--config", _config(tmp_path, {}), "--lr_scheduler_type", "constant",
                          "--lr_scheduler_kwargs", "{}"]) == 0  # the command line's JSON string
    assert plan_cli.main(["--config", _config(tmp_path, {}), "--lr_scheduler_type", "constant",
                          "--lr_scheduler_kwargs", '{"num_cycles": 0.5}']) == 0  # without effect: a warning
    GRPOExtConfig(output_dir="/tmp/unused", use_cpu=True, bf16=False, lr_scheduler_type="constant",
                  lr_scheduler_kwargs={})


def test_a_field_trl_refuses_is_refused_even_when_switched_off_on_the_command_line(tmp_path, no_weights):
    """TRL's GRPOConfig raises for log_completions_hub_repo without log_completions (it does not ignore it): the
    recipe, which builds the real config before any model loads, refuses it with TRL's message."""
    path = _config(tmp_path, {"log_completions": True, "log_completions_hub_repo": "me/completions"})
    parse_recipe_args(["--config", path])
    with pytest.raises(RecipeArgumentError, match="log_completions_hub_repo is set, but log_completions is False"):
        parse_recipe_args(["--config", path, "--log_completions", "false"])


def test_hub_strategy_end_is_accepted(tmp_path, no_weights):
    """`hub_strategy: end` is the recipe's own single push at the end (a breaker's finding)."""
    parse_recipe_args(["--config", _config(tmp_path, {"push_to_hub_mode": "adapter", "hub_repo_id": "you/x",
                                                      "hub_strategy": "end"})])


@pytest.mark.parametrize("flag", ["--rewards", "--reward_funcs"])
def test_an_empty_reward_list_on_the_command_line_is_refused(flag, tmp_path, capsys, no_weights):
    """`--rewards '[]'` is expanded to no reward (`rewards.spec`): refused as `rewards: []` in the YAML is (plan passed
    it and the recipe crashed in GRPOTrainer.__init__ after loading the model)."""
    path = _config(tmp_path, {})
    assert plan_cli.main(["--config", path, flag, "[]"]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert errors == ["trl-grpo-ext plan: error: rewards=['[]'] selects no reward, so no completion "
                      "could be scored. Fix: list at least one reward, e.g. `rewards: [accuracy]` (`trl-grpo-ext "
                      "rewards` lists them)."]
    with pytest.raises(RecipeArgumentError) as info:
        parse_recipe_args(["--config", path, flag, "[]"])
    assert info.value.problems == [errors[0].removeprefix("trl-grpo-ext plan: error: ")]


#: Three independent problems: an unknown key, a value out of range, a setting that cannot work.
THREE_PROBLEMS = {"learnig_rate": 1.0e-5, "temperature": 0, "eval_on_start": True}
THREE_LINES = [  # (what each line must name, its fix)
    (["'learnig_rate'", "did you mean 'learning_rate'"], "Remove or rename them"),
    (["temperature=0", "> 0"], "Fix: GRPO samples G different completions"),
    (["eval_on_start=True", "eval_strategy: steps or epoch"], "Fix: set eval_strategy: steps"),
]


def _check_lines(lines, expected, prefix):
    """One line per expected problem (in any order), each starting with ``prefix``, naming its fields and fix."""
    assert len(lines) == len(expected), lines
    assert all(line.startswith(prefix) and "\n" not in line for line in lines), lines
    for names, fix in expected:
        matching = [line for line in lines if all(name in line for name in names) and fix in line]
        assert len(matching) == 1, (names, fix, lines)


def test_every_problem_is_reported_at_once(tmp_path, capsys, no_weights):
    """A config with three independent problems: plan and the recipe name all three, one line each, exit 2 (before
    issue 22 only the unknown key was reported, and each fix needed another run to see the next problem)."""
    path = _config(tmp_path, THREE_PROBLEMS)

    assert plan_cli.main(["--config", path]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    _check_lines(captured.err.strip().splitlines(), THREE_LINES, "trl-grpo-ext plan: error: ")

    with pytest.raises(RecipeArgumentError) as info:
        parse_recipe_args(["--config", path])
    assert info.value.code == 2
    assert info.value.message.splitlines() == info.value.problems and len(info.value.problems) == 3
    _check_lines(capsys.readouterr().err.strip().splitlines(), THREE_LINES, "error: ")


@pytest.mark.parametrize("change, cli, expected", [
    # a conflict, a choice and a value the parser cannot read (YAML) are independent too
    ({"per_device_train_batch_size": 4, "loss_type": "dapoo", "lora_dropout": "high"}, [],
     [(["micro_batch_size", "per_device_train_batch_size"], "Remove per_device_train_batch_size"),
      (["loss_type='dapoo'"], "Did you mean 'dapo'"),
      (["lora_dropout='high'"], "Fix: use 0.0 or e.g. 0.05")]),
    # the command line: a value its type cannot read ends the reading (argparse's line), after the unknown key
    ({"load_in_8bit": True, "lora_rr": 8}, ["--num_generations", "two"],
     [(["'lora_rr'", "did you mean 'lora_r'"], "Remove or rename them"),
      (["--num_generations", "invalid int value: 'two'"], "")]),
    # a refused final_eval still asks for an evaluation: the test split is read and its problem listed too
    ({"dataset_name": SOLUTION_ROWS, "embedded_num_prompts": DROP, "rewards": ["accuracy"], "dataset_test_split": "tset",
      "final_eval": "adaptor"},
     [], [(["final_eval='adaptor'"], "Did you mean 'adapter'"),
          (["dataset_test_split='tset'", "Unknown split"], "Fix: name a split that exists")]),
    # the eval batch (G 8: 5 completions hold no whole group) next to a value out of range: one run shows both
    ({"eval_strategy": "steps", "eval_steps": 10, "per_device_eval_batch_size": 5, "learning_rate": -1}, [],
     [(["per_device_eval_batch_size=5", "num_generations_eval=8"], "Fix: set per_device_eval_batch_size: 8"),
      (["learning_rate=-1"], "Fix:")]),
])
def test_problems_of_every_kind_are_collected(tmp_path, capsys, no_weights, change, cli, expected):
    path = _config(tmp_path, change)
    assert plan_cli.main(["--config", path, *cli]) == 2
    _check_lines(capsys.readouterr().err.strip().splitlines(), expected, "trl-grpo-ext plan: error: ")
    with pytest.raises(RecipeArgumentError) as info:
        parse_recipe_args(["--config", path, *cli])
    _check_lines(info.value.problems, expected, "")


@pytest.mark.parametrize("change, names", [
    # the filter's value is refused: the tolerance is not also reported as ignored (it is set for a filter)
    ({"zero_variance_filter": "masc", "zero_variance_tolerance": 0.1}, ["zero_variance_filter='masc'"]),
    # a value out of range is not also reported as ignored
    ({"use_peft": False, **_NO_4BIT, "lora_r": 0, "lora_alpha": DROP, "lora_dropout": DROP,
      "lora_target_modules": DROP},
     ["lora_r=0"]),
    # an invalid quantity is not restated by the checks that resolve the quantities (clipping, zero-variance)
    ({"num_generations": 1, "epsilon_high": 0.28, "zero_variance_filter": "mask"}, ["num_generations=1"]),
])
def test_a_problem_that_follows_from_another_is_not_repeated(tmp_path, capsys, no_weights, change, names):
    path = _config(tmp_path, change)
    assert plan_cli.main(["--config", path]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    _check_message(lines[0], names, FIX)
    with pytest.raises(RecipeArgumentError) as info:
        parse_recipe_args(["--config", path])
    assert info.value.problems == [lines[0].removeprefix("trl-grpo-ext plan: error: ")]


def test_the_recipe_reports_a_missing_model_with_the_config_s_problems(tmp_path, capsys, no_weights, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = _config(tmp_path, {"model_name_or_path": "./no/such/model", "temperature": 0})
    with pytest.raises(RecipeArgumentError) as info:
        parse_recipe_args(["--config", path])
    assert len(info.value.problems) == 2
    assert info.value.problems[0].startswith("temperature=0 must be a number > 0")
    assert "model_name_or_path='./no/such/model' is not an existing directory" in info.value.problems[1]


@pytest.mark.parametrize("name", ["skip_exploration_probability", "zero_variance_tolerance", "max_resample_rounds",
                                  "zero_variance_filter", "adapter_dtype", "save_strategy"])
def test_null_for_a_field_that_needs_a_value_is_refused_by_plan_and_recipe(name, tmp_path, capsys, no_weights):
    # YAML's `null` for a field that needs a value (a number, a choice) passed plan and failed in the run
    change = {"zero_variance_filter": {"skip_exploration_probability": "skip", "max_resample_rounds": "resample"}
              .get(name, "mask"), "total_training_steps": 80, "total_epochs": 3, name: None}  # 2.5 epochs: skip acts
    path = _config(tmp_path, change)
    assert plan_cli.main(["--config", path]) == 2
    _check_message(capsys.readouterr().err.strip(), [f"{name}=None"], "Fix:")
    with pytest.raises(RecipeArgumentError) as info:
        parse_recipe_args(["--config", path])
    _check_message(info.value.message, [f"{name}=None"], "Fix:")


@pytest.mark.parametrize("values, says", [
    ({"lr_scheduler_type": "cosine_with_min_lr", "lr_scheduler_kwargs": {"min_lr": 1e-5, "min_lr_rate": 0.1}},
     "sets both min_lr and min_lr_rate"),  # transformers: "Only one of min_lr or min_lr_rate should be set"
    ({"lr_scheduler_type": "cosine_with_min_lr", "lr_scheduler_kwargs": {"min_lr_rate": None}}, "which sets none"),
])
def test_trainer_settings_found_by_a_second_breaker_round(values, says):
    from trl_grpo_ext.validation.problems import Problems
    from trl_grpo_ext.validation.trainer_settings import check_trainer_settings

    check_trainer_settings(values, problems := Problems())
    assert any(says in line for line in problems.messages), problems.messages


@pytest.mark.parametrize("values", [
    {"lr_scheduler_type": "cosine_with_min_lr", "lr_scheduler_kwargs": '{"min_lr_rate": 0.1}'},
    {"load_best_model_at_end": True, "eval_strategy": "steps", "save_strategy": "steps", "save_steps": 20,
     "logging_steps": 10},
    {"load_best_model_at_end": True, "eval_strategy": "no", "save_strategy": "best"},
])
def test_trainer_settings_accept_what_transformers_accepts(values):
    from trl_grpo_ext.validation.problems import Problems
    from trl_grpo_ext.validation.trainer_settings import check_trainer_settings

    check_trainer_settings(values, problems := Problems())
    assert problems.messages == []


def test_a_continued_adapter_s_folder_written_with_a_tilde_is_its_folder(tmp_path, monkeypatch):
    import shutil

    from trl_grpo_ext.validation.trainer_settings import check_continued_adapter

    monkeypatch.setenv("HOME", str(tmp_path))
    shutil.copytree(ADAPTER, tmp_path / "ad")
    with pytest.raises(ValueError, match="is the adapter folder being continued"):
        check_continued_adapter({"model_name_or_path": "~/ad", "use_peft": True, "output_dir": "~/ad"})



def test_a_refused_deepspeed_value_is_not_restated_by_the_engine_rule(tmp_path, capsys, no_weights):
    path = _config(tmp_path, {"deepspeed": str(tmp_path / "missing.json")})
    assert plan_cli.main(["--config", path]) == 2
    err = capsys.readouterr().err
    assert "names no JSON file it can read" in err and "use_cpu=True with DeepSpeed" not in err


def test_a_config_built_in_python_passes_the_mapping_checks():
    """TrainingArguments.__post_init__ turns accelerator_config into an AcceleratorConfig (always, even unset): the
    checks of a config built in Python read it as the mapping it was built from."""
    from trl_grpo_ext import GRPOExtConfig
    from trl_grpo_ext.validation import validate_run_args

    config = GRPOExtConfig(output_dir="/tmp/unused", use_cpu=True, bf16=False, rewards=["format"], report_to="none",
                           accelerator_config={"split_batches": False})
    assert type(config.accelerator_config).__name__ == "AcceleratorConfig"
    validate_run_args(None, config, None, None, check_model=False)


@pytest.mark.parametrize("change, message", [
    ({"bf16": True, "fp16": True}, "At most one of fp16 and bf16 can be True"),  # transformers' own refusal
    # TRL's and transformers' numeric fields get the ranges plan checks (validation.tables.TRL_RANGES)
    ({"temperature": 0.0}, "temperature=0.0 must be a number > 0"),
    ({"beta": -1.0}, "beta=-1.0 must be a number >= 0"),
    ({"max_completion_length": 0}, "max_completion_length=0 must be an integer >= 1"),
    # TRL checks loss_type only in its loss, after the model loaded and generated (a drop-in user's finding)
    ({"loss_type": "drgrpo"}, "loss_type='drgrpo' is not valid. Did you mean 'dr_grpo'?"),
    ({"accelerator_config": {"dispatch_batches": True, "split_batches": True}},
     "accelerator_config.dispatch_batches=True has process 0 read every batch"),
])
def test_a_config_built_in_python_refuses_what_plan_and_the_recipe_refuse(change, message):
    """`GRPOExtConfig.__post_init__` runs the rules of its own fields (scope "run"): a setting no other setting could
    switch on is refused as the YAML's is, with the same line."""
    from trl_grpo_ext import GRPOExtConfig

    with pytest.raises(ValueError, match=re.escape(message)):
        GRPOExtConfig(output_dir="/tmp/unused", use_cpu=True, **{"bf16": False, **change})


@pytest.mark.parametrize("change, message", [
    ({"save_strategy": "no", "save_steps": 100}, "save_steps=100 only takes effect with save_strategy: steps"),
    ({"zero_variance_filter": "off", "skip_exploration_probability": 0.3},
     "skip_exploration_probability=0.3 only takes effect with zero_variance_filter: skip"),
])
def test_a_config_built_in_python_warns_of_a_field_without_effect(change, message):
    """A field without effect is named in a warning (`IneffectiveSettingWarning`), not refused, as in the recipe."""
    from trl_grpo_ext import GRPOExtConfig
    from trl_grpo_ext.config.checks import IneffectiveSettingWarning

    with pytest.warns(IneffectiveSettingWarning, match=re.escape(message)):
        GRPOExtConfig(output_dir="/tmp/unused", use_cpu=True, bf16=False, **change)


def test_a_config_built_in_python_is_not_judged_by_the_recipe_fields_it_lacks(monkeypatch, recwarn):
    """A Python user merges for generation with a peft_config, pushes with trainer.push_to_hub() and evaluates with
    trainer.evaluate(): the rows of the recipe's use_peft / push_to_hub_mode / evaluation do not apply (no warning);
    accelerate's mixed_precision does, against bf16 as the config resolves it."""

    from trl_grpo_ext import GRPOExtConfig

    config = GRPOExtConfig(output_dir="/tmp/unused", use_cpu=True, bf16=False, merge_adapter_for_generation=True,
                           hub_model_id="you/model", num_generations_eval=4, eval_on_start=True, do_eval=True)
    assert not [w for w in recwarn if "only take" in str(w.message)], [str(w.message) for w in recwarn]
    assert config.merge_adapter_for_generation and config.eval_on_start
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    with pytest.raises(ValueError, match=r"bf16 and fp16 are both false, but accelerate's mixed_precision='bf16' "
                                         r"\(from ACCELERATE_MIXED_PRECISION\)"):
        GRPOExtConfig(output_dir="/tmp/unused", use_cpu=True)


#: Settings off for `NEEDS` rows (the dataclasses' defaults switch some on), and rows needing another context.
_OFF = {"save_strategy": "no", "logging_strategy": "no", "eval_strategy": "no", "use_cpu": True,
        "lr_scheduler_type": "constant", "final_eval": "none", "dataset_name": "embedded:count-char", "beta": 0.0}
_ROW_OFF = dict.fromkeys(("embedded_num_prompts", "embedded_seed"), {"dataset_name": "me/data"})


def test_every_needs_row_warns_or_refuses_when_its_setting_is_off():
    """A row added to `tables.NEEDS` (one `needs` / `_when` call) is tested here for free: with its setting off, each
    field gives one line naming it and its setting: a warning, or a refusal for a row of severity "error"."""
    from trl_grpo_ext.validation.problems import Problems
    from trl_grpo_ext.validation.rules import RULES, RunView
    from trl_grpo_ext.validation.user_values import DEFAULTS

    rows = [rule for rule in RULES if rule.needs]
    assert sum(len(rule.fields) for rule in rows) >= 30
    for rule in rows:
        for name in rule.fields:
            value = "zzz"
            problems = Problems()
            values = {**DEFAULTS, **_OFF, **_ROW_OFF.get(name, {}), name: value}
            problems.check(rule, RunView(values, {name: value}, problems=problems))
            said, other = (problems.messages, problems.warnings) if rule.severity == "error" else \
                (problems.warnings, problems.messages)
            assert len(said) == 1 and said[0].startswith(f"{name}=") and \
                f"only takes effect with {rule.needs}" in said[0] and other == [], (name, said, other)
