"""The dataset stage: `plan` and the recipe read the training split (and the test split when the run evaluates) and
list the problems of its rows, and of the plan on them, with the config's (docs/configuration.md; docs/real-data.md)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config.checks import resumes
from ..models.embedded.tiny import EMBEDDED_PREFIX, TINY_DATASET_ID, count_char_rows
from .tables import enum_value
from .user_values import flatten_values

#: The fields each part of the stage reads: a problem already reported for one of them skips that part. (Not
#: ``eval_strategy`` or ``final_eval``: a refused value there still asks for an evaluation, so the split is read; not
#: ``embedded_target``: the rule ``reward_columns`` names it for any missing column.)
_DATASET_FIELDS = ("dataset_name", "dataset_config", "dataset_format", "dataset_prompt_column", "system_prompt",
                   "dataset_streaming", "embedded_seed")
TRAIN_FIELDS = (*_DATASET_FIELDS, "dataset_train_split", "embedded_num_prompts")
EVAL_FIELDS = (*_DATASET_FIELDS, "dataset_test_split", "eval_num_prompts")
REWARD_FIELDS = ("rewards", "reward_weights", "max_completion_length")
#: The fields of :func:`eval_plan_of`: a problem already reported for one skips :func:`check_eval_batches`.
EVAL_PLAN_FIELDS = ("eval_strategy", "final_eval", "eval_num_prompts", "eval_steps", "logging_steps", "num_generations",
                    "num_generations_eval", "per_device_eval_batch_size", "dataset_test_split")
SEED_FIELDS = ("skip_history_file", "zero_variance_filter", "zero_variance_tolerance", "zero_variance_reward",
               "num_generations", *TRAIN_FIELDS)


@dataclass
class DatasetSurvey:
    """What the stage found: ``train_rows`` (trained on, after the ``max_prompt_length`` cut when ``prompts_cut``;
    None: not read), ``eval_rows`` (after ``eval_num_prompts``), ``warnings`` (`data.golds.check_golds`), ``not_run``
    (why the checks did not run), ``notes`` (prompts the cut dropped)."""

    train_rows: int | None = None
    prompts_cut: bool = False
    notes: list[str] = field(default_factory=list)
    eval_rows: int | None = None
    warnings: list[str] = field(default_factory=list)
    not_run: str | None = None


def is_local_dataset(name: Any) -> bool:
    """Whether ``dataset_name`` is embedded or a local path (existing, or written as ``./x``, ``/x``, ``~/x``)."""
    return isinstance(name, str) and (name.startswith(("embedded:", ".", "/", "~")) or Path(name).expanduser().exists())


def offline() -> bool:
    """``HF_HUB_OFFLINE`` or ``HF_DATASETS_OFFLINE`` is set (datasets then reads a Hub dataset from its cache)."""
    return any(os.environ.get(var, "").strip().lower() in ("1", "true", "yes", "on")
               for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


def dataset_check(world_size: int, survey: DatasetSurvey, read_hub: bool = True) -> Callable[[Any], None]:
    """A ``checks=`` entry for `frontdoor.read_run_args`: :func:`check_datasets` filling ``survey`` in place (without
    datasets' progress bars unless ``read_hub``: `plan` reads only what is here)."""
    def check(run) -> None:
        from datasets.utils import logging as datasets_logging

        shown = not read_hub and datasets_logging.is_progress_bar_enabled()
        if shown:
            datasets_logging.disable_progress_bar()
        try:
            check_datasets(run, world_size, survey, read_hub=read_hub)
        finally:
            if shown:
                datasets_logging.enable_progress_bar()

    return check


def check_datasets(run, world_size: int, survey: DatasetSurvey, *, read_hub: bool = True) -> DatasetSurvey:
    """Read the training split (and the test split when the run evaluates) of ``run`` (`RunArgs`), record each
    problem in ``run.problems`` (parts whose fields have one are skipped) and fill in and return ``survey``.
    ``read_hub``: read a Hub dataset (the recipe); `plan` reads one only offline, from the datasets cache."""
    from ..data.load import read_prompt_split
    from .rewards import reward_specs

    script_args, problems = run.script_args, run.problems
    values = flatten_values(*run)
    name = values.get("dataset_name")
    if problems.blocked(TRAIN_FIELDS):
        return survey
    try:  # an embedded_target count-char cannot use: the rule ``reward_columns`` reports it
        if name == TINY_DATASET_ID:
            count_char_rows(1, target=values.get("embedded_target") or "a")
    except (ValueError, TypeError):
        return survey
    if not isinstance(name, str) or not name.strip():
        if read_hub:
            problems.add(f"dataset_name={name!r}: the recipe needs a dataset. Fix: set dataset_name to a Hub id, a "
                         "local folder, or embedded:count-char.", ["dataset_name"])
        else:
            survey.not_run = "dataset checks not run: dataset_name is not set"
        return survey
    if not is_local_dataset(name) and not read_hub and not offline():
        survey.not_run = (f"dataset checks not run: dataset_name={name!r} is a Hub dataset (no local folder of that "
                          f"name exists in {Path.cwd()}) and plan downloads nothing (the recipe checks it once "
                          "downloaded; with HF_HUB_OFFLINE=1 plan checks a copy in the datasets cache)")
        return survey
    try:  # the run's `RewardSpec` list; None when its rewards have a problem (the config rules report it)
        specs = None if problems.blocked(REWARD_FIELDS) else reward_specs(values)
    except ValueError:
        specs = None
    train = read_prompt_split(script_args, split="train")
    if train.rows is None and not read_hub and not is_local_dataset(name):  # offline, not in the cache
        reason = " ".join(str(train.problems[0]).split())
        if "OfflineModeIsEnabled" in reason or "Couldn't reach" in reason:
            reason = (f"dataset_name={name!r} is a Hub dataset that is not in the datasets cache, and HF_HUB_OFFLINE "
                      "is set (the recipe checks it once downloaded)")
        survey.not_run = f"dataset checks not run: {reason}"
        return survey
    for problem in train.problems:
        problems.add(problem)
    survey.train_rows = train.rows
    if train.dataset is not None and not train.problems and "prompt" in train.dataset.column_names:
        from ..data.checks import final_assistant_warning

        survey.warnings += final_assistant_warning(train.dataset, train.where)
    _reward_checks(train, specs, "training", problems, survey)
    cut = values.get("max_prompt_length")
    if cut is not None and train.dataset is not None and not problems.blocked(("max_prompt_length", "model_name_or_path",
                                                                                 "chat_template")):
        kept = problems.check(_within_prompt_length, run, train.dataset, cut, survey, fields=["max_prompt_length"])
        if kept is None and problems.blocked(["max_prompt_length"]):
            return survey  # no prompt fits: nothing to plan on
        if kept is not None:
            train.dataset, train.rows, survey.train_rows, survey.prompts_cut = kept, len(kept), len(kept), True
    if train.rows:
        _size_checks(run, train, world_size, problems, cut is None or survey.prompts_cut)
    if values.get("skip_history_file") is not None and enum_value(values.get("zero_variance_filter")) == "skip" and \
            not resumes(values.get("resume_from_checkpoint")) and train.dataset is not None \
            and not problems.blocked(SEED_FIELDS):  # a resumed run continues its checkpoint's history
        problems.check(_seed_covers_prompts, train.dataset, values, survey, run.config_path, specs,
                       fields=["skip_history_file"])
    evaluating = enum_value(values.get("eval_strategy")) not in (None, "no") or \
        (enum_value(values.get("final_eval")) or "none") != "none"
    if evaluating and not problems.blocked(EVAL_FIELDS):
        test = read_prompt_split(script_args, split="test")
        for problem in test.problems:
            problems.add(problem)
        wanted = values.get("eval_num_prompts")
        if test.dataset is not None and isinstance(wanted, int) and test.rows is not None:
            if wanted > test.rows:
                problems.add(f"eval_num_prompts={wanted} exceeds the {test.rows} prompts of the 'test' split of "
                             f"{name!r}. Fix: set eval_num_prompts: {test.rows} or lower.", ["eval_num_prompts"])
                test.dataset = None
            else:
                test.dataset = test.dataset.select(range(wanted))
        survey.eval_rows = None if test.dataset is None else len(test.dataset)
        _reward_checks(test, specs, "evaluation", problems, survey)
    return survey


def _seed_covers_prompts(dataset, values, survey: DatasetSurvey, config: str | None, specs) -> None:
    """``skip_history_file`` matched to the training prompts as the trainer will (`history.start_history`, which
    refuses it); notes how many it starts uniform."""
    from ..zero_variance.history import run_expectations, start_history
    from ..zero_variance.settings import ZeroVarianceSettings

    expect = run_expectations(specs or (), values["max_completion_length"], values.get("model_name_or_path"),
                              values.get("temperature"))
    _, (evaluated, uniform) = start_history(ZeroVarianceSettings.from_values(values), values["num_generations"],
                                            lambda: [row["prompt"] for row in dataset], config=config, expect=expect)
    survey.notes.append(f"skip_history_file evaluated {evaluated} of the {len(dataset)} training prompts; {uniform} "
                        "of them start uniform (a streak of 1)")


def _reward_checks(found, specs, split: str, problems, survey: DatasetSurvey) -> None:
    """The columns each reward reads, the answer columns empty in every row, the golds a reward cannot score."""
    from ..data.checks import check_reward_values, reward_columns
    from ..data.golds import check_golds
    from .rewards import check_reward_columns

    if found.dataset is None or not specs:
        return
    columns = found.dataset.column_names
    for i, spec in enumerate(specs):
        problems.check(check_reward_columns, columns, [spec], split, start=i)
    for column in reward_columns(specs):
        problems.check(check_reward_values, found.dataset, found.where, [column])
    for spec in specs:
        survey.warnings += problems.check(check_golds, found.dataset, found.where, [spec]) or []


def _within_prompt_length(run, dataset, cut: int, survey: DatasetSurvey):
    """The rows kept under ``max_prompt_length`` with the run's tokenizer (`data.load.prompts_within`), the dropped
    noted in ``survey``; None without the tokenizer here (the recipe counts them). Raises ValueError: none fits."""
    from ..data.load import prompts_within
    from ..models.loading import run_tokenizer

    try:
        tokenizer = run_tokenizer(run.model_args, getattr(run.script_args, "chat_template", None))
    except (OSError, ValueError, ImportError):
        return None
    kept = prompts_within(dataset, tokenizer, cut)
    if len(kept) < len(dataset):
        survey.notes.append(f"max_prompt_length={cut}: dropped {len(dataset) - len(kept)} of {len(dataset)} prompts "
                            f"that are longer (as the run drops them; the plan counts the {len(kept)} left).")
    return kept


def _size_checks(run, found, world_size: int, problems, exact: bool) -> None:
    """A training split smaller than one generation batch (TRL would train 0 steps), and skip's one-epoch refusal on
    its real size when ``exact`` (no uncounted ``max_prompt_length`` cut)."""
    from ..plan.resolve import QuantityError
    from .rules import RunView

    if problems.blocked(RunView({}, run.user_values or {}, world_size).quantity_keys()):
        return
    try:  # any dataset size large enough for a step: what fails here is the config's own problem
        plan_of(run, 10**12, world_size)
    except (ValueError, TypeError):  # reported by the checks of those fields
        return
    try:
        plan_of(run, found.rows, world_size)
    except QuantityError as err:
        problems.add(f"{found.where} has {found.rows} row{'' if found.rows == 1 else 's'}: {err}")
        return
    if exact:
        problems.check(check_skip_epochs, run, found.rows, world_size, fields=["zero_variance_filter"])


def dataset_size_of(script_args: Any, dataset_size: int | None = None) -> int | None:
    """``dataset_size`` if given, else ``embedded_num_prompts`` for an embedded dataset, else None."""
    name = getattr(script_args, "dataset_name", None)
    if dataset_size is None and isinstance(name, str) and name.startswith(EMBEDDED_PREFIX):
        return getattr(script_args, "embedded_num_prompts", None)
    return dataset_size


def plan_of(run: Any, dataset_size: int | None, world_size: int):
    """`plan.resolve_plan` of the quantities the user set in ``run`` (the front door's `RunArgs`). Raises ValueError
    or TypeError: a quantity's own problem, or QuantityError: the plan's."""
    from ..plan import resolve_plan
    from .rules import RunView

    batch = RunView({}, getattr(run, "user_values", None) or {}, world_size).batch
    return resolve_plan(batch, dataset_size, world_size, run.training_args.max_completion_length)


def check_skip_epochs(run: Any, dataset_size: int | None, world_size: int) -> None:
    """`check_skip_plan` on the plan of ``run`` with ``dataset_size`` prompts; nothing when the filter is not
    ``skip``, the size is unknown or the plan does not resolve. Raises ValueError: at most one epoch."""
    from ..zero_variance.settings import check_skip_plan

    training = run.training_args
    if enum_value(getattr(training, "zero_variance_filter", None)) != "skip" or dataset_size is None:
        return
    try:  # the quantities alone (another field's problem, a misspelt reward, does not hide this one)
        plan = plan_of(run, dataset_size, world_size)
    except (ValueError, TypeError):  # reported by the checks of those fields
        return
    check_skip_plan(plan, seeded=getattr(training, "skip_history_file", None) is not None)


def eval_plan_of(run: Any, eval_rows: int | None, world_size: int, total_steps: int = 1, steps_per_epoch: int = 1):
    """`plan.evaluation.resolve_eval_plan` of ``run`` on the ``eval_rows`` the dataset stage read (else
    ``eval_num_prompts``, else the embedded task's test split size); ``total_steps`` and ``steps_per_epoch`` only
    count the evaluations. Raises QuantityError: as `resolve_eval_plan`."""
    from ..config.data_sizes import EMBEDDED_TEST_SIZES
    from ..plan.evaluation import resolve_eval_plan

    script, training = run.script_args, run.training_args
    prompts = eval_rows if eval_rows is not None else script.eval_num_prompts
    return resolve_eval_plan(
        eval_prompts=prompts if prompts is not None else EMBEDDED_TEST_SIZES.get(str(script.dataset_name)),
        eval_strategy=str(enum_value(training.eval_strategy)), eval_steps=training.eval_steps,
        logging_steps=training.logging_steps, num_generations=training.num_generations,
        num_generations_eval=training.num_generations_eval,
        per_device_eval_batch_size=training.per_device_eval_batch_size, world_size=world_size,
        total_steps=total_steps, steps_per_epoch=steps_per_epoch, final_eval=str(enum_value(script.final_eval)),
        split_rows=eval_rows is not None and script.eval_num_prompts is None)


def check_eval_batches(run: Any, eval_rows: int | None, world_size: int) -> None:
    """:func:`eval_plan_of`'s refusals, listed with the other problems; nothing when one of its fields is already
    refused. Raises QuantityError."""
    if run.problems is None or not run.problems.blocked(EVAL_PLAN_FIELDS):
        eval_plan_of(run, eval_rows, world_size)
