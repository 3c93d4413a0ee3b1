"""The tables of `validation`: the ranges and choices of TRL's, PEFT's and transformers' fields (ours are declared on
the fields: `user_values`), the `Rule` type and the rows of settings that take effect only under another (`NEEDS`),
and the helpers that read a run's values."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..config.checks import Range, RunArgumentError, as_number, shown

if TYPE_CHECKING:
    from .rules import RunView


def _int(low, fix, high=None):
    return Range(low=low, high=high, integer=True, fix=fix)


def _pos(fix):
    return Range(low=0, low_open=True, fix=fix)


def _nonneg(fix):
    return Range(low=0, fix=fix)


#: Range of the numeric fields of TRL 1.16 (`GRPOConfig`) and transformers 5 (`TrainingArguments`) a user commonly
#: gets wrong, whose bad value raises after the model has loaded, fails at the first step, or trains silently on
#: something meaningless (a negative clip range, a zero learning rate). The other fields' ranges are not checked
#: (docs/configuration.md).
TRL_RANGES: dict[str, Range] = {
    "learning_rate": _pos("QLoRA GRPO typically uses 1e-5 to 1e-4; the embedded default uses 2e-3."),
    "num_train_epochs": _nonneg("use a positive number of passes, or total_epochs."),
    "max_steps": _int(-1, "use -1 (stop by epochs) or a positive number of steps, or total_training_steps."),
    "per_device_train_batch_size": _int(1, "use e.g. 8 completions per device, or micro_batch_size."),
    "gradient_accumulation_steps": _int(1, "use 1 or more micro-batches per step, or prompts_per_step."),
    "generation_batch_size": _int(1, "remove it (TRL derives it) or use a multiple of num_generations."),
    "steps_per_generation": _int(1, "remove it (TRL uses gradient_accumulation_steps) or use 1 or more."),
    "num_generations": _int(2, "GRPO compares completions of one prompt: use 2 or more (8 or more for instruct "
                               "models)."),
    "num_iterations": _int(1, "use 1 (one update per generation batch) or more."),
    "max_completion_length": _int(1, "use the longest reply you want in tokens, e.g. 256."),
    "temperature": _pos("GRPO samples G different completions: use e.g. 1.0 (0.7 for instruct models)."),
    "beta": _nonneg("use 0 (no KL term, TRL's default) or e.g. 0.04."),
    "epsilon": _nonneg("use 0.2 (PPO/GRPO's clip range)."),
}
#: The recipe's (`RecipeArguments`) and LoRA's (trl.ModelConfig -> peft.LoraConfig), after our declared ones.
OTHER_RANGES: dict[str, Range] = {
    "embedded_num_prompts": _int(1, "use e.g. 240."),
    "eval_num_prompts": _int(1, "remove it (the whole test split) or use e.g. 64."),
    "max_prompt_length": _int(1, "use the longest prompt to keep in tokens, e.g. 512, or remove it."),
    "final_eval_num_samples": _int(0, "use 0 (greedy only) or e.g. 8 samples per prompt."),
    "lora_r": _int(1, "use a rank such as 8 or 16."),
    "lora_alpha": _pos("use e.g. 2 × lora_r (16 for r 8)."),
    "lora_dropout": Range(low=0, high=1, high_open=True, fix="use 0.0 or e.g. 0.05."),
}
#: Allowed values of string fields that would otherwise be accepted and fail after the model loads or at step 1.
TRL_CHOICES: dict[str, tuple[str, ...]] = {
    "loss_type": ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo"),
    "multi_objective_aggregation": ("sum_then_normalize", "normalize_then_sum"),
    "importance_sampling_level": ("token", "sequence"),
    "dataset_format": ("prompt", "gsm8k"),
    "eval_strategy": ("no", "steps", "epoch"),  # (an unquoted `no` is YAML's False: read as the word)
    "save_strategy": ("no", "steps", "epoch", "best"),
    "logging_strategy": ("no", "steps", "epoch"),
}


def enum_value(value: Any) -> Any:
    """An enum member's value (TRL's and transformers' strategies are enums); anything else unchanged."""
    return getattr(value, "value", value)


