"""``trl-grpo-ext plan``: print a run's plan from its recipe YAML without loading a model or importing torch.

Usage::

    trl-grpo-ext plan --config recipes/configs/tiny.yaml [--dataset-size N] [--num-processes P] [--json]
                      [--gpu-memory-gib 24 --model-params 0.5e9]

The YAML is the one the recipe reads with TRL's ``TrlParser``: keys are ``GRPOExtConfig``/TRL field names. ``plan``
reads the quantity keys (``prompts_per_step``, ``num_generations``, ``micro_batch_size``, ``total_training_steps``,
``total_epochs``, ``num_iterations``, ``max_completion_length`` and TRL's ``per_device_train_batch_size``,
``gradient_accumulation_steps``, ``max_steps``, ``num_train_epochs``, ``generation_batch_size``,
``steps_per_generation``) and ignores the rest.

Dataset size: ``--dataset-size``; else, for ``dataset_name: "embedded:..."``, the YAML's ``embedded_num_prompts``
(512 when absent); else unknown, and the plan counts steps only (a step limit is then required). Processes:
``--num-processes``, else the ``WORLD_SIZE`` environment variable, else 1. A ``model_name_or_path`` containing
"instruct" (any case) enables the instruct-model advice on ``num_generations``.

Output: the table (or ``RunPlan.to_json()`` with ``--json``) on stdout, warnings on stderr as ``warning: ...`` lines.
Errors print one line on stderr and exit with status 2.
"""

from __future__ import annotations

import argparse
import os
import sys

from trl_grpo_ext.eval_plan import uniform_forecast_warning
from trl_grpo_ext.quantifiers import (
    _INPUT_FIELDS,
    TRL_DEFAULTS,
    QuantityError,
    plan_warnings,
    resample_note,
    resolve_plan,
    resolve_trl_fields,
)

