"""The model card of a finished run, built from the files the recipe leaves in ``output_dir``.

Everything on the card is read from those files, never recomputed: the quantity plan from ``run_plan.json``, the
rewards and settings from ``run_config.json``, the metrics from ``train_results.json`` and ``trainer_state.json``. The
card is a :class:`huggingface_hub.ModelCard` (YAML metadata from :class:`huggingface_hub.ModelCardData` plus a
Jinja-rendered body), so it can be saved, validated and pushed with huggingface_hub's own tools.
"""

from __future__ import annotations

import json
import re
from importlib import metadata
from pathlib import Path

from ..config.advantage_settings import FIELDS as ADVANTAGE_FIELDS
from ..config.checks import check_choice
from ..config.secrets import scrub_secrets
from ..zero_variance.report import card_rows, run_summary, steps_per_generation
from ..zero_variance.settings import FIELDS as ZERO_VARIANCE_FIELDS
from . import card_facts
from .card_template import CARD_TEMPLATE, CITATIONS, DAPO_CITATION, GRESO_CITATION
from .merge import UPLOAD_MODES, read_json

#: Tags every card carries (the metadata's ``tags``); ``qlora`` is added for a 4-bit run, ``lora`` or ``merged`` by mode
#: (`card_facts.tags`).
CARD_TAGS = ("trl", "grpo", "trl-grpo-ext")
#: Keys shown in the "Zero-variance filter and advantages" table: each feature's own field list.
FILTER_ADVANTAGE_KEYS = (*ZERO_VARIANCE_FIELDS, *ADVANTAGE_FIELDS)
#: ``training_args`` keys (or ``script_args``' ``max_prompt_length``) shown in the "Optimisation" table, in this order,
#: when present.
OPTIMISATION_KEYS = (
    "learning_rate",
    "lr_scheduler_type",
    "warmup_steps",
    "weight_decay",
    "max_grad_norm",
    "loss_type",
    "beta",
    "epsilon",
    "epsilon_high",
    "temperature",
    "max_prompt_length",
    "max_completion_length",
    "seed",
)
#: Packages whose installed versions the card lists.
VERSIONED_PACKAGES = ("trl", "peft", "transformers", "torch", "bitsandbytes", "huggingface_hub", "datasets")
REWARD_PLOT_FILE = "reward_plot.png"
#: The card's license when the run does not set `hub_license` (the license of the shipped configs' base models).
DEFAULT_LICENSE = "apache-2.0"


def _uses_dapo(training_args: dict) -> bool:
    return training_args.get("zero_variance_filter") not in (None, "off")


def is_hub_id(name: str | None) -> bool:
    """Whether ``name`` reads as a Hub repo id (``"org/name"`` or ``"name"``) rather than a local path or an
    ``embedded:`` name. Only Hub ids go into the card's ``base_model`` / ``datasets`` metadata."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if not name or name.startswith(("embedded:", "/", ".", "~")) or Path(name).exists():
        return False
    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return True


def format_value(value) -> str:
    """One value as a markdown table cell: floats with 6 significant digits (``1e-05``, ``0.4375``), lists and dicts
    as inline JSON, ``|`` escaped."""
    if isinstance(value, bool) or value is None:
        text = json.dumps(value)
    elif isinstance(value, float):
        text = f"{value:g}"
    elif isinstance(value, (list, dict)):
        text = "`" + json.dumps(value, sort_keys=True) + "`"
    else:
        text = str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(header: tuple[str, ...], rows: list[tuple], empty: str = "Not recorded for this run.") -> str:
    """A markdown table, or ``empty`` when there are no rows."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(format_value(cell) for cell in row) + " |" for row in rows]) if rows else empty


def _name_link(name: str | None, kind: str, local: bool = False) -> str:
    if not name:
        return "an unrecorded " + kind
    if local:
        return f"`{name}` (a local folder, not on the Hub)"
    if is_hub_id(name):
        prefix = "datasets/" if kind == "dataset" else ""
        return f"[{name}](https://huggingface.co/{prefix}{name})"
    return f"`{name}` (not on the Hub)"


