"""Checks of the selected rewards: parameters against the run, the packages and dataset columns each one needs."""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

from ..config.checks import RunArgumentError, format_number
from .packages import installed
from .tables import typed_value


def reward_specs(values: Mapping[str, Any]) -> list:
    """The run's `RewardSpec` list ([] without ``rewards``), resolved as `GRPOExtConfig` resolves them, with the run's
    ``max_completion_length`` filled in. Raises RunArgumentError: an unknown reward, parameter or weight."""
    from ..rewards.spec import parse_reward_specs, with_run_defaults

    rewards, weights = values.get("rewards"), values.get("reward_weights")
    if rewards is None:
        return []
    try:
        specs = parse_reward_specs(rewards, weights)
    except ValueError as err:
        raise RunArgumentError(str(err)) from None
    max_len = typed_value(values.get("max_completion_length"))
    return with_run_defaults(specs, max_len) if isinstance(max_len, int) else specs


def _reward_object(spec, import_paths: bool = False) -> Any | None:
    """The callable of a registered reward; of an import path only with ``import_paths`` (its module may import torch)."""
    from ..rewards.registry import get_reward, is_import_path

    if is_import_path(spec.name) and not import_paths:
        return None
    try:
        return get_reward(spec.name, **spec.kwargs)
    except (TypeError, ValueError) as err:
        message = str(err) if spec.name in str(err) else f"{spec.name}: {err}"
        raise RunArgumentError(f"rewards: {message}") from None


def check_reward_packages(specs: Sequence) -> None:
    """Each reward's ``required_packages`` ((import name, pip requirement), ...) must be importable (RunArgumentError
    naming the reward, the package and ``pip install <requirement>``)."""
    for spec in specs:
        reward = _reward_object(spec)
        for module, requirement in getattr(reward, "required_packages", ()) or ():
            if not installed(module):
                raise RunArgumentError(
                    f"rewards: {spec.name!r} needs the Python package {requirement!r} (module {module!r}), which is "
                    f"not installed. Fix: pip install {requirement}, or remove {spec.name!r} from rewards.")


def known_columns(values: Mapping[str, Any]) -> list[str] | None:
    """The training dataset's columns when known without loading it (the embedded tasks, GSM8K-format data, a local
    JSON-lines or CSV folder), else None. Raises RunArgumentError: an ``embedded_target`` count-char cannot use."""
    from ..models.embedded import tiny

    name = values.get("dataset_name")
    if isinstance(name, str) and name == tiny.TINY_DATASET_ID:
        try:
            return list(tiny.count_char_rows(1, target=values.get("embedded_target") or "a")[0])
        except ValueError as err:
            raise RunArgumentError(f"embedded_target: {err} Fix: embedded_target: a") from None
    if values.get("dataset_format") == "gsm8k" or name == "embedded:arithmetic":
        return ["prompt", "answer"]  # data.gsm8k_to_prompt's row (the arithmetic task is mapped the same way)
    from ..data.local_columns import local_columns

    columns = local_columns(name, values.get("dataset_train_split"))  # a local JSON-lines or CSV folder
    if columns is not None and (values.get("dataset_prompt_column") or "prompt") != "prompt":
        columns.append("prompt")  # data.apply_prompt_settings writes it
    return columns


def check_reward_columns(columns: Sequence[str], specs: Sequence, split: str = "training", start: int = 0) -> None:
    """Every dataset column a reward of ``specs`` reads must be in ``columns``: its ``required_columns`` and each
    argument only a column can fill (`rewards.parameters.column_arguments`; import paths are imported). ``split``
    (training or evaluation) is for the message; ``start``: the index in ``rewards`` of the first spec.

    Raises:
        RunArgumentError: naming the reward, the column or argument, the dataset's columns and the fix."""
    from ..rewards.parameters import TRAINER_KWARGS, TRL_DROPPED_COLUMNS, column_arguments

    present = set(columns)
    for i, spec in enumerate(specs, start):
        reward = _reward_object(spec, import_paths=True)
        for alternatives in getattr(reward, "required_columns", ()) or ():
            if not present.intersection(alternatives):
                wanted = " or ".join(map(repr, alternatives))
                if "column" in inspect.signature(type(reward)).parameters:
                    fix = (f"add the column to the dataset, or choose one with the reward's column parameter "
                           f"({{name: {spec.name}, kwargs: {{column: <name>}}}})")
                else:  # TRL's rewards read their fixed column
                    fix = f"add the column {alternatives[0]!r} to the dataset (or rename yours; {spec.name} has no column parameter)"
                    if getattr(reward, "_math_gold", False):
                        fix += ", or use {name: accuracy, kwargs: {column: <name>}}, which scores it with math-verify too"
                raise RunArgumentError(f"rewards[{i}] {spec.name!r} reads the dataset column {wanted}, but the {split} "
                                       f"dataset has the columns {sorted(present)}. Fix: {fix}.")
        passed = present - TRL_DROPPED_COLUMNS
        for argument in column_arguments(reward) if reward is not None else ():
            if argument in passed:
                continue
            why = (f"TRL never passes a column named {argument!r} (it passes prompts, completions and "
                   "completion_ids instead)" if argument in TRL_DROPPED_COLUMNS
                   else f"the {split} dataset has the columns {sorted(present)}")
            raise RunArgumentError(
                f"rewards[{i}] {spec.name!r} takes the argument {argument!r}, which TRL fills only from the dataset "
                f"column of that name (besides the trainer's {', '.join(sorted(TRAINER_KWARGS - {'environments'}))})"
                f", but {why}. The run would fail at its first reward call. Fix: add a column {argument!r} to the "
                f"{split} dataset, rename the argument to a column it has, or give it a default "
                f"({argument}=None) and accept **kwargs.")


def check_rewards_set(values: Mapping[str, Any]) -> None:
    """``rewards`` (or TRL's ``reward_funcs``, read as it) must select at least one reward: the recipe has no other.
    Raises RunArgumentError: unset, null or empty (an unparsable list is the `reward_specs` rule's)."""
    try:
        if reward_specs(values):
            return
    except ValueError:
        return
    raise RunArgumentError(f"rewards={values.get('rewards')!r} selects no reward, so no completion could be scored. "
                           "Fix: list at least one reward, e.g. `rewards: [accuracy]` (`trl-grpo-ext rewards` lists "
                           "them).")


def check_some_weight(specs: Sequence) -> None:
    """At least one reward needs a non-zero weight: with every weight 0 each advantage is 0 and no step updates."""
    if specs and all(spec.weight == 0 for spec in specs):
        weights = ", ".join(f"rewards[{i}] {spec.name!r} weight {format_number(spec.weight)}"
                            for i, spec in enumerate(specs))
        raise RunArgumentError(
            f"every reward has weight 0 ({weights}): the weighted reward is 0 for every completion, so every "
            "advantage is 0 and no step would update the model. Fix: give at least one reward a non-zero weight "
            "(e.g. `weight: 1.0`); a weight-0 reward is only logged.")
