"""``trl-grpo-ext train``: run the QLoRA GRPO recipe (``recipes/grpo_qlora.py``) on a config, installed or cloned.

    trl-grpo-ext train --config tiny_cpu [--any_config_key value ...]             # in this process
    trl-grpo-ext train --config tiny_cpu --accelerate_config cpu                # under `accelerate launch`
    accelerate launch --config_file CFG -m trl_grpo_ext.cli.train --config tiny_cpu  # the same, by hand

The recipe is the readable script ``recipes/grpo_qlora.py``; an installed wheel carries it, the shipped configs and
the accelerate configs as package data (`frontdoor.recipes_dir`), so ``--config`` and ``--accelerate_config`` take a
path or a shipped name. The exit status is the recipe's: 0 on success, 2 for a refused config (every problem, one
``error:`` line each), 1 for a failed push. Under accelerate, the config is first checked in this process as `plan`
checks it (:func:`check_before_launch`): accelerate turns any failure of its child into status 1, so a refused config
is answered here, with 2, before accelerate starts (its dataset too: `validation.dataset_stage`). ``--quiet`` is passed so that a failure inside the recipe (what
only it checks, or a failed push) ends with the recipe's error lines rather than accelerate's ``CalledProcessError``
traceback (accelerate offers that for single-process and DeepSpeed launches only; a multi-process launch still prints
torch's error summary), with status 1.
"""

from __future__ import annotations

import argparse
import os
import runpy
import subprocess
import sys

from ..config.frontdoor import ConfigError, recipes_dir, resolve_config
from . import Once

#: ``run(args)`` receives the arguments ``train`` does not declare (config overrides) as ``args.overrides``.
ACCEPTS_OVERRIDES = True
RECIPE = "grpo_qlora.py"


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Declare ``train`` on ``subparsers`` (from ``ArgumentParser.add_subparsers``)."""
    parser = subparsers.add_parser(
        "train", help="train with the QLoRA GRPO recipe on a config (a YAML path or a shipped name)",
        description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, action=Once,
                        help="a run config: YAML path or shipped name (tiny_cpu, ...); any --key value overrides it")
    parser.add_argument("--accelerate_config", "--accelerate-config", default=None,
                        help="run under `accelerate launch` with this config (a path or cpu, single_gpu, ...)")
    return parser


def recipe_path():
    """Path of the recipe script (package data in a wheel, ``recipes/`` in a checkout)."""
    return recipes_dir() / RECIPE


def run_recipe(argv: list[str]) -> int:
    """Run the recipe in this process with ``argv`` as its arguments; returns its exit status."""
    script = str(recipe_path())
    saved = sys.argv
    sys.argv = [script, *argv]
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as done:
        code = done.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    finally:
        sys.argv = saved
    return 0


def _uses_cpu(config_file) -> bool:
    from ..config.frontdoor import load_yaml

    return bool(load_yaml(config_file, "--accelerate_config").get("use_cpu")) and hasattr(os, "sched_getaffinity")


def check_before_launch(argv: list[str], config_file) -> list[str]:
    """The problems of the run's config (``argv``: ``--config`` and overrides) as `plan` finds them, with the
    accelerate config's ``num_processes`` as the world size; ``[]`` when there are none.

    accelerate's launcher ends with status 1 whenever its child fails (``simple_launcher``: ``sys.exit(1)`` or a
    ``CalledProcessError``; torch's elastic agent: ``ChildFailedError``), so a config refused inside the launched
    recipe cannot end with the recipe's 2. Checked here first, in this process (torch-free), a refused config ends
    with every problem and status 2 without starting accelerate. What only the recipe checks (the model path, bf16
    on the machine) is still refused by the recipe, then with accelerate's 1.
    """
    from ..config.engines import engine_from_accelerate_config
    from ..config.frontdoor import load_yaml, read_run_args
    from ..validation.problems import problem_lines

    try:
        engine = engine_from_accelerate_config(load_yaml(config_file, "--accelerate_config"),
                                               source=f"--accelerate_config {config_file}")
        world = engine.num_processes if engine.num_processes and engine.num_processes > 0 else 1
        from ..validation.dataset_stage import DatasetSurvey, dataset_check

        def engine_device(run):  # FSDP only: torch is imported to look for a GPU
            if engine.kind == "fsdp":
                from ..models.settings import gpu_available
                from ..validation.engines import check_engine_device

                check_engine_device(engine, gpu_available())

        read_run_args(argv, light=True, announce=False, world_size=world, engine=engine,
                      checks=(dataset_check(world, DatasetSurvey()), engine_device))  # skip's epochs: on the rows read
    except (ValueError, OSError) as err:  # ConfigError, RunArgumentError, QuantityError are ValueErrors
        return problem_lines(err)
    return []


def run(args: argparse.Namespace) -> int:
    """Execute ``train``: in this process, or under ``accelerate launch`` with ``args.accelerate_config``."""
    argv = ["--config", args.config, *getattr(args, "overrides", [])]
    if args.accelerate_config is None:
        return run_recipe(argv)
    try:
        config_file = resolve_config(args.accelerate_config, kind="accelerate_configs")
    except ConfigError as err:
        print(f"trl-grpo-ext train: error: {err}", file=sys.stderr)
        return 2
    problems = check_before_launch(argv, config_file)
    if problems:
        for problem in problems:
            print(f"error: {problem}", file=sys.stderr)
        return 2
    command = [sys.executable, "-m", "accelerate.commands.launch", "--quiet", "--config_file", str(config_file)]
    if _uses_cpu(config_file):  # accelerate's own choice, given explicitly so that it prints no notice about it
        command += ["--num_cpu_threads_per_process", str(len(os.sched_getaffinity(0)))]
    command += ["-m", "trl_grpo_ext.cli.train", *argv]
    return subprocess.run(command, check=False).returncode


def main(argv: list[str] | None = None) -> int:
    """``python -m trl_grpo_ext.cli.train --config ... [overrides]``: the recipe in this process (what accelerate runs)."""
    return run_recipe(list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
