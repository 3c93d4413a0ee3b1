"""`validate_run_args`: every check of a run's arguments, in order, and the run-level combinations."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..checks import RunArgumentError, as_number, check_choice, choice_from_yaml
from ..engines import Engine, resolve_engine
from ..loss_settings import CLIP_DEFAULTS
from .engines import check_engine_settings
from .lora import check_lora_names, check_lora_targets
from .packages import check_run_packages
from .problems import Problems
from .rewards import (
    check_reward_columns,
    check_reward_packages,
    check_rewards_against_run,
    known_columns,
    reward_specs,
)
from .tables import (
    _TABLE_DEFAULTS,
    CHOICES,
    GOVERNED_BY,
    NORMALIZE_THEN_SUM_IGNORES,
    ORDERED,
    RANGES,
    REQUIRES,
    enum_value,
    flatten_values,
)
from .user_values import check_user_values, quantity_keys, resolve_user_quantities


def validate_run_args(script_args: Any, training_args: Any, model_args: Any, push_args: Any, *,
                      user_values: Mapping[str, Any] | None = None, world_size: int = 1,
                      dataset_columns: Sequence[str] | None = None, check_model: bool = True,
                      problems: Problems | None = None, engine: Engine | None = None) -> None:
    """Refuse every bad combination of a run's arguments before any weight loads, all problems at once.

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
        engine (`engines.Engine`, *optional*): the engine of an accelerate config (``plan --accelerate-config``);
            the run's ``deepspeed`` / ``fsdp`` fields and the launch environment come first (`engines.resolve_engine`).
        problems (`Problems`, *optional*): record each problem there and return (the front door's collector);
            without it, raise.

    Every check runs; a check that reads a field already refused is skipped (it would restate that problem, see
    `validation.problems`).

    Raises:
        RunArgumentError: without ``problems``: one line per problem, each naming the field(s), the value(s) and a
            fix (a single problem as the error its check raised).
    """
    own = problems is None
    problems = Problems() if own else problems
    user = dict(user_values or {})
    check_user_values(user, world_size, problems)
    values = flatten_values(script_args, training_args, model_args, push_args)
    values.update({k: v for k, v in user.items() if k not in values})  # keys only the user values hold (plan)
    for name, rng in RANGES.items():
        if user.get(name, 0) is None and _TABLE_DEFAULTS.get(name) is not None:  # YAML's null for a number
            problems.add(f"{name}=None is not valid: the field needs a value. Fix: remove {name} (default "
                         f"{_TABLE_DEFAULTS[name]!r}) or give a value.", (name,))
            continue
        if name in values and not isinstance(values[name], (list, tuple, dict)):
            problems.check(rng.check, name, values[name], fields=[name])
    for name, choices in CHOICES.items():
        value = choice_from_yaml(enum_value(values.get(name)), choices)  # YAML's `off` (False) is "off"
        if name in values and value is not None:
            checked = problems.check(check_choice, name, value, choices, fields=[name])
            if checked is not None:
                values[name] = checked
                if isinstance(user.get(name), bool):
                    user[name] = checked
    _check_ignored(values, user, getattr(user_values, "command_line_keys", frozenset()), problems)
    for low, high in ORDERED:
        lo, hi = as_number(values.get(low)), as_number(values.get(high))
        if lo is not None and hi is not None and lo > hi and not problems.blocked((low, high)):
            problems.add(f"{low}={values[low]!r} is above {high}={values[high]!r}. Fix: make {low} <= {high}.",
                         (low, high))
    problems.check(_check_evaluation, values, user, fields=_EVALUATION_FIELDS)
    problems.check(_check_aggregation, values, user, fields=("multi_objective_aggregation", "zero_variance_filter",
                                                             *NORMALIZE_THEN_SUM_IGNORES))
    quantities = quantity_keys(user)
    clip = [name for name in CLIP_DEFAULTS if user.get(name) is not None]
    problems.check(_check_clipping, values, user, world_size, fields=(*clip, "num_iterations"),
                   blocked_by=(*clip, *quantities, "loss_type"))
    specs = problems.check(reward_specs, values, fields=("rewards", "reward_weights"))
    if specs is not None:
        problems.check(_check_zero_variance, values, user, specs, world_size,
                       fields=("zero_variance_filter", "zero_variance_reward"),
                       blocked_by=("zero_variance_filter", "zero_variance_reward", "multi_objective_aggregation",
                                   *quantities))
        # the reward checks are independent of one another (a line found twice is kept once)
        problems.check(check_rewards_against_run, specs, values, blocked_by=("max_completion_length",))
        problems.check(check_reward_packages, specs)
        columns = problems.check(_columns, values, dataset_columns, fields=("embedded_target",),
                                 blocked_by=("embedded_target", "dataset_name", "dataset_format"))
        if columns is not None:
            problems.check(check_reward_columns, columns, specs)
    check_run_packages(values, problems)  # flash-attn, vLLM, Liger, the trackers: before the model, not after
    problems.check(_check_engine, values, engine)
    lora = ("lora_target_modules", "lora_modules_to_save")
    problems.check(check_lora_names, values, fields=lora, blocked_by=(*lora, "use_peft"))
    if check_model and values.get("use_peft"):
        problems.check(check_lora_targets, values, fields=lora,
                       blocked_by=(*lora, "use_peft", "model_name_or_path", "model_revision"))
    if own:
        problems.raise_if_any(RunArgumentError)


_EVALUATION_FIELDS = ("eval_strategy", "do_eval", "final_eval", "dataset_test_split")


def _columns(values: Mapping[str, Any], dataset_columns: Sequence[str] | None) -> list[str] | None:
    return list(dataset_columns) if dataset_columns is not None else known_columns(values)


def _check_ignored(values: Mapping[str, Any], user: Mapping[str, Any], cli_keys: frozenset,
                   problems: Problems) -> None:
    """`REQUIRES`: fields the user set that only take effect under a setting that is off, one line per setting
    (fields whose own value, or whose setting, was already refused are left out: the first problem says it)."""
    ignored: dict[str, list[str]] = {}  # setting -> fields the user set that need it
    for name in user:
        if name in REQUIRES and user[name] is not None and not REQUIRES[name][1](values):
            if name not in cli_keys and cli_keys.intersection(GOVERNED_BY[name]):
                continue  # switched off on the command line over a YAML that configures it
            if problems.blocked((name, *GOVERNED_BY[name])):
                continue
            ignored.setdefault(REQUIRES[name][0], []).append(name)
    for setting, names in ignored.items():
        fix = REQUIRES[names[0]][2].format(field=" and ".join(names))
        given = ", ".join(f"{n}={user[n]!r}" for n in names)
        problems.add(f"{given} only take{'s' if len(names) == 1 else ''} effect with {setting}, so "
                     f"{'it' if len(names) == 1 else 'they'} would be ignored. Fix: {fix}",
                     (*names, *GOVERNED_BY[names[0]]))


def _resolved_loss_type(values: Mapping[str, Any]) -> str:
    """TRL's ``loss_type`` as the run resolves it: an ``advantage_preset``'s (it sets one), else the field's."""
    from ..advantage_settings import PRESETS

    preset = PRESETS.get(enum_value(values.get("advantage_preset")) or "", {})
    return preset.get("loss_type") or enum_value(values.get("loss_type")) or "dapo"


def _check_engine(values: Mapping[str, Any], engine: Engine | None) -> None:
    """`validation.engines.check_engine_settings` on the engine the run will use (`engines.resolve_engine`)."""
    check_engine_settings(resolve_engine(values, accelerate_config=engine), values)


def _check_zero_variance(values: Mapping[str, Any], user: Mapping[str, Any], specs: Sequence,
                         world_size: int) -> None:
    """The zero-variance filter's own checks (`zero_variance.settings.check_zero_variance_settings`, which
    `GRPOExtConfig` runs too), on the batch fields the quantities the user set resolve to: so that `plan` refuses
    what the run refuses (``zero_variance_reward`` with the filter off or naming no selected reward, resample without
    whole groups on every process). Resolved from the user's keys, never from a config's fields that TRL already
    derived (``generation_batch_size`` and ``steps_per_generation`` both filled in)."""
    from ..zero_variance.settings import check_zero_variance_settings

    mode = enum_value(values.get("zero_variance_filter")) or "off"
    if mode == "off" and values.get("zero_variance_reward") is None:
        return
    fields = resolve_user_quantities(user, world_size)
    try:
        check_zero_variance_settings(
            mode=mode, zero_variance_reward=values.get("zero_variance_reward"),
            reward_names=[spec.name for spec in specs] if specs else None,
            multi_objective_aggregation=values.get("multi_objective_aggregation") or "sum_then_normalize",
            loss_type=_resolved_loss_type(values), entropy_coef=as_number(values.get("entropy_coef")) or 0.0,
            use_adaptive_entropy=bool(values.get("use_adaptive_entropy")),
            num_generations=fields["num_generations"], world_size=world_size,
            generation_batch_size=fields.get("generation_batch_size"),
            steps_per_generation=fields.get("steps_per_generation"),
            gradient_accumulation_steps=fields["gradient_accumulation_steps"],
            per_device_train_batch_size=fields["per_device_train_batch_size"],
        )
    except RunArgumentError:
        raise
    except ValueError as err:
        raise RunArgumentError(str(err)) from None


def _check_clipping(values: Mapping[str, Any], user: Mapping[str, Any], world_size: int) -> None:
    """Clip settings the user set that never act: every update on-policy (`loss_settings.ignored_clipping`), judged on
    the batch fields the user's quantities resolve to."""
    from ..loss_settings import CLIP_DEFAULTS, ignored_clipping

    settings = {name: as_number(user.get(name)) for name in CLIP_DEFAULTS if user.get(name) is not None}
    if not settings:
        return
    fields = resolve_user_quantities(user, world_size)
    ga, mu = fields["gradient_accumulation_steps"], fields["num_iterations"]
    spg = fields.get("steps_per_generation")
    if spg is None and fields.get("generation_batch_size"):
        spg = fields["generation_batch_size"] // (fields["per_device_train_batch_size"] * world_size)
    message = ignored_clipping(settings, loss_type=enum_value(values.get("loss_type")) or "dapo",
                               gradient_accumulation_steps=ga, steps_per_generation=spg or ga, num_iterations=mu)
    if message:
        raise RunArgumentError(message)


def _check_evaluation(values: Mapping[str, Any], user: Mapping[str, Any]) -> None:
    """Evaluation needs a test split: `dataset_test_split` (TRL's default "test") not set to null or "".

    Whether the named split exists is checked by the recipe's data stage (`data.load_eval_dataset`), which loads it
    before the model; `plan` cannot look into a Hub dataset offline.
    """
    strategy = enum_value(values.get("eval_strategy"))
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
