"""``trl-grpo-ext eval``: evaluate the base model and/or a trained adapter on a run's held-out prompts.

    trl-grpo-ext eval --config recipes/configs/tiny_cpu.yaml --adapter outputs/tiny-qwen2-count-char --compare-base
    trl-grpo-ext eval --config recipes/configs/smollm2_arithmetic_cpu.yaml --num-prompts 200 --k 8 --json

The config is read by the recipe's own parser (the same dataclasses, YAML + ``--key value`` overrides after the
flags below), so the evaluation uses the run's model, chat template, system prompt, rewards, ``max_completion_length``
and sampling temperature. Every argument error ends with one line and exit code 2 before any model loads.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..config.checks import Range, RunArgumentError, check_choice
from ..evaluation.evaluate import EVAL_RESULTS_FILE
from . import Once


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Declare ``eval`` and its arguments on ``subparsers``."""
    p = subparsers.add_parser(
        "eval",
        help="Evaluate the base model and/or an adapter on held-out prompts (accuracy, pass@k, σ = 0 forecast).",
        description="Evaluate the base model and/or a trained adapter on a run's held-out prompts, with the run's "
                    "model, chat template, system prompt, rewards and completion length. Any --key value after these "
                    "flags overrides the config, as in the recipe (e.g. --max_completion_length 128, --seed 1).",
    )
    p.add_argument("--config", required=True, action=Once, help="The run's YAML config (a path, or a name in recipes/configs).")
    p.add_argument("--adapter", help="A trained adapter directory (the run's output_dir). Without it: the base model.")
    p.add_argument("--compare-base", action="store_true",
                   help="Evaluate the base and the adapter on the same prompts and print the paired difference.")
    p.add_argument("--split", choices=("test", "train"), default="test",
                   help="Which split: 'test' reads dataset_test_split (default), 'train' dataset_train_split.")
    p.add_argument("--num-prompts", type=int, default=None,
                   help="Evaluate the first N prompts of the split (default: eval_num_prompts for the test split, "
                        "every prompt of the train split).")
    p.add_argument("--k", type=int, default=0, dest="num_samples",
                   help="K samples per prompt at the run's temperature, for pass@k and the σ = 0 forecast (0: none).")
    p.add_argument("--correctness-reward", default=None,
                   help="Reward that decides correctness (>= 1.0); defaults to the run's first reward.")
    p.add_argument("--batch-size", type=int, default=32, help="Completions per generate call (default 32).")
    p.add_argument("--output", default=None, help=f"Also write the JSON to this file (e.g. .../{EVAL_RESULTS_FILE}).")
    p.add_argument("--json", action="store_true", help="Print one JSON object instead of the text report.")
    return p


def resolve_config_path(name: str) -> str:
    """A config path as given, or ``recipes/configs/<name>.yaml`` when ``name`` is a shipped config's name."""
    if Path(name).is_file():
        return name
    for candidate in (Path("recipes/configs") / f"{name}.yaml", Path("recipes/configs") / name):
        if candidate.is_file():
            return str(candidate)
    return name  # the recipe parser answers with the list of available configs


