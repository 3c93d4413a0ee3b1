"""The static tables of `trl_grpo_ext.validation` (ranges and choices of TRL's, PEFT's and transformers' fields,
exclusive pairs, settings that need another) and the helpers that read a run's values. The entries read from the
dataclasses themselves (our fields' declarations, argparse choices, defaults) are added in `validation.user_values`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..config.checks import Range
from .mappings import as_mapping


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
TRL_RANGES: dict[str, Range] = {
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
    # --- vLLM ---
    "vllm_server_port": _PORT,
    "vllm_group_port": _PORT,
    "vllm_server_timeout": _pos("use e.g. 240 seconds.", "TRL vLLM client"),
    "vllm_gpu_memory_utilization": _unit("use e.g. 0.3 (colocate) or 0.9 (server).", "vLLM", low_open=True),
    "vllm_tensor_parallel_size": _int(1, "use 1 or the number of GPUs per vLLM engine.", "vLLM"),
    "vllm_max_model_length": _int(1, "remove it or use prompt + completion tokens.", "vLLM"),
}
#: The recipe's (`RecipeArguments`) and LoRA's (trl.ModelConfig -> peft.LoraConfig), after our declared ones.
OTHER_RANGES: dict[str, Range] = {
    "embedded_num_prompts": _int(1, "use e.g. 240.", "tiny"),
    "embedded_seed": _int(0, "use a whole number >= 0, e.g. 0.", "data.load"),
    "eval_num_prompts": _int(1, "remove it (the whole test split) or use e.g. 64.", "data.load_eval_dataset"),
    "final_eval_num_samples": _int(0, "use 0 (greedy only) or e.g. 8 samples per prompt.", "evaluation"),
    "lora_r": _int(1, "use a rank such as 8 or 16.", "PEFT raises for r <= 0, after the model loads"),
    "lora_alpha": _pos("use e.g. 2 × lora_r (16 for r 8).", "PEFT scales the update by alpha / r"),
    "lora_dropout": _unit("use 0.0 or e.g. 0.05.", "torch.nn.Dropout probability", high_open=True),
}


#: Numeric fields deliberately not range-checked here, with the reason (checked by tests/test_validation.py).
UNCHECKED_NUMERIC: dict[str, str] = {
    "local_rank": "set by the launcher, not by users",
    "reward_weights": "a list; checked by rewards.spec (finite numbers, one per reward)",
    "pad_to_multiple_of": "int, 'auto' or none: trainer_settings.trainer_problems checks it",
    "entropy_coef": "any finite sign is meaningful (a negative value is an entropy penalty)",
    "vllm_importance_sampling_cap": "read as vllm_importance_sampling_clip_max (config.keymap.RENAMED)",
}

#: Allowed values of string fields that would otherwise be accepted and fail after the model loads or at step 1.
TRL_CHOICES: dict[str, tuple[str, ...]] = {
    "loss_type": ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo"),
    "multi_objective_aggregation": ("sum_then_normalize", "normalize_then_sum"),
    "importance_sampling_level": ("token", "sequence"),
    "dataset_format": ("prompt", "gsm8k"),
    "bnb_4bit_quant_type": ("nf4", "fp4"),
    "eval_strategy": ("no", "steps", "epoch"),
    "save_strategy": ("no", "steps", "epoch", "best"),
    "logging_strategy": ("no", "steps", "epoch"),
}

#: Pairs of fields that cannot both be on: (a, b, fix). "On" = true for flags, not None for the others.
EXCLUSIVE: tuple[tuple[str, str, str], ...] = (
    ("load_in_4bit", "load_in_8bit", "choose one quantisation: load_in_4bit (QLoRA, NF4) or load_in_8bit."),
    ("bf16", "fp16", "choose one mixed-precision mode (bf16 on GPUs that support it)."),
    ("use_peft", "sync_ref_model", "remove sync_ref_model: with PEFT the reference is the base with the adapter off, "
     "which TRL cannot sync (it raises after loading the model)."),
    ("hub_repo_id", "hub_model_id", "keep hub_repo_id: the push reads it first and hub_model_id (TRL's name for the "
     "repository) only without it."),
)

#: Fields that only take effect under another setting: field -> (setting, predicate on the run values, fix). A field
#: the user set while the predicate is false has no effect: a warning (`rules.ignored_settings`), unless the run would
#: fail for it (`REFUSED_WHEN_OFF`). A new row is one `_when` / `_requires` call; tests loop over the table.
REQUIRES: dict[str, tuple[str, Any, str]] = {}
#: The `REQUIRES` fields whose setting being off breaks the run (refused before the model loads): field -> why.
REFUSED_WHEN_OFF: dict[str, str] = {
    "merge_adapter_for_generation": "the trainer refuses it without an adapter to merge, after the model loads",
    "eval_on_start": "the trainer would fail evaluating at the start, with no evaluation split loaded",
    "sync_ref_model": "TRL keeps no reference model to sync and refuses it when the trainer is built",
}


def _requires(names: tuple[str, ...], setting: str, test: Any, fix: str) -> None:
    REQUIRES.update(dict.fromkeys(names, (setting, test, fix)))


def _when(key: str, value: Any, names: tuple[str, ...], fix: str = "") -> None:
    """`REQUIRES` rows: ``names`` take effect only with ``key: value`` (``True``: a flag that is on)."""
    text = "true" if value is True else value
    test = (lambda v: bool(v.get(key))) if value is True else (lambda v: enum_value(v.get(key)) == value)
    _requires(names, f"{key}: {text}", test, fix or f"set {key}: {text} or remove {{field}}.")


def _embedded(v) -> bool:
    return str(v.get("dataset_name") or "").startswith("embedded:")


_when("use_peft", True, ("lora_r", "lora_alpha", "lora_dropout", "lora_target_modules", "lora_modules_to_save",
                         "lora_task_type", "use_rslora", "use_dora", "lora_target_parameters",
                         "merge_adapter_for_generation"))
_when("load_in_4bit", True, ("bnb_4bit_quant_type", "use_bnb_nested_quant", "bnb_4bit_quant_storage"))
# (on a base that is not quantized the adapter trains in the base's dtype: the trainer casts only a quantized model's)
_requires(("adapter_dtype",), "load_in_4bit: true (or load_in_8bit: true)",
          lambda v: bool(v.get("load_in_4bit") or v.get("load_in_8bit")),
          "load the base in 4-bit, or remove {field}: the adapter trains in the base's dtype.")
_when("zero_variance_filter", "resample", ("max_resample_rounds",))
_requires(("zero_variance_tolerance",), "zero_variance_filter: mask, resample or skip",
          lambda v: v.get("zero_variance_filter") in ("mask", "resample", "skip"),
          "set zero_variance_filter: mask (or resample, skip) or remove {field}.")
_when("zero_variance_filter", "skip", ("skip_exploration_probability", "skip_history_file"))
_requires(("lost_update_warning_threshold",), "lost_update_steps > 0", lambda v: (v.get("lost_update_steps") or 0) > 0,
          "set lost_update_steps: 10 (say) or remove {field}.")
_requires(("embedded_num_prompts", "embedded_seed"), "an embedded dataset_name", _embedded,
          "use an embedded dataset_name (embedded:count-char, embedded:arithmetic) or remove {field}.")
_requires(("dataset_format",), "a dataset that is not embedded (the embedded tasks map their own rows)",
          lambda v: not _embedded(v), "remove {field}: embedded:arithmetic is always read as GSM8K rows and "
          "embedded:count-char as prompts.")
for _name, _split, _size in (("dataset_train_split", "train", "embedded_num_prompts"),
                              ("dataset_test_split", "test", "eval_num_prompts")):
    _requires((_name,), f"a dataset_name that is not embedded (an embedded task's {_split} split is {_split!r})",
              lambda v, n=_name, s=_split: not _embedded(v) or v.get(n) in (s, None, ""),
              f"write {_name}: {_split} or remove {{field}}: an embedded task reads its {_split!r} split "
              f"({_size} sets its size).")
_requires(("dataset_config", "dataset_prompt_column"),
          "a dataset_name that is not embedded (an embedded task has one configuration and its own prompt column)",
          lambda v: not _embedded(v) or (v.get("dataset_config") is None
                                         and v.get("dataset_prompt_column") in (None, "prompt")),
          "remove {field}: it applies to a Hub or local dataset.")
_when("dataset_name", "embedded:count-char", ("embedded_target",),
      "use dataset_name: embedded:count-char or remove {field}.")
_requires(("eval_num_prompts",), "an evaluation (eval_strategy other than no, or final_eval)",
          lambda v: enum_value(v.get("eval_strategy")) not in (None, "no")
          or v.get("final_eval") not in (None, "none"),
          "set eval_strategy: steps or final_eval: adapter, or remove {field}.")
# TRL's eval loop alone reads it (final_eval generates in batches of its own). transformers' per_device_eval_batch_size
# is left out: open-r1's configs carry it without an evaluation (tests/data/openr1_grpo_config.yaml)
_requires(("num_generations_eval",), "eval_strategy: steps or epoch (TRL's eval loop)",
          lambda v: enum_value(v.get("eval_strategy")) not in (None, "no"),
          "set eval_strategy: steps (with eval_steps) or remove {field}.")
_requires(("final_eval_num_samples",), "final_eval: adapter or compare_base",
          lambda v: v.get("final_eval") not in (None, "none"), "set final_eval: adapter or remove {field}.")
_when("loss_type", "sapo", ("sapo_temperature_neg", "sapo_temperature_pos"))
_when("loss_type", "vespo", ("vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg"))
_when("use_adaptive_entropy", True, ("entropy_coef_min", "entropy_coef_max", "entropy_coef_delta", "entropy_target"))
_when("use_vllm", True, ("vllm_mode", "vllm_model_impl", "vllm_enable_sleep_mode", "vllm_structured_outputs_regex",
                         "vllm_server_base_url", "vllm_server_host", "vllm_server_port", "vllm_server_timeout",
                         "vllm_group_port", "vllm_gpu_memory_utilization", "vllm_max_model_length",
                         "vllm_tensor_parallel_size", "vllm_importance_sampling_correction",
                         "vllm_importance_sampling_mode", "vllm_importance_sampling_clip_min",
                         "vllm_importance_sampling_clip_max"))
_when("eval_strategy", "steps", ("eval_steps",),
      "set eval_strategy: steps (with a dataset_test_split) or remove {field}.")
_requires(("do_eval",), "eval_strategy: steps or epoch (transformers' Trainer evaluates on eval_strategy alone)",
          lambda v: not v.get("do_eval") or enum_value(v.get("eval_strategy")) not in (None, "no"),
          "set eval_strategy: steps (with eval_steps) to evaluate during training, or final_eval: adapter after it, "
          "and remove {field}.")
_when("save_strategy", "steps", ("save_steps",))
_when("log_completions", True, ("num_completions_to_print",))  # TRL prints only then (and refuses a hub repo alone)
# the push after training (hub.push) reads these; TRL's own push at every save is off in the recipe (push.resolve)
# (hub_token is left out: a message would show it; `config.secrets` keeps it out of every file)
_PUSH_FIELDS = ("hub_repo_id", "hub_model_id", "hub_private", "hub_private_repo", "hub_revision", "hub_strategy",
               "hub_always_push")  # the last two, with a push: trainer_settings warns of them
_requires(_PUSH_FIELDS,
          "a push (push_to_hub_mode: adapter or merged, or TRL's push_to_hub: true)",
          lambda v: enum_value(v.get("push_to_hub_mode")) not in (None, "none") or v.get("push_to_hub") is True,
          "set push_to_hub_mode: adapter, or remove {field} (trl-grpo-ext push OUTPUT_DIR --repo-id ID pushes a "
          "finished run).")
_when("push_to_hub_mode", "merged", ("merge_dtype",))
_requires(("fp16",), "a GPU (with use_cpu: true accelerate runs no fp16 autocast: the run stays float32)",
          lambda v: not v.get("fp16") or not v.get("use_cpu"),
          "remove {field} (bf16: true runs bf16 autocast on a CPU: docs/benchmarks.md, \"bf16 on a CPU\").")
_requires(("eval_on_start",), "eval_strategy: steps or epoch (the recipe loads no evaluation split without it)",
          lambda v: not v.get("eval_on_start") or enum_value(v.get("eval_strategy")) not in (None, "no"),
          "set eval_strategy: steps (with eval_steps) or remove {field}.")
_requires(("sync_ref_model",), "beta > 0 (with beta 0 TRL keeps no reference model to sync)",
          lambda v: not v.get("sync_ref_model") or (v.get("beta") or 0) > 0, "remove {field} or set beta: 0.04 (say).")
_when("sync_ref_model", True, ("ref_model_sync_steps", "ref_model_mixup_alpha"))  # TRL's SyncRefModelCallback alone
_requires(("save_total_limit",), "save_strategy: steps, epoch or best (no checkpoint is saved to rotate)",
          lambda v: enum_value(v.get("save_strategy")) != "no",
          "set save_strategy: steps (with save_steps) or remove {field}.")
_when("use_liger_kernel", True, ("liger_kernel_config",))  # transformers reads it only then
_when("use_transformers_continuous_batching", True, ("transformers_continuous_batching_config",))  # TRL: only then
_requires(("gradient_checkpointing_kwargs", "activation_checkpointing_kwargs"),
          "gradient_checkpointing: true (or activation_checkpointing: true)",
          lambda v: bool(v.get("gradient_checkpointing") or v.get("activation_checkpointing")),
          "set gradient_checkpointing: true or remove {field}.")
_requires(("lr_scheduler_kwargs",), "an lr_scheduler_type other than constant and constant_with_warmup (transformers' "
          "get_scheduler passes them no arguments)",
          lambda v: not as_mapping("lr_scheduler_kwargs", v.get("lr_scheduler_kwargs"))  # {} or '{}': nothing
          or enum_value(v.get("lr_scheduler_type")) not in ("constant", "constant_with_warmup"),
          "set lr_scheduler_type: cosine (say) or remove {field}.")
_requires(("warmup_steps",), "an lr_scheduler_type with a warmup (transformers' get_scheduler passes constant, "
          "reduce_lr_on_plateau and greedy none)", lambda v: not v.get("warmup_steps") or enum_value(
              v.get("lr_scheduler_type")) not in ("constant", "reduce_lr_on_plateau", "greedy"),
          "set lr_scheduler_type: constant_with_warmup (or cosine) or remove {field}.")
# TRL's GRPO sampler orders the prompts by seed (RepeatSampler(seed=args.seed)); GRPO has no label to smooth
_requires(("data_seed",), "a sampler that reads it (TRL's GRPO sampler orders the prompts by seed alone)",
          lambda v: v.get("data_seed") is None, "remove {field}; seed sets the order of the prompts.")
# TRL's GRPO trainer always samples with its own RepeatSampler (shuffle_dataset orders it); transformers' samplers and
# the length column they group by are never built
for _name, _default in (("train_sampling_strategy", "random"), ("length_column_name", "length")):
    _requires((_name,), "a sampler that reads it (TRL's GRPO sampler is its own RepeatSampler)",
              lambda v, n=_name, d=_default: enum_value(v.get(n)) in (None, d),
              "remove {field}; shuffle_dataset: false keeps the dataset's order.")
_requires(("label_smoothing_factor",), "a loss with labels (GRPO's has none)",
          lambda v: not v.get("label_smoothing_factor"), "remove {field}.")
# (eval_strategy: steps without eval_steps evaluates every logging_steps, whatever logging_strategy says)
_requires(("logging_steps",), "logging_strategy: steps", lambda v: enum_value(v.get("logging_strategy")) in (None, "steps")
          or (enum_value(v.get("eval_strategy")) == "steps" and v.get("eval_steps") is None),
          "set logging_strategy: steps or remove {field}.")

#: (low field, high field, strict): the first may not exceed the second (with ``strict``: must be below it). TRL's
#: `GRPOConfig.__post_init__` refuses vllm_importance_sampling_clip_min >= clip_max itself.
ORDERED: tuple[tuple[str, str, bool], ...] = (
    ("entropy_coef_min", "entropy_coef_max", False),
)

#: Fields whose value the cross-checks read; their dataclass defaults (`validation.DEFAULTS`) fill in what a caller
#: leaves out when it passes only the keys a YAML sets (`plan`).
DEFAULT_FIELDS: tuple[str, ...] = (
    "use_peft", "use_vllm", "load_in_4bit", "load_in_8bit", "generation_batch_size", "steps_per_generation",
    "zero_variance_filter", "lost_update_steps", "loss_type", "use_adaptive_entropy", "eval_strategy", "do_eval",
    "save_strategy", "dataset_name", "dataset_format", "embedded_target", "final_eval", "dataset_test_split",
    "max_completion_length", "multi_objective_aggregation", "rewards", "reward_weights", "model_name_or_path",
    "model_revision", "trust_remote_code", "lora_target_modules", "lora_modules_to_save", "entropy_coef_min",
    "entropy_coef_max", "vllm_importance_sampling_clip_min", "vllm_importance_sampling_clip_max",
    "gradient_checkpointing", "activation_checkpointing", "use_liger_kernel", "use_transformers_continuous_batching",
    "lr_scheduler_type", "beta", "sync_ref_model", "eval_on_start",
)


def typed_value(value: Any) -> Any:
    """A numeric string as TRL's parser types it ("4" -> 4, "1.5" -> 1.5); anything else unchanged."""
    if isinstance(value, str):
        for cast in (int, float):
            try:
                return cast(value)
            except ValueError:
                pass
    return value