def typed_value(value: Any) -> Any:
    """A numeric string as TRL's parser types it ("4" -> 4, "1.5" -> 1.5); anything else unchanged."""
    if isinstance(value, str):
        for cast in (int, float):
            try:
                return cast(value)
            except ValueError:
                pass
    return value


@dataclass(frozen=True)
class Rule:
    """One rule of `rules.RULES`. A row: ``when`` (the view -> whether the problem is there) and ``message`` (its line;
    ``{field}`` is the run's value as a message shows it); with ``needs`` (the setting
    ``fields`` take effect under; ``when`` says it is off) the fields the user set are named. A longer body: ``check``
    (raises `ValueError` or warns, may return a result). ``severity``: "error" (refused before the model loads) or
    "warning" (no effect). ``blocked_by``: skip it when one of these has a problem (default ``fields``). ``scope``:
    "run" also `GRPOExtConfig.__post_init__` runs it, "args" only plan and the recipe (it reads their fields)."""

    name: str
    fields: Any = ()
    when: Callable[[RunView], Any] | None = None
    message: Any = ""
    severity: str = "error"
    check: Callable[[RunView], Any] | None = None
    blocked_by: Any = None
    scope: str = "run"
    needs: str = ""

    def field_names(self, view: RunView, which: str = "fields") -> tuple[str, ...]:
        value = getattr(self, which)
        return tuple(value(view) if callable(value) else value)

    def __call__(self, v: RunView) -> Any:
        if self.check is not None:
            return self.check(v)
        if not self.when(v):
            return None
        if self.needs:
            names = [n for n, value in v.set_keys.items()  # (a key set to its default changes nothing)
                     if n in self.fields and value is not None and value != v.defaults.get(n, not value)]
            if not names:
                return None
            one = len(names) == 1
            said = (f"{', '.join(f'{n}={shown(enum_value(v.set_keys[n]))}' for n in names)} only take"
                    f"{'s' if one else ''} effect with {self.needs}")
            line = f"{said}{': ' if self.severity == 'error' else '. '}{self.message.format(field=' and '.join(names))}"
        else:
            line = self.message.format_map(v)
        if self.severity == "warning":
            return v.warn(line)
        raise RunArgumentError(line)


def needs(fields: tuple[str, ...], setting: str, on: Callable[[RunView], Any], fix: str = "", *,
          error: str = "", scope: str = "run") -> Rule:
    """A row: ``fields`` take effect only with ``setting`` (``on``: whether it is); a field the user set while it is
    off gets a warning, or with ``error`` (why the run would fail) a refusal; ``fix`` names them as ``{field}``."""
    fix = f"Fix: {fix or f'set {setting} or remove {{field}}.'}"
    return Rule(f"{fields[0]} needs {setting}", fields, lambda v: not on(v), f"{error}. {fix}" if error else fix,
                "error" if error else "warning", scope=scope, needs=setting)


def _when(key: str, value: Any, fields: tuple[str, ...], fix: str = "", scope: str = "run") -> Rule:
    """:func:`needs`: ``fields`` take effect only with ``key: value`` (``True``: a flag that is on)."""
    on = (lambda v: bool(v.get(key))) if value is True else (lambda v: v.get(key) == value)
    return needs(fields, f"{key}: {'true' if value is True else value}", on, fix, scope=scope)


def evaluates(v: RunView) -> bool:
    return v.get("eval_strategy") not in (None, "no")


def both(a: str, b: str, fix: str) -> Rule:
    """A row: flags ``a`` and ``b`` cannot both be on."""
    return Rule(f"{a} and {b}", (a, b), lambda v: v.set_keys.get(a) and v.set_keys.get(b),
                f"{a}={{{a}}} and {b}={{{b}}} cannot both be set. Fix: {fix}", blocked_by=())