def _fail(message: str) -> int:
    print(f"trl-grpo-ext eval: error: {message}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace, overrides: list[str] | None = None) -> int:
    """Execute ``eval``; returns 0, or 2 after a one-line error."""
    import warnings

    # the message the trainer silences (see trainer.py; bitsandbytes' and kernels' log lines: the package's
    # __init__): transformers 5.24's deprecation of the gradient-checkpointing names that PEFT still calls
    warnings.filterwarnings(
        "ignore", message=r"`(is_gradient_checkpointing|gradient_checkpointing_(en|dis)able)` is deprecated",
        category=FutureWarning)
    from ..config.recipe_parse import RecipeArgumentError, parse_recipe_args, set_offline_defaults

    set_offline_defaults()
    try:
        for flag, value, low, fix in (("--num-prompts", args.num_prompts, 1, "use e.g. 64, or leave it out for all."),
                                      ("--k", args.num_samples, 0, "use 0 (no samples) or e.g. 8."),
                                      ("--batch-size", args.batch_size, 1, "use e.g. 32.")):
            Range(low=low, integer=True, fix=fix).check(flag, value)
    except RunArgumentError as err:
        return _fail(str(err))
    if args.compare_base and not args.adapter:
        return _fail("--compare-base needs --adapter DIR (the trained run's output_dir).")
    if args.adapter and (problem := _adapter_problem(args.adapter)):
        return _fail(f"--adapter {args.adapter!r} {problem}; pass a finished run's output_dir or one of its "
                     "checkpoint-* folders.")
    if args.output is not None and (problem := _output_problem(args.output, resolve_config_path(args.config))):
        return _fail(f"--output {args.output!r} {problem}")
    try:
        script_args, training_args, model_args, _ = parse_recipe_args(
            ["--config", resolve_config_path(args.config), *(overrides or [])], datasets=False
        )
    except RecipeArgumentError:
        return 2  # the parser printed the error lines (one per problem)
    names = [spec.name for spec in training_args.resolved.rewards]
    if args.correctness_reward is not None:
        try:
            check_choice("--correctness-reward", args.correctness_reward, names, fix="(the run's rewards)")
        except RunArgumentError as err:
            return _fail(str(err))
    if args.adapter:
        problem = _adapter_mismatch(args.adapter, model_args.model_name_or_path)
        if problem:
            return _fail(problem)
    size_field = "eval_num_prompts" if args.num_prompts is None else "--num-prompts"
    if args.num_prompts is None and args.split == "test":
        args.num_prompts = script_args.eval_num_prompts  # the run's own held-out size (None: the whole split)
    try:
        results = evaluate_run(script_args, training_args, model_args, adapter=args.adapter,
                               compare_base=args.compare_base, split=args.split, num_prompts=args.num_prompts,
                               num_samples=args.num_samples, correctness_reward=args.correctness_reward,
                               batch_size=args.batch_size, size_field=size_field)
    except (ValueError, OSError) as err:
        return _fail(" ".join(str(err).split()))
    print_results(results, as_json=args.json)
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(json.dumps(results_to_json(results), indent=2))
        print(f"Evaluation: {args.output}", file=sys.stderr if args.json else sys.stdout)  # --json: stdout is JSON
    return 0


def _adapter_problem(adapter: str) -> str | None:
    """Why ``adapter`` is no PEFT adapter folder (its ``adapter_config.json`` without a ``peft_type``, its weights
    missing or unreadable: PEFT fails on them only after the base has loaded), or None."""
    folder = Path(adapter)
    try:
        config = json.loads((folder / "adapter_config.json").read_text(encoding="utf-8"))
    except OSError:
        return "holds no adapter_config.json"
    except ValueError:
        return "holds an adapter_config.json that is not JSON"
    if not isinstance(config, dict) or "peft_type" not in config:
        return "holds an adapter_config.json without a peft_type (not one PEFT wrote)"
    from peft.utils import PeftType

    if config["peft_type"] not in {kind.value for kind in PeftType}:
        return f"holds an adapter_config.json whose peft_type {config['peft_type']!r} PEFT does not know"
    weights, binary = folder / "adapter_model.safetensors", folder / "adapter_model.bin"
    try:
        if weights.is_file():
            from safetensors import safe_open

            with safe_open(str(weights), framework="pt"):
                pass
        elif binary.is_file():
            import torch

            torch.load(binary, map_location="cpu", weights_only=True)
        else:
            return "holds no adapter weights (adapter_model.safetensors or adapter_model.bin)"
    except Exception as err:  # noqa: BLE001 (safetensors' and pickle's errors: the file is unreadable either way)
        name = weights.name if weights.is_file() else binary.name
        return f"holds an {name} that cannot be read ({' '.join(str(err).split())[:200]})"
    return None


def _output_problem(output: str, config: str) -> str | None:
    """Why the JSON cannot be written to ``output`` (checked by creating it, before any model loads), or None."""
    path = Path(output)
    if not output.strip() or path.is_dir():
        return "must be a file path, e.g. eval.json."
    if path.exists() and Path(config).exists() and path.samefile(config):  # a link to it too
        return "is the --config file: the result would overwrite it. Fix: write it to another file, e.g. eval.json."
    if (path.parent.exists() and not path.parent.is_dir()) or not path.parent.exists() \
            and not path.parent.parent.is_dir():
        return "must be a file path in an existing folder, e.g. eval.json."
    existed = path.exists()
    try:
        path.parent.mkdir(exist_ok=True)
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as err:
        return f"cannot be written ({err.strerror or err}). Fix: write it to a folder you can write to."
    if not existed:
        path.unlink()
    return None


def _adapter_mismatch(adapter: str, model_name: str) -> str | None:
    """A one-line reason when the adapter was trained on another base than the config's model, else None.

    Reads the adapter's ``run_config.json`` (written by the recipe) for the ``model_name_or_path`` it was trained
    from; adapters without one are not checked."""
    record = Path(adapter) / "run_config.json"
    if not record.is_file():
        return None
    try:
        trained_on = json.loads(record.read_text()).get("model_args", {}).get("model_name_or_path")
    except (ValueError, AttributeError):
        return None
    if trained_on and trained_on != model_name:
        return (f"--adapter {adapter!r} was trained on {trained_on!r}, but the config's model_name_or_path is "
                f"{model_name!r}; pass the config the adapter was trained with (or --model_name_or_path {trained_on}).")
    return None


def evaluate_run(script_args, training_args, model_args, *, adapter=None, compare_base=False, split="test",
                 num_prompts=None, num_samples=0, correctness_reward=None, batch_size=32,
                 size_field="eval_num_prompts") -> dict:
    """Load the run's model (and adapter) and evaluate it; returns ``{"adapter"|"base": EvalResult, ...}``.
    ``size_field``: what set ``num_prompts``, named if it exceeds the split (`data.load.load_eval_dataset`).

    With ``compare_base`` both are evaluated on the same prompts (the base with the adapter disabled) and the
    paired comparison is added under ``"comparison"``.
    """
    import torch
    from transformers import AutoModelForCausalLM

    from ..data.load import load_eval_dataset
    from ..evaluation.evaluate import compare, evaluate_model
    from ..models.embedded import tiny
    from ..models.loading import load_tokenizer, quantization_config, torch_dtype
    from ..models.settings import compute_dtype_name
    from ..rewards.spec import build_reward_funcs, with_run_defaults

    other = "train" if split == "test" else "test"
    dataset = load_eval_dataset(script_args, split=split, num_prompts=num_prompts,
                                fix=f"pass --split {other} to evaluate the {other} split instead, or set "
                                    f"{'dataset_test_split' if split == 'test' else 'dataset_train_split'} to a "
                                    "split that exists.", size_field=size_field)
    specs = with_run_defaults(list(training_args.resolved.rewards), training_args.max_completion_length)
    reward_funcs, reward_weights = build_reward_funcs(specs)
    model_path = tiny.resolve_model_path(model_args.model_name_or_path)
    tokenizer = load_tokenizer(model_args.model_name_or_path, model_path, revision=model_args.model_revision)
    on_gpu = torch.cuda.is_available() and not training_args.use_cpu
    # a CPU computes in the model's dtype as the run named it (`dtype: bfloat16`: the bf16 base the run trained on),
    # else float32
    explicit = model_args.dtype not in (None, "auto")
    dtype = torch_dtype(compute_dtype_name(model_args, training_args) if on_gpu or explicit else "float32")
    if not on_gpu:
        from ..training.host_memory import retain_freed_memory

        retain_freed_memory()  # generation frees and re-allocates its KV cache every batch
    model = AutoModelForCausalLM.from_pretrained(
        model_path, revision=model_args.model_revision, dtype=dtype,
        quantization_config=quantization_config(model_args, training_args),
        device_map={"": 0} if on_gpu else None,
    )
    settings = dict(max_new_tokens=training_args.max_completion_length, correctness_reward=correctness_reward,
                    num_samples=num_samples, temperature=training_args.temperature, top_p=training_args.top_p,
                    top_k=training_args.top_k or 0, batch_size=batch_size, reward_weights=reward_weights,
                    seed=training_args.seed)
    results: dict = {}
    if adapter:
        from peft import PeftModel

        try:
            model = PeftModel.from_pretrained(model, adapter)
        except (RuntimeError, KeyError) as err:  # weights of another shape or names: PEFT's traceback otherwise
            raise ValueError(f"--adapter {adapter!r} does not fit {model_args.model_name_or_path!r} "
                             f"({' '.join(str(err).split())[:300]}). Fix: pass an adapter trained on that model, or "
                             "the config it was trained with.") from None
        results["adapter"] = evaluate_model(model, tokenizer, dataset, reward_funcs, **settings)
        if compare_base:
            with model.disable_adapter():
                results["base"] = evaluate_model(model, tokenizer, dataset, reward_funcs, **settings)
            results["comparison"] = compare(results["base"], results["adapter"])
    else:
        results["base"] = evaluate_model(model, tokenizer, dataset, reward_funcs, **settings)
    from ..zero_variance.history import model_record

    for key in ("base", "adapter"):  # what a skip_history_file is compared with (zero_variance.history)
        if key in results:
            results[key].rewards = [spec.to_dict() for spec in specs]
            results[key].model = model_record(adapter if key == "adapter" else model_args.model_name_or_path)
            results[key].max_completion_length = training_args.max_completion_length
    return results


def results_to_json(results: dict, adapter_key: str = "adapter") -> dict:
    """The JSON object ``eval --json`` prints: one result's fields, or ``base`` / ``adapter`` objects with
    ``difference`` and ``difference_ci`` when both were evaluated. ``adapter_key="trained"`` names the adapter's
    object as ``eval_results.json`` of the recipe does."""
    if "comparison" in results:
        return {"base": results["base"].to_dict(), adapter_key: results["adapter"].to_dict(), **results["comparison"]}
    return next(iter(results.values())).to_dict()


def print_results(results: dict, as_json: bool = False) -> None:
    """Print the text report (or the JSON object) of :func:`evaluate_run`'s results."""
    from ..evaluation.evaluate import format_comparison, format_result

    if as_json:
        print(json.dumps(results_to_json(results), indent=2))
        return
    for key in ("base", "adapter"):
        if key in results:
            print(format_result(results[key], key))
    if "comparison" in results:
        print(format_comparison(results["comparison"]))