def _versions() -> str:
    from trl_grpo_ext._version import __version__

    lines = [f"- trl-grpo-ext: {__version__}"]
    for package in VERSIONED_PACKAGES:
        try:
            lines.append(f"- {package}: {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            lines.append(f"- {package}: not installed")
    return "\n".join(lines)


def _selected(values: dict, keys: tuple[str, ...]) -> list[tuple]:
    return [(key, values[key]) for key in keys if key in values]


def _with_resolved(training_args: dict) -> dict:
    """``training_args`` with the resolved advantage settings and judged reward (``training_args["resolved"]``) in
    place of the user's fields as given (``advantage_baseline: null`` shows the baseline the run used)."""
    resolved = training_args.get("resolved") or {}
    values = {name: value for name, value in training_args.items() if name != "resolved"}
    for name, value in (resolved.get("advantages") or {}).items():
        values[f"advantage_{name}"] = value
    if "zero_variance_reward" in resolved:
        values["zero_variance_reward"] = resolved["zero_variance_reward"]
    values.update(resolved.get("zero_variance") or {})  # ZeroVarianceSettings: its attributes are the field names
    return values


def _plan_table(plan_file: Path, plan: dict) -> str:
    """The run's plan as the run printed it (`RunPlan.format_table`: quantities with units and their arithmetic), in
    a code block; a ``run_plan.json`` this version cannot read falls back to its keys and values."""
    if not plan:
        return markdown_table(("quantity", "value"), [])
    from trl_grpo_ext.plan import RunPlan

    try:
        return "```text\n" + RunPlan.read(plan_file).format_table() + "\n```"
    except (TypeError, ValueError, KeyError):
        return markdown_table(("quantity", "value"), list(plan.items()))


def _final_metrics(results: dict, state: dict, plan: dict) -> list[tuple]:
    rows = card_facts.measured(results)
    if "global_step" in state:
        rows.append(("global_step (optimizer steps run)", state["global_step"]))
    logged = [entry for entry in state.get("log_history", []) if "reward" in entry]
    if logged:
        last = logged[-1]
        step = last.get("step", "?")
        for key in ("reward", "reward_std", "frac_reward_zero_std", "loss"):
            if key in last:
                rows.append((f"{key} (last logged, step {step})", last[key]))
    rows += card_rows(run_summary(state.get("log_history", []), steps_per_generation(plan)))
    return rows


def _generate_lines(chat: bool, prompt=None) -> str:
    """The snippet's input: ``prompt`` (the first held-out prompt the final evaluation answered: the run's own task and
    system prompt; a conversation or a string), else a generic question."""
    if chat:
        messages = prompt if isinstance(prompt, list) and prompt else [{"role": "user", "content": "What is 7 + 5?"}]
        return (
            f"messages = {json.dumps(messages, ensure_ascii=False)}\n"
            "inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors=\"pt\",\n"
            "                                       return_dict=True).to(model.device)\n"
        )
    text = prompt if isinstance(prompt, str) and prompt else "What is 7 + 5?"
    return f'inputs = tokenizer({json.dumps(text, ensure_ascii=False)}, return_tensors="pt").to(model.device)\n'


def _first_prompt(evaluation: dict | None):
    """The first prompt of ``eval_results.json``'s examples (the trained model's), or None."""
    examples = ((evaluation or {}).get("trained") or (evaluation or {}).get("adapter") or {}).get("examples") or []
    return examples[0].get("prompt") if examples and isinstance(examples[0], dict) else None


def _load_section(mode: str, model_ref: str, base_model: str | None, adapter_config: dict, chat: bool = True,
                  loading: card_facts.BaseLoading | None = None, full: bool = False, prompt=None) -> str:
    """How to load and run the model: ``model_ref`` is the Hub repo id once pushed, else the local folder; the
    second snippet loads the quantized base the run trained on (none for a run on an unquantized base)."""
    generate = (
        _generate_lines(chat, prompt)
        + "output = model.generate(**inputs, max_new_tokens=64)\n"
        + 'print(tokenizer.decode(output[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True))\n```'
    )
    if mode == "merged":
        return (
            ("A plain transformers model (a full fine-tune), no peft needed.\n\n" if full else
             "A plain transformers model: the adapter is merged in, no peft or bitsandbytes needed.\n\n")
            + "```python\nfrom transformers import AutoModelForCausalLM, AutoTokenizer\n\n"
            f'model_id = "{model_ref}"\n'
            'model = AutoModelForCausalLM.from_pretrained(model_id, dtype="auto")\n'
            "tokenizer = AutoTokenizer.from_pretrained(model_id)\n"
            + generate
        )
    base = adapter_config.get("base_model_name_or_path") or base_model or "BASE_MODEL"
    return (
        "A PEFT LoRA adapter. `AutoPeftModelForCausalLM` loads the base named in `adapter_config.json` "
        f"(`{base}`) and applies the adapter:\n\n"
        "```python\nfrom peft import AutoPeftModelForCausalLM\nfrom transformers import AutoTokenizer\n\n"
        f'model_id = "{model_ref}"\n'
        "model = AutoPeftModelForCausalLM.from_pretrained(model_id)\n"
        "tokenizer = AutoTokenizer.from_pretrained(model_id)\n"
        + generate
        + card_facts.quantized_snippet(  # an embedded base loads from the folder it was built in, not by its name
            loading, base if str(base_model).startswith("embedded:") else base_model or base, model_ref)
    )


def _has_chat_template(path: Path) -> bool:
    if (path / "chat_template.jinja").is_file():
        return True
    return bool(read_json(path / "tokenizer_config.json").get("chat_template"))


def _eval_rows(evaluation: dict) -> list[tuple]:
    rows = []
    for key, label in (("base", "base model"), ("trained", "trained adapter")):
        result = evaluation.get(key)
        if not isinstance(result, dict):
            continue
        low, high = result.get("accuracy_ci", [float("nan")] * 2)
        rewards = ", ".join(f"{k} {v:.3f}" for k, v in (result.get("mean_reward") or {}).items())
        rows.append((label, f"{result['accuracy']:.3f} [{low:.3f}, {high:.3f}]", result.get("num_prompts"), rewards))
    return rows


def _eval_section(evaluation: dict) -> str:
    """The card's evaluation table from ``eval_results.json`` (written by the recipe's final evaluation)."""
    rows = _eval_rows(evaluation)
    if not rows:
        return "Not recorded for this run (set `final_eval` and `dataset_test_split` in the recipe config)."
    judged = (evaluation.get("trained") or evaluation.get("base") or {}).get("correctness_reward")
    text = (
        "Greedy accuracy (pass@1 at temperature 0) on held-out prompts with the run's chat template, system prompt "
        f"and rewards; a completion is correct when `{judged}` reaches 1. Intervals are 95% Wilson intervals.\n\n"
        + markdown_table(("model", "accuracy [95% CI]", "prompts", "mean reward (greedy)"), rows)
    )
    if "difference" in evaluation:
        low, high = evaluation["difference_ci"]
        text += (f"\n\nPaired difference (trained − base) on the same prompts: {evaluation['difference']:+.3f} "
                 f"[95% CI {low:+.3f}, {high:+.3f}] (Newcombe's score interval for paired proportions).")
    return text


def _eval_results_metadata(evaluation: dict, dataset: str | None, script_args: dict) -> list:
    """``model-index`` results (huggingface_hub ``EvalResult``) for the trained adapter's greedy accuracy."""
    from huggingface_hub import EvalResult

    result = evaluation.get("trained")
    if not isinstance(result, dict) or "accuracy" not in result:
        return []
    return [
        EvalResult(
            task_type="text-generation",
            dataset_type=dataset or "unknown",
            dataset_name=dataset or "held-out split",
            dataset_split=script_args.get("dataset_test_split"),
            metric_type="accuracy",
            metric_value=round(float(result["accuracy"]), 4),
            metric_name=f"greedy pass@1 ({result.get('num_prompts')} prompts)",
        )
    ]


def build_model_card(
    output_dir: str | Path, *, mode: str = "adapter", repo_id: str | None = None, token: str | None = None
):
    """Build the model card of a finished run from the files in its ``output_dir``.

    Args:
        output_dir (`str` or `Path`): the run's directory. Read when present: ``run_plan.json`` (every key is shown),
            ``run_config.json`` (``script_args`` / ``model_args`` / ``training_args``; secrets are redacted with
            :func:`~trl_grpo_ext.config.secrets.scrub_secrets` before anything is shown), ``trainer_state.json``,
            ``train_results.json``, ``adapter_config.json`` and ``reward_plot.png`` (linked as a relative image, so it
            must be uploaded next to the card). A missing file gives "Not recorded for this run." in its section.
        mode (`str`, defaults to ``"adapter"``): ``"adapter"`` (load with peft) or ``"merged"`` (plain transformers).
        repo_id (`str`, *optional*): the Hub repo the card is written for; used in the loading snippet and as the
            model name. Without it the snippet loads from ``output_dir`` (its absolute path) and the model name is the
            directory's name. The license is ``push_args.hub_license`` from ``run_config.json``, else
            :data:`DEFAULT_LICENSE`.
        token (`str`, *optional*): a token value to remove from everything shown, whatever its key.

    Returns:
        :class:`huggingface_hub.ModelCard`, with metadata ``base_model`` and ``datasets`` (only when they are Hub ids),
        ``library_name`` (``peft`` or ``transformers``), ``license``, ``pipeline_tag`` ``text-generation`` and the tags
        :data:`CARD_TAGS`. Save it with ``card.save(path)``.

    Raises:
        ValueError: when ``mode`` is not ``"adapter"`` or ``"merged"``.
    """
    from huggingface_hub import ModelCard, ModelCardData

    check_choice("mode", mode, UPLOAD_MODES, error=ValueError)
    path = Path(output_dir)
    config = scrub_secrets(read_json(path / "run_config.json"), token)
    plan = read_json(path / "run_plan.json")
    state = read_json(path / "trainer_state.json")
    results = read_json(path / "train_results.json")
    adapter_config = read_json(path / "adapter_config.json")
    script_args = config.get("script_args") or {}
    training_args = config.get("training_args") or {}
    source = card_facts.model_source(config, path, adapter_config)  # the original base, even when continued
    base_model = source.base if source is not None else None
    loading = card_facts.base_loading(config)
    dataset = script_args.get("dataset_name")
    model_ref = repo_id or str(path.resolve())  # the snippet must load: a pushed repo, else this very folder
    model_name = (repo_id or path.resolve().name).split("/")[-1]
    license_id = (config.get("push_args") or {}).get("hub_license") or DEFAULT_LICENSE

    evaluation = read_json(path / "eval_results.json")
    full = mode == "adapter" and not adapter_config and (path / "config.json").is_file()  # use_peft false: the model
    card_data = ModelCardData(
        eval_results=_eval_results_metadata(evaluation, dataset, script_args) or None,
        base_model=source.hub_id if source is not None and is_hub_id(source.hub_id) else None,
        datasets=[dataset] if is_hub_id(dataset) else None,
        library_name="transformers" if mode == "merged" or full else "peft",
        pipeline_tag="text-generation",
        tags=card_facts.tags(loading, "full" if full else mode),
        model_name=model_name,
        license=license_id,
    )
    lora = ""
    if adapter_config:
        targets = adapter_config.get("target_modules")
        targets = ", ".join(sorted(targets)) if isinstance(targets, list) else targets
        lora = f" (r={adapter_config.get('r')}, alpha={adapter_config.get('lora_alpha')}, on {targets}"
        if adapter_config.get("modules_to_save"):
            lora += ", with trained copies of " + ", ".join(adapter_config["modules_to_save"])
        lora += ")"
    base_link = _name_link(base_model, "model", local=source is not None and source.base_is_local)
    continued = f", continued from the adapter in `{source.adapter}`," if source is not None and source.continued else ""
    on_base = f" on {loading.phrase()}" if loading is not None else ""
    if mode == "merged":
        into = ("the de-quantized base (the weights training saw)" if loading is not None and loading.bits
                else "the base")
        summary = (
            f"{base_link} with a GRPO-trained LoRA adapter{lora}{continued} merged in, trained on "
            f"{_name_link(dataset, 'dataset')} with trl-grpo-ext{on_base}. The adapter was merged into {into}; see "
            "`merge_info.json` for the method and dtype."
        )
    elif full:
        summary = (f"{base_link}, fully fine-tuned (every weight, no adapter) with GRPO on "
                   f"{_name_link(dataset, 'dataset')} with trl-grpo-ext{on_base}.")
    else:
        summary = (
            f"A LoRA adapter{lora} for {base_link}{continued} trained with GRPO on "
            f"{_name_link(dataset, 'dataset')} with trl-grpo-ext{on_base}."
        )
    resolved = training_args.get("resolved") or {}  # `GRPOExtConfig.resolved`: what the user's fields resolved to
    rewards = resolved.get("rewards") or training_args.get("rewards") or []
    reward_rows = [
        (r.get("name"), r.get("weight", 1.0), r.get("kwargs") or {}) for r in rewards if isinstance(r, dict)
    ]
    return ModelCard.from_template(
        card_data,
        template_str=CARD_TEMPLATE,
        model_name=model_name,
        summary=summary,
        load_section=_load_section("merged" if full else mode, model_ref, base_model, adapter_config,
                                   _has_chat_template(path), loading, full=full, prompt=_first_prompt(evaluation)),
        training_sentence=card_facts.training_sentence(loading, full),
        license=license_id,
        citations="\n\n".join((CITATIONS[0], *filter(None, [card_facts.method_citation(loading, full)]), *CITATIONS[1:])
                              + ((DAPO_CITATION,) if _uses_dapo(training_args) else ())
                              + ((GRESO_CITATION,) if training_args.get("zero_variance_filter") == "skip" else ())),
        rewards_table=markdown_table(("reward", "weight", "kwargs"), reward_rows),
        plan_table=_plan_table(path / "run_plan.json", plan),
        filter_table=markdown_table(("setting", "value"), _selected(_with_resolved(training_args), FILTER_ADVANTAGE_KEYS)),
        optimisation_table=markdown_table(("setting", "value"), _selected(
            {**training_args, **{k: v for k, v in script_args.items() if k == "max_prompt_length" and v is not None}},
            OPTIMISATION_KEYS)),
        metrics_table=markdown_table(("metric", "value"), _final_metrics(results, state, plan)),
        eval_section=_eval_section(evaluation),
        has_plot=(path / REWARD_PLOT_FILE).is_file(),
        plot_file=REWARD_PLOT_FILE,
        versions=_versions(),
        config_json=re.sub(r"```", "'''", json.dumps(config, indent=2, sort_keys=True)),
    )
