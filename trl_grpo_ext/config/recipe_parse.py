"""The recipes' arguments through the front door (every problem before any model loads, one ``error:`` line each,
exit 2) and the run record ``run_config.json``."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import yaml

from ..models.settings import check_fp16_machine, check_model_path
from ..models.source import resolve_model_source
from ..rewards.spec import build_reward_funcs, with_run_defaults
from ..validation.dataset_stage import DatasetSurvey, check_eval_batches, dataset_check
from ..validation.problems import problem_lines
from .checks import world_size_from_env
from .frontdoor import read_run_args
from .recipe_args import RECIPE_DATACLASSES, RecipeArguments  # noqa: F401 (the recipe's argument classes)
from .secrets import scrub_secrets

RUN_CONFIG_FILE = "run_config.json"


class RecipeArgumentError(SystemExit):
    """A recipe's wrong arguments (exit code 2): ``problems``, one line each; ``message`` joins them."""

    def __init__(self, problems: list[str]):
        super().__init__(2)
        self.problems = list(problems)
        self.message = "\n".join(self.problems)

    def __str__(self) -> str:
        return self.message


def _recipe_checks(run) -> None:
    """What the recipe needs besides valid values: a model it can find (a continued adapter's base too) and fp16 on this
    machine (bf16: transformers' ``__post_init__`` refuses it), into ``run.problems`` (skip's epochs: the dataset
    stage's, on the rows read)."""
    model_args, training_args, problems = run.model_args, run.training_args, run.problems
    problems.check(check_model_path, model_args.model_name_or_path, fields=["model_name_or_path"])
    problems.check(_check_continued_base, model_args.model_name_or_path, fields=["model_name_or_path"])
    problems.check(check_fp16_machine, training_args.fp16, training_args.use_cpu, fields=["fp16"])


def _check_continued_base(model_name_or_path: str) -> None:
    """Raises ValueError: as `resolve_model_source`, `check_model_path`."""
    source = resolve_model_source(model_name_or_path)
    if source.continued:
        check_model_path(source.base)


def parse_recipe_args(argv: list[str] | None = None, *, datasets: bool = True):
    """``--config NAME_OR_PATH`` plus overrides through the front door (`frontdoor.read_run_args`), and the checks
    that need the real classes; with ``datasets`` (default) the dataset's rows too (`validation.dataset_stage`;
    ``trl-grpo-ext eval`` passes False). Returns the `RunArgs` (unpacks as the four dataclasses).

    Raises:
        RecipeArgumentError: the problems, printed to stderr; nothing has been loaded."""
    try:
        survey, world = DatasetSurvey(), world_size_from_env(strict=False)  # a bad value: the front door's refusal
        checks = (_recipe_checks, dataset_check(world, survey)) if datasets else (_recipe_checks,)
        checks += (lambda run: check_eval_batches(run, survey.eval_rows, world),)  # on the rows read
        run = read_run_args(argv, checks=checks)
        # unknown reward parameters fail here, not when the trainer builds the rewards after loading the model
        build_reward_funcs(with_run_defaults(list(run.training_args.resolved.rewards),
                                             run.training_args.max_completion_length))
    except (ValueError, OSError, yaml.YAMLError) as err:
        for problem in problem_lines(err):
            print(f"error: {problem}", file=sys.stderr)
        raise RecipeArgumentError(problem_lines(err)) from err
    run.warnings += survey.warnings  # and the dataset's (golds a reward cannot score): the recipe checks no row again
    for line in run.warnings:  # settings without effect (`--use_peft false` over a YAML with lora_r): listed once
        print(f"warning: {line}", file=sys.stderr)
    return run


def write_run_config(output_dir: str, script_args, training_args, model_args, push_args, model_source=None) -> Path:
    """Write ``run_config.json`` (every argument, secrets redacted; ``training_args`` as `GRPOExtConfig.to_dict()`)
    and, under ``"model_source"``, ``model_source`` (`models.source.ModelSource`: the base and adapter continued from;
    the recipe resolves it before loading), when given. Returns its path."""
    record = scrub_secrets(
        {
            "script_args": vars(script_args),
            "model_args": vars(model_args),
            "training_args": training_args.to_dict(),
            "push_args": vars(push_args),
            **({"model_source": model_source.to_dict()} if model_source is not None else {}),
        },
        token=getattr(training_args, "hub_token", None),
    )
    path = Path(output_dir) / RUN_CONFIG_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2, default=str))
    return path


def set_offline_defaults() -> None:
    """Telemetry off for the embedded default and the tests."""
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