def enum_value(value: Any) -> Any:
    """An enum member's value (TRL's and transformers' strategies are enums); anything else unchanged."""
    return getattr(value, "value", value)


def is_on(value: Any) -> bool:
    """Whether a flag or optional field is set: not ``None``/``False``, and for a command-line string not one of
    ``false``, ``0``, ``no``, ``none``, ``null`` or empty."""
    if isinstance(value, str):
        return value.strip().lower() not in ("false", "0", "no", "none", "null", "")
    return value is not None and value is not False


class _Reads(dict):
    """``values`` that note the keys a `REQUIRES` test asked for and did not find."""

    def __init__(self, values: Mapping[str, Any]):
        super().__init__(values)
        self.missing: set[str] = set()

    def get(self, key, default=None):
        if key not in self:
            self.missing.add(key)
        return super().get(key, default)


def ignored_fields(user: Mapping[str, Any], values: Mapping[str, Any], partial: bool = False):
    """Each field of ``user`` (the keys set) whose `REQUIRES` setting is off in ``values``; with ``partial`` (a config
    built in Python, which lacks the recipe's fields), not those whose setting reads a field ``values`` lacks."""
    for name in user:
        if name in REQUIRES and user[name] is not None:
            reads = _Reads(values)
            if not REQUIRES[name][1](reads) and not (partial and reads.missing):
                yield name