#: Prompts of the embedded count-char dataset when the YAML has no ``embedded_num_prompts``.
DEFAULT_EMBEDDED_NUM_PROMPTS = 512
EMBEDDED_PREFIX = "embedded:"


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Declare ``plan`` and its arguments on ``subparsers`` (from ``ArgumentParser.add_subparsers``)."""
    parser = subparsers.add_parser(
        "plan", help="show a run's quantities (steps, epochs, batches, token budget) without loading a model",
        description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="recipe YAML (GRPOExtConfig / TRL field names as keys)")
    parser.add_argument("--dataset-size", type=int, default=None, help="prompts in the training set")
    parser.add_argument("--num-processes", type=int, default=None,
                        help="training processes (default: $WORLD_SIZE, else 1)")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON instead of a table")
    parser.add_argument("--gpu-memory-gib", type=float, default=None,
                        help="memory of one device in GiB, to check that a micro-batch can fit")
    parser.add_argument("--model-params", type=float, default=None,
                        help="number of model parameters (e.g. 0.5e9), used with --gpu-memory-gib")
    parser.add_argument("--eval-results", default=None,
                        help="an `eval --json` output (or eval_results.json): warn when its σ = 0 forecast for the "
                             "run's num_generations exceeds one half")
    return parser


def _coerce(value):
    """YAML scalars as TrlParser would type them: numeric strings become numbers, 'none'/'null' None."""
    if not isinstance(value, str):
        return value
    if value.strip().lower() in ("none", "null", ""):
        return None
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return value


def load_config(path: str) -> dict:
    """Read the recipe YAML into a dict; raises ValueError with a one-line message if it is not a mapping."""
    import yaml

    with open(path, encoding="utf-8") as fh:
        data = yaml.safe_load(fh)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"--config {path}: expected a mapping of field names to values, got {type(data).__name__}")
    return data


def dataset_size_from(config: dict, dataset_size: int | None) -> int | None:
    """The dataset size: ``dataset_size`` if given, else ``embedded_num_prompts`` (512) for an embedded dataset."""
    if dataset_size is not None:
        return dataset_size
    name = config.get("dataset_name")
    if isinstance(name, str) and name.startswith(EMBEDDED_PREFIX):
        return _coerce(config.get("embedded_num_prompts", DEFAULT_EMBEDDED_NUM_PROMPTS))
    return None


def world_size_from(num_processes: int | None) -> int:
    """``num_processes`` if given, else ``$WORLD_SIZE``, else 1 (raises QuantityError on a non-integer value)."""
    if num_processes is not None:
        return num_processes
    env = os.environ.get("WORLD_SIZE")
    if env is None:
        return 1
    try:
        return int(env)
    except ValueError:
        raise QuantityError(f"WORLD_SIZE={env!r} is not a whole number; unset it or pass --num-processes P") from None


def build_plan(args: argparse.Namespace):
    """Resolve the plan for parsed ``args``.

    Returns:
        ``(RunPlan, warnings, notes, rewards)``: lists of str, and the resolved rewards line (or None).
    """
    config = load_config(args.config)
    values = {k: _coerce(config[k]) for k in _INPUT_FIELDS if k in config}
    world = world_size_from(args.num_processes)
    fields = resolve_trl_fields(values, world)
    mcl = _coerce(config.get("max_completion_length", TRL_DEFAULTS["max_completion_length"]))
    plan = resolve_plan(fields, dataset_size_from(config, args.dataset_size), world, mcl)
    model = config.get("model_name_or_path")
    instruct = True if isinstance(model, str) and "instruct" in model.lower() else None
    warns = plan_warnings(plan, instruct_model=instruct, gpu_memory_gib=args.gpu_memory_gib,
                          model_params=args.model_params)
    rewards = None
    if config.get("rewards") is not None:
        from trl_grpo_ext.rewards.spec import format_reward_specs, parse_reward_specs

        rewards = format_reward_specs(parse_reward_specs(config["rewards"], config.get("reward_weights")))
    notes = []
    if config.get("zero_variance_filter") == "resample":
        notes.append(resample_note(plan, int(config.get("max_resample_rounds", 3))))
    if getattr(args, "eval_results", None):
        import json

        with open(args.eval_results, encoding="utf-8") as fh:
            forecast_warning = uniform_forecast_warning(json.load(fh), plan.num_generations)
        if forecast_warning:
            warns.append(forecast_warning)
    return plan, warns, notes, rewards


def eval_plan_from(config: dict, plan):
    """The evaluation plan of a YAML config (:func:`trl_grpo_ext.eval_plan.resolve_eval_plan`), or ``None``.

    Held-out prompts: ``eval_num_prompts``, else the embedded task's test split size, else unknown.
    """
    from trl_grpo_ext.data_sizes import embedded_test_size
    from trl_grpo_ext.eval_plan import resolve_eval_plan

    prompts = _coerce(config.get("eval_num_prompts"))
    if prompts is None:
        prompts = embedded_test_size(config.get("dataset_name"))
    return resolve_eval_plan(
        eval_prompts=prompts, eval_strategy=str(config.get("eval_strategy", "no")),
        eval_steps=_coerce(config.get("eval_steps")), logging_steps=_coerce(config.get("logging_steps", 10)),
        num_generations=plan.num_generations, num_generations_eval=_coerce(config.get("num_generations_eval")),
        per_device_eval_batch_size=_coerce(config.get("per_device_eval_batch_size", 8)),
        world_size=plan.world_size, total_steps=plan.total_steps, steps_per_epoch=plan.steps_per_epoch or 1,
        final_eval=str(config.get("final_eval", "none")),
    )


def run(args: argparse.Namespace) -> int:
    """Execute ``plan``: print the table (or JSON) and warnings; 0 on success, 2 on an error (one line, stderr)."""
    import yaml

    try:
        plan, warns, notes, rewards = build_plan(args)
    except (ValueError, OSError, yaml.YAMLError) as err:  # QuantityError is a ValueError
        print(f"trl-grpo-ext plan: error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2
    try:
        evaluation = eval_plan_from(load_config(args.config), plan)
    except (ValueError, OSError) as err:
        print(f"trl-grpo-ext plan: error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2
    print(plan.to_json() if args.json else plan.format_table())
    if rewards and not args.json:
        print(rewards)
    if evaluation is not None and not args.json:
        print("evaluation:\n  " + "\n  ".join(evaluation.format_lines()))
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    for warning in warns:
        print(f"warning: {warning}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run ``plan`` alone (``python -m trl_grpo_ext.plan_cli --config ...``), without the other sub-commands."""
    parser = argparse.ArgumentParser(prog="trl-grpo-ext")
    add_parser(parser.add_subparsers(dest="command", required=True))
    return run(parser.parse_args(["plan", *(sys.argv[1:] if argv is None else argv)]))


if __name__ == "__main__":
    sys.exit(main())