def set_of(names):
    return lambda v: tuple(n for n in names if v.is_set(n))


_PEFT = ("lora_r", "lora_alpha", "lora_dropout", "lora_target_modules", "lora_modules_to_save", "lora_task_type",
         "use_rslora", "use_dora", "lora_target_parameters")
_PUSH = "a push (push_to_hub_mode: adapter or merged, or TRL's push_to_hub: true)"

#: The rows of `rules.RULES` for settings that take effect only under another (a warning; a refusal where the run
#: would fail).
NEEDS: tuple[Rule, ...] = (
    _when("use_peft", True, _PEFT, scope="args"),
    needs(("merge_adapter_for_generation",), "use_peft: true", lambda v: v.get("use_peft"), scope="args",
          error="the trainer refuses it without an adapter to merge, after the model loads"),
    _when("load_in_4bit", True, ("bnb_4bit_quant_type", "use_bnb_nested_quant", "bnb_4bit_quant_storage"),
          scope="args"),
    _when("zero_variance_filter", "resample", ("max_resample_rounds",)),
    needs(("zero_variance_tolerance",), "zero_variance_filter: mask, resample or skip",
          lambda v: v.get("zero_variance_filter") in ("mask", "resample", "skip"),
          "set zero_variance_filter: mask (or resample, skip) or remove {field}."),
    _when("zero_variance_filter", "skip", ("skip_exploration_probability", "skip_history_file")),
    needs(("embedded_num_prompts", "embedded_seed"), "an embedded dataset_name",
          lambda v: str(v.get("dataset_name") or "").startswith("embedded:"), scope="args",
          fix="use an embedded dataset_name (embedded:count-char, embedded:arithmetic) or remove {field}."),
    needs(("eval_num_prompts",), "an evaluation (eval_strategy other than no, or final_eval)",
          lambda v: evaluates(v) or v.get("final_eval") not in (None, "none"),
          "set eval_strategy: steps or final_eval: adapter, or remove {field}.", scope="args"),
    # TRL's eval loop alone reads it (final_eval generates in batches of its own); transformers' Trainer evaluates
    # on eval_strategy alone; a config built in Python may call trainer.evaluate() with them
    needs(("num_generations_eval", "do_eval"), "eval_strategy: steps or epoch (TRL's eval loop)", evaluates,
          "set eval_strategy: steps (with eval_steps) or remove {field}.", scope="args"),
    needs(("eval_on_start",), "eval_strategy: steps or epoch (the recipe loads no evaluation split without it)",
          evaluates, "set eval_strategy: steps (with eval_steps) or remove {field}.", scope="args",
          error="the trainer would fail evaluating at the start, with no evaluation split loaded"),
    _when("eval_strategy", "steps", ("eval_steps",), "set eval_strategy: steps (with a dataset_test_split) or remove "
          "{field}."),
    _when("save_strategy", "steps", ("save_steps",)),
    # hub.push reads these after training; TRL's own push at every save is off in the recipe (hub_token is left
    # out: a message would show it)
    needs(("hub_repo_id", "hub_model_id", "hub_private", "hub_private_repo", "hub_revision"), _PUSH,
          lambda v: v.get("push_to_hub_mode") not in (None, "none") or v.get("push_to_hub") is True,
          "set push_to_hub_mode: adapter, or remove {field} (trl-grpo-ext push OUTPUT_DIR --repo-id ID pushes a "
          "finished run).", scope="args"),
    _when("push_to_hub_mode", "merged", ("merge_dtype",), scope="args"),
    needs(("sync_ref_model",), "beta > 0 (with beta 0 TRL keeps no reference model to sync)",
          lambda v: (as_number(v.get("beta")) or 0) > 0, "remove {field} or set beta: 0.04 (say).",
          error="TRL keeps no reference model to sync and refuses it when the trainer is built"),
)
