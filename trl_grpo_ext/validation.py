"""Every bad input of a run refused before any weight loads, by kind rather than case by case.

`validate_run_args` is called by the recipe's argument stage (`launch.parse_recipe_args`) and by `trl-grpo-ext plan`
on the same four argument objects (`RecipeArguments`, `GRPOExtConfig`, `trl.ModelConfig`, `HubPushArguments`, or
namespaces holding the keys a YAML file sets). Each refusal is a :class:`RunArgumentError` (a `ValueError`) whose one
line names the field, the value and a fix. The kinds of check, each driven by a table below:

- :data:`RANGES` and :data:`CHOICES`: the range of every numeric field that this package, TRL 1.16, PEFT or
  transformers 5 reads, and the allowed values of the string fields that would otherwise fail after the model loads
  (or at the first step). ``tests/test_validation.py`` checks that every numeric field of the four dataclasses is
  in :data:`RANGES` or in :data:`UNCHECKED_NUMERIC` with the reason.
- :data:`EXCLUSIVE`: fields that cannot both be on (both are named).
- :data:`REQUIRES`: fields that only take effect under another setting (``lora_r`` needs ``use_peft``, ...): set
  without it, they would be silently ignored.
- Conflicts between our fields and the TRL fields they write (``micro_batch_size`` and
  ``per_device_train_batch_size``, ``advantage_preset`` and ``loss_type``, ...) are judged by whether the *user set*
  both keys (`user_values`: the YAML mapping plus the command-line overrides, see :func:`user_values_from_argv`),
  never by comparing a value with its default: ``per_device_train_batch_size: 8`` is refused next to
  ``micro_batch_size: 4`` although 8 is TRL's default.
- Combinations: evaluation without a test split; `multi_objective_aggregation: normalize_then_sum` (TRL's fixed
  per-reward formula) with advantage settings it would ignore; reward parameters against run settings
  (`soft_overlong`, `length`); the optional packages each selected reward needs (its ``required_packages``); the
  dataset columns each reward reads (its ``required_columns``, :func:`check_reward_columns`); LoRA target modules
  against the module names of the model, built on the meta device from its config (:func:`check_lora_targets`).

Importing this module imports neither torch nor TRL (`plan` stays fast). Only :func:`model_modules` imports torch
and transformers, the first time it meets a model config: the module names are then cached on disk.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .checks import Range, RunArgumentError
from .checks import as_number as _as_number
from .checks import format_number as _fmt

__all__ = [
    "RunArgumentError",
    "Range",
    "RANGES",
    "CHOICES",
    "EXCLUSIVE",
    "REQUIRES",
    "validate_run_args",
    "check_user_values",
    "check_reward_columns",
    "check_lora_targets",
    "model_modules",
    "peft_target_matches",
    "user_values_from_argv",
    "UserValues",
]


def _int(low, fix, source="", high=None):
    return Range(low=low, high=high, integer=True, fix=fix, source=source)


def _pos(fix, source=""):
    return Range(low=0, low_open=True, fix=fix, source=source)


def _nonneg(fix, source=""):
    return Range(low=0, fix=fix, source=source)


def _unit(fix, source="", low_open=False, high_open=False):
    return Range(low=0, high=1, low_open=low_open, high_open=high_open, fix=fix, source=source)


_PORT = _int(1, "use a free TCP port, e.g. 8000.", "vLLM server / NCCL group port", high=65535)

#: Range of every numeric field read by this package, TRL 1.16 (`GRPOConfig`, `ModelConfig`), PEFT (`LoraConfig`) or
#: transformers 5 (`TrainingArguments`). Values outside it either raise after the model has loaded, fail at the
#: first step, or train silently on something meaningless (a negative clip range, a zero learning rate).
RANGES: dict[str, Range] = {
    # --- optimisation (transformers Trainer / torch.optim.AdamW) ---
    "learning_rate": _pos("QLoRA GRPO typically uses 1e-5 to 1e-4; the embedded default uses 2e-3.",
                          "0 trains nothing; a negative rate ascends the loss"),
    "weight_decay": _nonneg("use 0 (no decay) or a small value such as 0.01.", "AdamW decoupled weight decay"),
    "adam_beta1": _unit("use 0.9 (AdamW's default).", "AdamW betas must be in [0, 1)", high_open=True),
    "adam_beta2": _unit("use 0.999 (AdamW's default).", "AdamW betas must be in [0, 1)", high_open=True),
    "adam_epsilon": _pos("use 1e-8 (AdamW's default).", "AdamW divides by sqrt(v) + eps"),
    "max_grad_norm": _nonneg("use 1.0, or 0 to disable clipping.", "Trainer clips when > 0"),
    "warmup_steps": Range(low=0, fix="use a fraction of the run in [0, 1) (e.g. 0.1) or a whole number of steps.",
                          source="transformers: < 1 is a fraction of the run, >= 1 whole steps (int() truncates)"),
    "label_smoothing_factor": _unit("use 0 (GRPO does not read it).", "Trainer label smoother", high_open=True),
    "neftune_noise_alpha": _nonneg("remove it or use e.g. 5.", "NEFTune noise scale"),
    "num_train_epochs": _nonneg("use a positive number of passes, or total_epochs.", "Trainer"),
    "max_steps": _int(-1, "use -1 (stop by epochs) or a positive number of steps, or total_training_steps.",
                      "Trainer: -1 = by epochs; 0 trains nothing (see quantifiers)"),
    # --- batch shape (quantifiers, TRL GRPOConfig) ---
    "per_device_train_batch_size": _int(1, "use e.g. 8 completions per device, or micro_batch_size.", "Trainer"),
    "per_device_eval_batch_size": _int(1, "use e.g. 8.", "Trainer"),
    "gradient_accumulation_steps": _int(1, "use 1 or more micro-batches per step, or prompts_per_step.", "Trainer"),
    "generation_batch_size": _int(1, "remove it (TRL derives it) or use a multiple of num_generations.", "TRL"),
    "steps_per_generation": _int(1, "remove it (TRL uses gradient_accumulation_steps) or use 1 or more.", "TRL"),
    "num_generations": _int(2, "GRPO compares completions of one prompt: use 2 or more (8 or more for instruct "
                               "models).", "TRL raises for < 2 (group std undefined)"),
    "num_generations_eval": _int(1, "remove it (evaluation uses num_generations) or use 1 or more.", "TRL"),
    "num_iterations": _int(1, "use 1 (one update per generation batch) or more.", "TRL's μ"),
    "prompts_per_step": _int(1, "use e.g. prompts_per_step: 4.", "quantifiers"),
    "micro_batch_size": _int(1, "use e.g. micro_batch_size: 8.", "quantifiers"),
    "total_training_steps": _int(1, "use a positive number of steps, or remove it to stop by total_epochs.",
                                 "quantifiers"),
    "total_epochs": _pos("use a positive number of passes (e.g. 1, 2.5), or remove it.", "quantifiers"),
    "eval_accumulation_steps": _int(1, "remove it or use 1 or more.", "Trainer"),
    "torch_empty_cache_steps": _int(1, "remove it or use 1 or more.", "Trainer"),
    # --- logging / saving / evaluation cadence (transformers: < 1 is a fraction of the run) ---
    "logging_steps": _pos("use e.g. 1 or 10 (or a fraction of the run < 1).", "Trainer"),
    "save_steps": _pos("use e.g. 50 (or a fraction of the run < 1).", "Trainer"),
    "eval_steps": _pos("use e.g. 50 (or a fraction of the run < 1), or remove it.", "Trainer"),
    "eval_delay": _nonneg("use 0.", "Trainer"),
    "save_total_limit": _int(1, "use null to keep every checkpoint, or 1 or more (0 keeps them all, silently).",
                             "Trainer._rotate_checkpoints ignores values <= 0"),
    "seed": _int(0, "use a whole number in [0, 2**32 - 1], e.g. 42.", "numpy seeds must be in [0, 2**32)",
                 high=2**32 - 1),
    "data_seed": _int(0, "remove it or use a whole number in [0, 2**32 - 1].", "numpy", high=2**32 - 1),
    "dataloader_num_workers": _int(0, "use 0 (load in the main process) or more.", "torch DataLoader"),
    "dataloader_prefetch_factor": _int(1, "remove it or use 1 or more.", "torch DataLoader"),
    "ddp_timeout": _int(1, "use a positive number of seconds, e.g. 1800.", "torch.distributed"),
    "ddp_bucket_cap_mb": _int(1, "remove it or use a positive size in MB, e.g. 25.", "DDP"),
    "router_aux_loss_coef": _nonneg("remove it or use a value >= 0.", "MoE auxiliary loss"),
    # --- generation (TRL -> transformers GenerationConfig / vLLM SamplingParams) ---
    "max_completion_length": _int(1, "use the longest reply you want in tokens, e.g. 256.", "TRL / generate"),
    "max_prompt_length": _int(1, "use the longest prompt to keep in tokens, e.g. 512, or remove it.", "recipe"),
    "temperature": _pos("GRPO samples G different completions: use e.g. 1.0 (0.7 for instruct models).",
                        "sampling divides logits by it"),
    "top_p": _unit("use 1.0 (no nucleus filtering) or e.g. 0.95.", "GenerationConfig / vLLM", low_open=True),
    "top_k": _int(0, "use 0 (no top-k filtering) or e.g. 50.", "TRL: 0 disables top-k"),
    "min_p": _unit("remove it or use e.g. 0.05.", "GenerationConfig / vLLM"),
    "repetition_penalty": _pos("use 1.0 (none) or e.g. 1.1.", "generate divides/multiplies logits by it"),
    "max_tool_calling_iterations": _int(0, "remove it or use 0 or more.", "TRL tool calling"),
    "num_completions_to_print": _int(0, "remove it or use 0 or more.", "TRL logging"),
    # --- GRPO loss (TRL) ---
    "beta": _nonneg("use 0 (no KL term, TRL's default) or e.g. 0.04.", "KL coefficient"),
    "epsilon": _nonneg("use 0.2 (PPO/GRPO's clip range).", "lower clip bound 1 - epsilon"),
    "epsilon_high": _nonneg("remove it (defaults to epsilon) or use e.g. 0.28 (DAPO clip-higher).",
                            "upper clip bound 1 + epsilon_high"),
    "delta": Range(low=1, low_open=True, fix="remove it or use e.g. 1.2 + epsilon (an upper bound on the ratio).",
                   source="TRL two-sided clipping: the ratio is clamped to <= delta, a bound above 1"),
    "top_entropy_quantile": _unit("use 1.0 (all tokens) or e.g. 0.2.", "TRL: keeps the top-ρ entropy tokens",
                                  low_open=True),
    "entropy_coef_min": _nonneg("use 0 or a small coefficient.", "TRL adaptive entropy"),
    "entropy_coef_max": _nonneg("use e.g. 1.0.", "TRL adaptive entropy"),
    "entropy_coef_delta": _pos("use e.g. 0.005.", "TRL adaptive entropy step"),
    "entropy_target": _pos("use e.g. 0.2 nats.", "TRL adaptive entropy target (nats per token)"),
    "sapo_temperature_neg": _pos("use 1.05 (TRL's default).", "SAPO soft gate temperature"),
    "sapo_temperature_pos": _pos("use 1.0 (TRL's default).", "SAPO soft gate temperature"),
    "vespo_k_pos": _pos("use TRL's default 2.0.", "VESPO exponent"),
    "vespo_lambda_pos": _pos("use TRL's default 3.0.", "VESPO scale"),
    "vespo_k_neg": _pos("use TRL's default 3.0.", "VESPO exponent"),
    "vespo_lambda_neg": _pos("use TRL's default 2.0.", "VESPO scale"),
    "ref_model_mixup_alpha": _unit("use 0.6 (TRL's default).", "TR-DPO mix-up weight"),
    "ref_model_sync_steps": _int(1, "use e.g. 512.", "reference model sync period [steps]"),
    "off_policy_mask_threshold": _nonneg("remove it or use a value >= 0.", "TRL off-policy masking"),
    "vllm_importance_sampling_clip_max": _pos("use 3.0 (TRL's default).", "TRL IS correction"),
    "vllm_importance_sampling_clip_min": _nonneg("remove it or use a value >= 0.", "TRL IS correction"),
    "vllm_importance_sampling_cap": _pos("remove it (deprecated: use vllm_importance_sampling_clip_max).", "TRL"),
    # --- vLLM ---
    "vllm_server_port": _PORT,
    "vllm_group_port": _PORT,
    "vllm_server_timeout": _pos("use e.g. 240 seconds.", "TRL vLLM client"),
    "vllm_gpu_memory_utilization": _unit("use e.g. 0.3 (colocate) or 0.9 (server).", "vLLM", low_open=True),
    "vllm_tensor_parallel_size": _int(1, "use 1 or the number of GPUs per vLLM engine.", "vLLM"),
    "vllm_max_model_length": _int(1, "remove it or use prompt + completion tokens.", "vLLM"),
    # --- ours ---
    "advantage_epsilon": _nonneg("use 1e-4 (TRL's).", "advantages: A = (R - b) / (σ + ε)"),
    "zero_variance_tolerance": _nonneg("use 0 (exactly equal rewards) or a small spread such as 1e-6.",
                                       "zero_variance"),
    "max_resample_rounds": _int(0, "use e.g. 3.", "zero_variance resample"),
    "lost_update_steps": _int(0, "use 0 (off) or e.g. 10.", "adapter_precision"),
    "lost_update_warning_threshold": _unit("use e.g. 0.2.", "adapter_precision (a fraction)"),
    "embedded_num_prompts": _int(1, "use e.g. 240.", "tiny"),
    "eval_num_prompts": _int(1, "remove it (the whole test split) or use e.g. 64.", "data.load_eval_dataset"),
    "final_eval_num_samples": _int(0, "use 0 (greedy only) or e.g. 8 samples per prompt.", "evaluation"),
    # --- LoRA (trl.ModelConfig -> peft.LoraConfig) ---
    "lora_r": _int(1, "use a rank such as 8 or 16.", "PEFT raises for r <= 0, after the model loads"),
    "lora_alpha": _pos("use e.g. 2 × lora_r (16 for r 8).", "PEFT scales the update by alpha / r"),
    "lora_dropout": _unit("use 0.0 or e.g. 0.05.", "torch.nn.Dropout probability", high_open=True),
}

#: Numeric fields deliberately not range-checked here, with the reason (checked by tests/test_validation.py).
UNCHECKED_NUMERIC: dict[str, str] = {
    "local_rank": "set by the launcher, not by users",
    "reward_weights": "a list; checked by rewards.spec (finite numbers, one per reward)",
    "pad_to_multiple_of": "int or 'auto'; TRL validates it",
    "entropy_coef": "any finite sign is meaningful (a negative value is an entropy penalty)",
}

#: Allowed values of string fields that would otherwise be accepted and fail after the model loads or at step 1.
CHOICES: dict[str, tuple[str, ...]] = {
    "loss_type": ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo"),
    "multi_objective_aggregation": ("sum_then_normalize", "normalize_then_sum"),
    "importance_sampling_level": ("token", "sequence"),
    "dataset_format": ("prompt", "gsm8k"),
    "final_eval": ("none", "adapter", "compare_base"),
    "bnb_4bit_quant_type": ("nf4", "fp4"),
    "eval_strategy": ("no", "steps", "epoch"),
    "save_strategy": ("no", "steps", "epoch", "best"),
    "logging_strategy": ("no", "steps", "epoch"),
    # ours (the same tuples as `config.ZERO_VARIANCE_MODES`, ... ; pinned by tests/test_validation.py)
    "zero_variance_filter": ("off", "mask", "resample"),
    "adapter_dtype": ("float32", "bfloat16"),
    "reward_error_policy": ("raise", "none"),
}

#: Pairs of fields that cannot both be on: (a, b, fix). "On" = true for flags, not None for the others.
EXCLUSIVE: tuple[tuple[str, str, str], ...] = (
    ("load_in_4bit", "load_in_8bit", "choose one quantisation: load_in_4bit (QLoRA, NF4) or load_in_8bit."),
    ("bf16", "fp16", "choose one mixed-precision mode (bf16 on GPUs that support it)."),
    ("generation_batch_size", "steps_per_generation", "set one of them (TRL derives the other)."),
)

#: Fields that only take effect under another setting: field -> (setting, predicate on the run values, fix). A field
#: the user set while the predicate is false would be silently ignored, so it is refused.
REQUIRES: dict[str, tuple[str, Any, str]] = {}
for _name in ("lora_r", "lora_alpha", "lora_dropout", "lora_target_modules", "lora_modules_to_save",
              "lora_task_type", "use_rslora", "use_dora", "lora_target_parameters"):
    REQUIRES[_name] = ("use_peft: true", lambda v: bool(v.get("use_peft")), "set use_peft: true or remove {field}.")
for _name in ("bnb_4bit_quant_type", "use_bnb_nested_quant", "bnb_4bit_quant_storage"):
    REQUIRES[_name] = ("load_in_4bit: true", lambda v: bool(v.get("load_in_4bit")),
                       "set load_in_4bit: true or remove {field}.")
REQUIRES["max_resample_rounds"] = ("zero_variance_filter: resample",
                                   lambda v: v.get("zero_variance_filter") == "resample",
                                   "set zero_variance_filter: resample or remove {field}.")
REQUIRES["zero_variance_tolerance"] = ("zero_variance_filter: mask or resample",
                                       lambda v: v.get("zero_variance_filter") in ("mask", "resample"),
                                       "set zero_variance_filter: mask (or resample) or remove {field}.")
REQUIRES["lost_update_warning_threshold"] = ("lost_update_steps > 0", lambda v: (v.get("lost_update_steps") or 0) > 0,
                                             "set lost_update_steps: 10 (say) or remove {field}.")
REQUIRES["embedded_num_prompts"] = ("an embedded dataset_name",
                                    lambda v: str(v.get("dataset_name") or "").startswith("embedded:"),
                                    "use an embedded dataset_name (embedded:count-char, embedded:arithmetic) or "
                                    "remove {field}.")
REQUIRES["dataset_format"] = ("a dataset that is not embedded (the embedded tasks map their own rows)",
                              lambda v: not str(v.get("dataset_name") or "").startswith("embedded:"),
                              "remove {field}: embedded:arithmetic is always read as GSM8K rows and "
                              "embedded:count-char as prompts.")
REQUIRES["embedded_target"] = ("dataset_name: embedded:count-char",
                               lambda v: v.get("dataset_name") == "embedded:count-char",
                               "use dataset_name: embedded:count-char or remove {field}.")
REQUIRES["eval_num_prompts"] = ("an evaluation (eval_strategy other than no, or final_eval)",
                                lambda v: _enum(v.get("eval_strategy")) not in (None, "no")
                                or v.get("final_eval") not in (None, "none"),
                                "set eval_strategy: steps or final_eval: adapter, or remove {field}.")
REQUIRES["final_eval_num_samples"] = ("final_eval: adapter or compare_base",
                                      lambda v: v.get("final_eval") not in (None, "none"),
                                      "set final_eval: adapter or remove {field}.")
for _name in ("sapo_temperature_neg", "sapo_temperature_pos"):
    REQUIRES[_name] = ("loss_type: sapo", lambda v: v.get("loss_type") == "sapo",
                       "set loss_type: sapo or remove {field}.")
for _name in ("vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg"):
    REQUIRES[_name] = ("loss_type: vespo", lambda v: v.get("loss_type") == "vespo",
                       "set loss_type: vespo or remove {field}.")
for _name in ("entropy_coef_min", "entropy_coef_max", "entropy_coef_delta", "entropy_target"):
    REQUIRES[_name] = ("use_adaptive_entropy: true", lambda v: bool(v.get("use_adaptive_entropy")),
                       "set use_adaptive_entropy: true or remove {field}.")
REQUIRES["eval_steps"] = ("eval_strategy: steps", lambda v: _enum(v.get("eval_strategy")) == "steps",
                          "set eval_strategy: steps (with a dataset_test_split) or remove {field}.")
REQUIRES["save_steps"] = ("save_strategy: steps", lambda v: _enum(v.get("save_strategy")) == "steps",
                          "set save_strategy: steps or remove {field}.")

#: The field(s) deciding whether each `REQUIRES` field takes effect. A field written in the YAML is not refused when
#: one of these was given on the command line: `--save_strategy no` over a YAML with `save_steps: 50` switches the
#: feature off on purpose.
GOVERNED_BY: dict[str, tuple[str, ...]] = {
    name: {"embedded_num_prompts": ("dataset_name",), "eval_num_prompts": ("eval_strategy", "final_eval")}.get(
        name, (setting.split(":")[0].split(" ")[0],))
    for name, (setting, _, _) in REQUIRES.items()
}

#: (low field, high field): the first may not exceed the second.
ORDERED: tuple[tuple[str, str], ...] = (
    ("entropy_coef_min", "entropy_coef_max"),
    ("vllm_importance_sampling_clip_min", "vllm_importance_sampling_clip_max"),
)

#: Fields whose value the cross-checks read; used when a caller passes only the keys a YAML sets (`plan`).
#: tests/test_validation.py pins each to the default of its dataclass.
DEFAULTS: dict[str, Any] = {
    "use_peft": False,
    "load_in_4bit": False,
    "load_in_8bit": False,
    "generation_batch_size": None,
    "steps_per_generation": None,
    "zero_variance_filter": "off",
    "lost_update_steps": 0,
    "loss_type": "dapo",
    "use_adaptive_entropy": False,
    "eval_strategy": "no",
    "do_eval": False,
    "save_strategy": "steps",
    "dataset_name": None,
    "dataset_format": "prompt",
    "embedded_target": "a",
    "final_eval": "none",
    "dataset_test_split": "test",
    "max_completion_length": 512,
    "multi_objective_aggregation": "sum_then_normalize",
    "rewards": None,
    "reward_weights": None,
    "model_name_or_path": None,
    "model_revision": "main",
    "trust_remote_code": False,
    "lora_target_modules": None,
    "lora_modules_to_save": None,
    "entropy_coef_min": 0.0,
    "entropy_coef_max": 1.0,
    "vllm_importance_sampling_clip_min": None,
    "vllm_importance_sampling_clip_max": 3.0,
}

#: Advantage fields that TRL's `normalize_then_sum` formula ignores (it normalises each reward over its group with
#: the sample std and ε = 1e-4, sums, then normalises over the batch; `GRPOTrainer._generate_and_score_completions`).
NORMALIZE_THEN_SUM_IGNORES = ("advantage_preset", "advantage_baseline", "advantage_std_scaling", "advantage_epsilon",
                              "advantage_std_kind", "scale_rewards")


# ---------------------------------------------------------------------------------------------------------------------
# what the user set
# ---------------------------------------------------------------------------------------------------------------------


class UserValues(dict):
    """The keys a user set and their values (a `dict`), with ``command_line_keys``: those given on the command line."""

    command_line_keys: frozenset = frozenset()


def user_values_from_argv(argv: Sequence[str], parser: argparse.ArgumentParser | None = None) -> UserValues:
    """The keys the user set and their values: the ``--config`` YAML mapping, overridden by command-line arguments.

    Args:
        argv (`list[str]`): the arguments as given to TRL's ``TrlParser.parse_args_and_config``.
        parser (`argparse.ArgumentParser`, *optional*): the parser that will read ``argv`` (a ``TrlParser``). The
            command line is parsed into a namespace pre-filled with a sentinel, so exactly the destinations an
            argument wrote are kept (abbreviations, ``--no_x`` flags and dashed aliases included), typed as the
            parser types them. Without a parser, ``--key value`` / ``--key=value`` tokens are read as strings.

    Returns:
        `UserValues`: field name -> value, only for keys the user set (the YAML's ``env`` key excluded); its
        ``command_line_keys`` are the keys the command line set.

    Raises:
        RunArgumentError: the YAML file is not a mapping. (A missing file is reported by the caller.)
    """
    import yaml

    args = list(argv)
    values = UserValues()
    if "--config" in args:
        index = args.index("--config")
        path = args[index + 1] if index + 1 < len(args) else None
        del args[index:index + 2]
        if path is not None and Path(path).is_file():
            data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
            if data is not None and not isinstance(data, dict):
                raise RunArgumentError(f"--config {path}: expected a mapping of field names to values, got "
                                       f"{type(data).__name__}. Fix: write one `key: value` per line.")
            values.update({k: v for k, v in (data or {}).items() if k != "env"})
    if parser is None:
        cli: dict[str, Any] = {}
        i = 0
        while i < len(args):
            token = args[i]
            if token.startswith("--"):
                key, eq, value = token[2:].partition("=")
                if not eq and i + 1 < len(args) and not args[i + 1].startswith("--"):
                    value, i = args[i + 1], i + 1
                cli[key.replace("-", "_")] = value if (eq or value) else True
            i += 1
    else:
        sentinel = object()
        namespace = argparse.Namespace(**{a.dest: sentinel for a in parser._actions if a.dest != "help"})
        parsed, _ = parser.parse_known_args(args, namespace=namespace)
        cli = {k: v for k, v in vars(parsed).items() if v is not sentinel}
    values.update(cli)
    values.command_line_keys = frozenset(cli)
    return values


# ---------------------------------------------------------------------------------------------------------------------
# checks on the values the user set (no dataclass needed: run before TRL's own __post_init__ checks)
# ---------------------------------------------------------------------------------------------------------------------


def _typed(value: Any) -> Any:
    """A numeric string as TRL's parser types it ("4" -> 4, "1.5" -> 1.5); anything else unchanged."""
    if isinstance(value, str):
        for cast in (int, float):
            try:
                return cast(value)
            except ValueError:
                pass
    return value


def _enum(value: Any) -> Any:
    return getattr(value, "value", value)


def _on(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() not in ("false", "0", "no", "none", "null", "")
    return value is not None and value is not False


def check_user_values(user_values: Mapping[str, Any], world_size: int = 1) -> None:
    """Check what the user set, before any dataclass is built: ranges, choices, exclusive pairs, conflicts.

    Args:
        user_values (`Mapping[str, Any]`): field -> value for the keys the user set (see
            :func:`user_values_from_argv`).
        world_size (`int`, defaults to `1`): processes, for the quantity conflicts.

    Raises:
        RunArgumentError: the first problem found, in one line naming the field(s), the value(s) and a fix.
    """
    for name, value in user_values.items():
        if name in RANGES:
            RANGES[name].check(name, value)
        if name in CHOICES and value is not None and _enum(value) not in CHOICES[name]:
            import difflib

            close = difflib.get_close_matches(str(value), CHOICES[name], n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise RunArgumentError(f"{name}={value!r} is not valid: {hint}choose one of "
                                   f"{', '.join(map(repr, CHOICES[name]))}. Fix: {name}: {(close or CHOICES[name])[0]}")
    for a, b, fix in EXCLUSIVE:
        if _on(user_values.get(a)) and _on(user_values.get(b)):
            raise RunArgumentError(f"{a}={user_values[a]!r} and {b}={user_values[b]!r} cannot both be set. Fix: {fix}")
    _check_quantity_conflicts(user_values, world_size)
    _check_advantage_conflicts(user_values)


def _check_quantity_conflicts(user_values: Mapping[str, Any], world_size: int) -> None:
    """Our batch/stop fields next to the raw TRL fields they write: judged on the keys the user set."""
    from .plan.resolve import _INPUT_FIELDS, QuantityError, resolve_trl_fields

    given = {k: _typed(v) for k, v in user_values.items() if k in _INPUT_FIELDS and v is not None}
    if not given:
        return
    try:
        resolve_trl_fields(given, world_size, set_fields=set(given))
    except QuantityError as err:
        raise RunArgumentError(str(err)) from None


def _check_advantage_conflicts(user_values: Mapping[str, Any]) -> None:
    """The advantage preset, `scale_rewards`, `loss_type` and our advantage fields: conflicts between set keys."""
    from .advantage_settings import AdvantageConfigError, resolve_advantage_settings

    names = ("advantage_preset", "advantage_baseline", "advantage_std_scaling", "advantage_epsilon",
             "advantage_std_kind", "scale_rewards", "loss_type")
    if not any(user_values.get(n) is not None for n in names):
        return
    scale_set = user_values.get("scale_rewards") is not None
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the config's own resolution warns once, later
            resolve_advantage_settings(
                preset=user_values.get("advantage_preset"),
                scale_rewards=user_values["scale_rewards"] if scale_set else "group",
                advantage_baseline=user_values.get("advantage_baseline"),
                advantage_std_scaling=user_values.get("advantage_std_scaling"),
                advantage_epsilon=_as_number(user_values.get("advantage_epsilon")) if user_values.get(
                    "advantage_epsilon") is not None else None,
                advantage_std_kind=user_values.get("advantage_std_kind"),
                loss_type=user_values.get("loss_type"),
                # every field the user set counts as explicit, whatever its value: no comparison with a default
                defaults={"scale_rewards": None if scale_set else "group"},
            )
    except AdvantageConfigError as err:
        raise RunArgumentError(str(err)) from None


# ---------------------------------------------------------------------------------------------------------------------
# the whole run
# ---------------------------------------------------------------------------------------------------------------------


def _flatten(*objects: Any) -> dict[str, Any]:
    values = dict(DEFAULTS)
    for obj in objects:
        if obj is None:
            continue
        values.update(obj if isinstance(obj, Mapping) else vars(obj))
    return values


def validate_run_args(script_args: Any, training_args: Any, model_args: Any, push_args: Any, *,
                      user_values: Mapping[str, Any] | None = None, world_size: int = 1,
                      dataset_columns: Sequence[str] | None = None, check_model: bool = True) -> None:
    """Refuse every bad combination of a run's arguments before any weight loads.

    Args:
        script_args, training_args, model_args, push_args: the recipe's four argument objects (`RecipeArguments`,
            `GRPOExtConfig`, `trl.ModelConfig`, `HubPushArguments`), or any objects (or mappings) holding some of
            their fields; fields absent from all four take :data:`DEFAULTS`. `plan` passes the YAML's keys.
        user_values (`Mapping[str, Any]`, *optional*): the keys the user set and their values (YAML + command line,
            :func:`user_values_from_argv`). Conflicts and settings that would be ignored are judged on these keys;
            without them only ranges, choices and combinations of the resolved values are checked.
        world_size (`int`, defaults to `1`): training processes.
        dataset_columns (`list[str]`, *optional*): the training dataset's columns; when ``None`` they are known only
            for the embedded and GSM8K-format datasets (the recipe calls :func:`check_reward_columns` again after
            loading the dataset, before the model).
        check_model (`bool`, defaults to `True`): check LoRA target modules against the model's module names
            (:func:`model_modules`: the model built on the meta device once per config, then cached; no weights).

    Raises:
        RunArgumentError: one line naming the field(s), the value(s) and a fix.
    """
    user = dict(user_values or {})
    check_user_values(user, world_size)
    values = _flatten(script_args, training_args, model_args, push_args)
    values.update({k: v for k, v in user.items() if k not in values})  # keys only the user values hold (plan)
    for name, rng in RANGES.items():
        if name in values and not isinstance(values[name], (list, tuple, dict)):
            rng.check(name, values[name])
    for name, choices in CHOICES.items():
        value = _enum(values.get(name))
        if name in values and value is not None and value not in choices:
            raise RunArgumentError(f"{name}={value!r} is not valid. Fix: choose one of {', '.join(map(repr, choices))}.")
    ignored: dict[str, list[str]] = {}  # setting -> fields the user set that need it
    cli_keys = getattr(user_values, "command_line_keys", frozenset())
    for name in user:
        if name in REQUIRES and user[name] is not None and not REQUIRES[name][1](values):
            if name not in cli_keys and cli_keys.intersection(GOVERNED_BY[name]):
                continue  # switched off on the command line over a YAML that configures it
            ignored.setdefault(REQUIRES[name][0], []).append(name)
    for setting, names in ignored.items():
        fix = REQUIRES[names[0]][2].format(field=" and ".join(names))
        given = ", ".join(f"{n}={user[n]!r}" for n in names)
        raise RunArgumentError(f"{given} only take{'s' if len(names) == 1 else ''} effect with {setting}, so "
                               f"{'it' if len(names) == 1 else 'they'} would be ignored. Fix: {fix}")
    for low, high in ORDERED:
        lo, hi = _as_number(values.get(low)), _as_number(values.get(high))
        if lo is not None and hi is not None and lo > hi:
            raise RunArgumentError(f"{low}={values[low]!r} is above {high}={values[high]!r}. Fix: make {low} <= {high}.")
    _check_evaluation(values, user)
    _check_aggregation(values, user)
    specs = _reward_specs(values)
    _check_rewards_against_run(specs, values)
    _check_reward_packages(specs)
    columns = dataset_columns if dataset_columns is not None else _known_columns(values)
    if columns is not None:
        check_reward_columns(columns, specs)
    _check_lora_names(values)
    if check_model and values.get("use_peft"):
        check_lora_targets(values)


def _check_evaluation(values: Mapping[str, Any], user: Mapping[str, Any]) -> None:
    """Evaluation needs a test split: `dataset_test_split` (TRL's default "test") not set to null or "".

    Whether the named split exists is checked by the recipe's data stage (`data.load_eval_dataset`), which loads it
    before the model; `plan` cannot look into a Hub dataset offline.
    """
    strategy = _enum(values.get("eval_strategy"))
    final_eval = values.get("final_eval") or "none"
    evaluating = (strategy not in (None, "no")) or bool(values.get("do_eval")) or final_eval != "none"
    if not evaluating:
        return
    if values.get("dataset_test_split"):
        return
    setting = (f"eval_strategy={strategy!r}" if strategy not in (None, "no")
               else f"final_eval={final_eval!r}" if final_eval != "none" else "do_eval=True")
    raise RunArgumentError(
        f"{setting} evaluates on a test split, but dataset_test_split={values.get('dataset_test_split')!r}. Fix: set "
        "dataset_test_split: <split of dataset_name> (e.g. test), or eval_strategy: no and final_eval: none."
    )


def _check_aggregation(values: Mapping[str, Any], user: Mapping[str, Any]) -> None:
    """`normalize_then_sum` is TRL's fixed formula: advantage settings set next to it would be ignored."""
    if values.get("multi_objective_aggregation") != "normalize_then_sum":
        return
    if values.get("zero_variance_filter") not in (None, "off"):
        raise RunArgumentError(
            f"zero_variance_filter={values['zero_variance_filter']!r} judges groups on the weighted total reward and "
            "needs multi_objective_aggregation='sum_then_normalize', got 'normalize_then_sum'. Fix: use "
            "multi_objective_aggregation: sum_then_normalize, or zero_variance_filter: off."
        )
    ignored = [n for n in NORMALIZE_THEN_SUM_IGNORES if user.get(n) is not None]
    if ignored:
        name = ignored[0]
        raise RunArgumentError(
            f"{name}={user[name]!r} has no effect with multi_objective_aggregation='normalize_then_sum': TRL then "
            "normalises each reward over its group (sample std, ε 1e-4), sums them and normalises over the batch. "
            f"Fix: remove {name}, or use multi_objective_aggregation: sum_then_normalize."
        )


# ---------------------------------------------------------------------------------------------------------------------
# rewards
# ---------------------------------------------------------------------------------------------------------------------


def _reward_specs(values: Mapping[str, Any]) -> list:
    from .resolved import resolve_reward_specs
    from .rewards.spec import with_run_defaults

    rewards, weights = values.get("rewards"), values.get("reward_weights")
    if rewards is None:
        return []
    try:
        specs = resolve_reward_specs(rewards, weights)  # as GRPOExtConfig resolves them (it writes reward_weights)
    except ValueError as err:
        raise RunArgumentError(str(err)) from None
    max_len = _typed(values.get("max_completion_length"))
    return with_run_defaults(specs, max_len) if isinstance(max_len, int) else specs


def _reward_object(spec) -> Any | None:
    """The reward callable of a registered reward (None for an import path, whose needs are not declared)."""
    from .rewards.registry import get_reward

    if any(c in spec.name for c in ".:"):
        return None
    try:
        return get_reward(spec.name, **spec.kwargs)
    except (TypeError, ValueError) as err:
        message = str(err) if spec.name in str(err) else f"{spec.name}: {err}"
        raise RunArgumentError(f"rewards: {message}") from None


def _check_rewards_against_run(specs: Sequence, values: Mapping[str, Any]) -> None:
    """Reward parameters that, with the run's settings, make a reward constant (no learning signal)."""
    max_len = _as_number(values.get("max_completion_length"))
    if max_len is None:
        return
    for i, spec in enumerate(specs):
        kw = spec.kwargs
        if spec.name in ("soft_overlong", "soft_overlong_punishment_reward"):
            l_max, cache = kw.get("max_completion_len", int(max_len)), kw.get("soft_punish_cache", 0)
            if isinstance(l_max, int) and isinstance(cache, int) and l_max - cache >= max_len:
                fix = (f"remove max_completion_len (it defaults to max_completion_length) or set it to {_fmt(max_len)}"
                       if l_max != max_len else "set soft_punish_cache > 0, e.g. a quarter of "
                       "max_completion_length")
                raise RunArgumentError(
                    f"rewards[{i}] soft_overlong max_completion_len={l_max} with soft_punish_cache={cache} only "
                    f"punishes completions longer than {l_max - cache} tokens, but max_completion_length="
                    f"{_fmt(max_len)} stops them first: it would score 0 for every completion. Fix: {fix}."
                )
        if spec.name == "length" and kw.get("unit", "tokens") == "tokens":
            low, high = kw.get("min_length", 0), kw.get("max_length")
            if isinstance(high, int) and isinstance(low, int) and low <= 1 and high >= max_len:
                raise RunArgumentError(
                    f"rewards[{i}] length max_length={high} is at least max_completion_length={_fmt(max_len)}, so "
                    f"every completion of 1 token or more scores 1.0 (a constant reward). Fix: set max_length below "
                    f"{_fmt(max_len)}, or raise max_completion_length."
                )


def _check_reward_packages(specs: Sequence) -> None:
    """Each reward's ``required_packages`` ((import name, pip requirement), ...) must be importable."""
    for spec in specs:
        reward = _reward_object(spec)
        for module, requirement in getattr(reward, "required_packages", ()) or ():
            if importlib.util.find_spec(module) is None:
                raise RunArgumentError(
                    f"rewards: {spec.name!r} needs the Python package {requirement!r} (module {module!r}), which is "
                    f"not installed. Fix: pip install {requirement}, or remove {spec.name!r} from rewards."
                )


def _known_columns(values: Mapping[str, Any]) -> list[str] | None:
    """The training dataset's columns when known without loading it: the embedded task and GSM8K-format data."""
    from . import tiny

    name = values.get("dataset_name")
    if isinstance(name, str) and name == tiny.TINY_DATASET_ID:
        try:
            return list(tiny.count_char_rows(1, target=values.get("embedded_target") or "a")[0])
        except ValueError as err:
            raise RunArgumentError(f"embedded_target: {err} Fix: embedded_target: a") from None
    if values.get("dataset_format") == "gsm8k" or name == "embedded:arithmetic":
        return ["prompt", "answer"]  # data.gsm8k_to_prompt's row (the arithmetic task is mapped the same way)
    return None


def check_reward_columns(columns: Sequence[str], specs_or_values: Any) -> None:
    """Every dataset column a selected reward reads (its ``required_columns``) must be in ``columns``.

    Args:
        columns (`list[str]`): the training dataset's column names.
        specs_or_values: a list of `RewardSpec`, or a `GRPOExtConfig` / mapping holding ``rewards``.

    Raises:
        RunArgumentError: naming the reward, the column(s) it reads, the dataset's columns and the fix.
    """
    if isinstance(specs_or_values, list):
        specs = specs_or_values
    else:
        specs = _reward_specs(_flatten(specs_or_values))
    present = set(columns)
    for i, spec in enumerate(specs):
        reward = _reward_object(spec)
        for alternatives in getattr(reward, "required_columns", ()) or ():
            if not present.intersection(alternatives):
                wanted = " or ".join(map(repr, alternatives))
                raise RunArgumentError(
                    f"rewards[{i}] {spec.name!r} reads the dataset column {wanted}, but the dataset has the columns "
                    f"{sorted(present)}. Fix: add the column to the dataset, or choose one with the reward's column "
                    f"parameter ({{name: {spec.name}, kwargs: {{column: <name>}}}})."
                )


# ---------------------------------------------------------------------------------------------------------------------
# LoRA target modules
# ---------------------------------------------------------------------------------------------------------------------


def _check_lora_names(values: Mapping[str, Any]) -> None:
    targets = values.get("lora_target_modules")
    if not values.get("use_peft") or not targets:
        return
    listed = [targets] if isinstance(targets, str) else list(targets)
    if "lm_head" in listed:
        raise RunArgumentError(
            "lora_target_modules contains 'lm_head': TRL refuses a LoRA adapter on lm_head (after the model loads). "
            "Fix: remove it from lora_target_modules and train a full copy with lora_modules_to_save: [lm_head]."
        )


def _config_text(values: Mapping[str, Any]) -> str | None:
    """The model's config as JSON text, read without transformers: the embedded model's shape, a local directory's
    ``config.json``, or the Hugging Face cache's copy (None when none is available offline)."""
    import json

    from . import tiny

    name = values.get("model_name_or_path")
    if not name:
        return None
    if name == tiny.TINY_MODEL_ID:
        return json.dumps({"model_type": "qwen2", "vocab_size": len(tiny.ALPHABET) + len(tiny.SPECIAL_TOKENS),
                           **tiny.TINY_CONFIG}, sort_keys=True)
    local = Path(str(name)).expanduser() / "config.json"
    if local.is_file():
        return local.read_text(encoding="utf-8")
    if tiny.is_embedded(name) or values.get("trust_remote_code"):
        return None
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(str(name), "config.json", revision=values.get("model_revision") or None)
    except Exception:  # a malformed repository id: `check_model_path` reports it
        return None
    return Path(cached).read_text(encoding="utf-8") if isinstance(cached, str) else None


def model_modules(values: Mapping[str, Any]) -> dict[str, str] | None:
    """``{module name: module class name}`` of the model, without reading a weight.

    Built once per config from the config on the meta device (``accelerate.init_empty_weights`` +
    ``AutoModelForCausalLM.from_config``), then cached as JSON under ``tiny.cache_dir() / "module-names"``, keyed by
    the SHA-256 of the config text, so later calls (``plan``) import neither torch nor transformers.

    Returns:
        the mapping, or None when the model's config cannot be read offline (`check_model_path` reports that).
    """
    import hashlib
    import json
    import os
    import tempfile

    from . import tiny

    text = _config_text(values)
    if text is None:
        return None
    path = tiny.cache_dir() / "module-names" / f"{hashlib.sha256(text.encode()).hexdigest()}.json"
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM

    data = json.loads(text)
    model_type = data.pop("model_type", None)
    try:
        config = AutoConfig.for_model(model_type, **data)
        with init_empty_weights():
            model = AutoModelForCausalLM.from_config(config)
    except (ValueError, KeyError, TypeError, OSError):
        return None  # an architecture transformers cannot build without remote code: PEFT will judge
    modules = {name: type(module).__name__ for name, module in model.named_modules() if name}
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as fh:
        json.dump(modules, fh)
    os.replace(fh.name, path)
    return modules


def peft_target_matches(target: str | set[str], name: str) -> bool:
    """PEFT's rule (`peft.tuners.tuners_utils.check_target_module_exists`, PEFT 0.18): a string is a regular
    expression over the full module name (`re.fullmatch`); a set matches a name equal to an item or ending in
    ``.item``. Restated here so `plan` needs no torch; tests/test_validation.py compares it with PEFT's function."""
    if isinstance(target, str):
        return re.fullmatch(target, name) is not None
    return name in target or any(name.endswith(f".{t}") for t in target)


#: Module types PEFT's LoRA can wrap (peft.tuners.lora.model: Linear, Embedding, Conv1d/2d/3d, transformers'
#: Conv1D, MultiheadAttention); quantized Linear4bit/Linear8bitLt replace nn.Linear at load time.
_LORA_LAYER_TYPES = ("Linear", "Embedding", "Conv1d", "Conv2d", "Conv3d", "Conv1D", "MultiheadAttention")


def check_lora_targets(values: Any) -> None:
    """Check ``lora_target_modules`` and ``lora_modules_to_save`` against the model's module names.

    The module names come from :func:`model_modules` (the model built from its config on the meta device: no weights
    are read), for the embedded tiny model or any config readable offline (a local directory, the Hugging Face
    cache). Matching is PEFT's (:func:`peft_target_matches`). TRL's `ModelConfig` turns a one-item list into a string,
    so ``[q_proj]`` is the regular expression ``q_proj``, which matches no full module name.

    Args:
        values: a mapping or `trl.ModelConfig` with ``model_name_or_path``, ``lora_target_modules``,
            ``lora_modules_to_save`` (and optionally ``model_revision``, ``trust_remote_code``).

    Raises:
        RunArgumentError: a target that matches no module, or only modules LoRA cannot wrap (naming the closest
            module names), or a ``lora_modules_to_save`` entry that matches nothing.
    """
    values = values if isinstance(values, Mapping) else _flatten(values)
    targets = values.get("lora_target_modules")
    to_save = values.get("lora_modules_to_save") or []
    if not targets and not to_save:
        return
    if isinstance(targets, (list, tuple)) and len(targets) == 1:
        targets = targets[0]  # as trl.ModelConfig.__post_init__ does (the plan passes the YAML list)
    modules = model_modules(values)
    if modules is None:
        return
    model = values.get("model_name_or_path")
    leaf_names = sorted({name.rsplit(".", 1)[-1] for name in modules})
    if isinstance(targets, str) and targets != "all-linear":
        groups = [(targets, targets)]
    elif targets and targets != "all-linear":
        groups = [(t, {t}) for t in targets]
    else:
        groups = []
    for label, target in groups:
        matched = [n for n in modules if peft_target_matches(target, n)]
        if not matched:
            import difflib

            close = difflib.get_close_matches(str(label).split(".")[-1], leaf_names, n=3)
            extra = (" TRL passes a one-item list as a string, which PEFT reads as a regular expression over full "
                     f"module names (e.g. {next(iter(modules))!r}); write '.*{label}' or list two modules."
                     if isinstance(target, str) and re.fullmatch(r"\w+", label) else "")
            raise RunArgumentError(
                f"lora_target_modules: {label!r} matches no module of {model}.{extra} Fix: use module names of the "
                "model" + (f", e.g. {', '.join(close)}" if close else f" (e.g. {', '.join(leaf_names[:8])})") + "."
            )
        if not any(modules[n] in _LORA_LAYER_TYPES for n in matched):
            raise RunArgumentError(
                f"lora_target_modules: {label!r} matches only {sorted({modules[n] for n in matched})} modules, which "
                "LoRA cannot wrap. Fix: target linear layers (e.g. q_proj, v_proj) or use 'all-linear'."
            )
    for entry in to_save:
        if not any(re.match(rf"(^|.*\.){re.escape(entry)}($|\..*)", n) for n in modules):
            raise RunArgumentError(
                f"lora_modules_to_save: {entry!r} matches no module of {model}. Fix: use module names of the model "
                "(e.g. lm_head, embed_tokens)."
            )
