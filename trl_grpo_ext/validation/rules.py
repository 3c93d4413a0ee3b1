"""Every cross-field rule of a run, one small function each in :data:`RULES`, run on the same values by `plan`, the
recipe (`validate_run_args`) and `GRPOExtConfig.__post_init__` (scope ``"run"``). A rule reads a :class:`RunView` and
raises a `ValueError` whose line names the fields, the values and a fix."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..config.advantage_settings import FIELDS as ADVANTAGE_FIELDS  # TRL's normalize_then_sum ignores each
from ..config.checks import RunArgumentError, as_number, shown
from ..config.engines import resolve_engine
from ..config.loss_settings import CLIP_DEFAULTS
from ..config.push_settings import check_push_settings
from .engines import check_engine_settings, engine_warnings
from .generation import check_generation_settings, check_merged_generation, check_vllm_settings
from .lora import check_lora_names, check_lora_targets, check_quantized_has_adapter
from .packages import check_run_packages
from .rewards import (
    check_reward_columns,
    check_reward_packages,
    check_rewards_against_run,
    check_rewards_not_empty,
    check_rewards_set,
    check_some_weight,
    known_columns,
    reward_specs,
)
from .tables import EXCLUSIVE, ORDERED, REFUSED_WHEN_OFF, REQUIRES, ignored_fields, is_on
from .trainer_settings import (
    TRAINER_FIELDS,
    batch_dispatch_problems,
    check_continued_adapter,
    trainer_problems,
    trainer_warnings,
)
from .view import RunView


@dataclass(frozen=True)
class Rule:
    """One cross-field rule: ``name`` (tests/test_validation_table.py has a row for each), ``check`` (raises
    `ValueError`), ``fields`` (named by its problem; a tuple or a callable of the view), ``blocked_by`` (skip it when one
    of these has a problem; default ``fields``), ``scope`` (``"run"``: also `GRPOExtConfig.__post_init__`; ``"args"``:
    `plan` and the recipe only)."""

    name: str
    check: Callable[[RunView], Any]
    fields: Any = ()
    blocked_by: Any = None
    scope: str = "args"

    def field_names(self, view: RunView, which: str = "fields") -> tuple[str, ...]:
        value = getattr(self, which)
        return tuple(value(view) if callable(value) else value)


def quantity_conflicts(v: RunView) -> None:
    """Our batch/stop fields next to the raw TRL fields they write, judged on the keys the user set."""
    v.batch  # noqa: B018 (resolving raises)


def advantage_conflicts(v: RunView) -> None:
    """The advantage preset, ``scale_rewards``, ``loss_type`` and our advantage fields: conflicts between set keys."""
    import warnings

    from ..config.advantage_settings import AdvantageConfigError, resolve_advantage_settings

    user = v.user or {}
    scale_set = user.get("scale_rewards") is not None
    epsilon = user.get("advantage_epsilon")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the config's own resolution warns once, later
            resolve_advantage_settings(
                preset=user.get("advantage_preset"), scale_rewards=user["scale_rewards"] if scale_set else "group",
                advantage_epsilon=as_number(epsilon) if epsilon is not None else None,
                **{name: user.get(name) for name in ("advantage_baseline", "advantage_std_scaling",
                                                     "advantage_std_kind", "loss_type")},
                defaults={"scale_rewards": None if scale_set else "group"})  # a set key is explicit whatever its value
    except AdvantageConfigError as err:
        raise RunArgumentError(str(err)) from None


def _several(found: list[tuple[str, tuple[str, ...]]]) -> None:
    """Raise the problems ``found`` ((line, fields), ...): one as itself, several as one error listing them."""
    if not found:
        return
    err = RunArgumentError("\n".join(line for line, _ in found))
    if len(found) > 1:
        err.problems = [line for line, _ in found]
    err.fields = [name for _, names in found for name in names]
    raise err


def exclusive(v: RunView) -> None:
    """`tables.EXCLUSIVE`: fields that cannot both be on."""
    user = v.set_keys
    _several([(f"{a}={shown(user[a])} and {b}={shown(user[b])} cannot both be set. Fix: {fix}", (a, b))
              for a, b, fix in EXCLUSIVE if is_on(user.get(a)) and is_on(user.get(b)) and not v.blocked((a, b))])


#: `REQUIRES` rows a config built in Python does not judge: ``trainer.evaluate()`` reads them.
PYTHON_SKIPPED = ("num_generations_eval", "eval_on_start", "do_eval")


def ignored_settings(v: RunView) -> None:
    """`tables.REQUIRES`: set fields whose setting is off, one line per setting: a warning, or a refusal for the rows
    of `tables.REFUSED_WHEN_OFF` (the run would fail). An eval_steps equal to logging_steps in a config built in
    Python is the one transformers wrote (under eval_strategy steps), not the user's."""
    user = v.set_keys
    ignored: dict[str, list[str]] = {}  # setting -> fields the user set that need it
    for name in ignored_fields(user, v.values, partial=v.user is None):
        python_skip = v.user is None and (name in PYTHON_SKIPPED
                                          or (name == "eval_steps" and user[name] == v.get("logging_steps")))
        if not python_skip and not v.blocked((name,)):
            ignored.setdefault(REQUIRES[name][0], []).append(name)
    found = []
    for setting, names in ignored.items():
        fix = REQUIRES[names[0]][2].format(field=" and ".join(names))
        one = len(names) == 1
        line = f"{', '.join(f'{n}={shown(user[n])}' for n in names)} only take{'s' if one else ''} effect with {setting}"
        refused = [n for n in names if n in REFUSED_WHEN_OFF]
        if refused:
            found.append((f"{line}: {REFUSED_WHEN_OFF[refused[0]]}. Fix: {fix}", tuple(names)))
        else:
            v.warn(f"{line}, so {'it has' if one else 'they have'} no effect. Fix: {fix}")
    _several(found)


def ordered(v: RunView) -> None:
    """`tables.ORDERED`: the first field may not exceed the second (``strict``: must be below it)."""
    found = []
    for low, high, strict in ORDERED:
        lo, hi = as_number(v.values.get(low)), as_number(v.values.get(high))
        if lo is not None and hi is not None and (lo >= hi if strict else lo > hi) and not v.blocked((low, high)):
            found.append((f"{low}={shown(v.values[low])} {'is not below' if strict else 'is above'} {high}="
                          f"{shown(v.values[high])}. Fix: make {low} {'<' if strict else '<='} {high}.", (low, high)))
    _several(found)


def evaluation_split(v: RunView) -> None:
    """Evaluation needs a ``dataset_test_split`` (not null or "")."""
    strategy, final_eval = v.get("eval_strategy"), v.get("final_eval") or "none"
    if not (strategy not in (None, "no") or final_eval != "none") or v.get("dataset_test_split"):
        return
    setting = f"eval_strategy={strategy!r}" if strategy not in (None, "no") else f"final_eval={final_eval!r}"
    raise RunArgumentError(
        f"{setting} evaluates on a test split, but dataset_test_split={v.get('dataset_test_split')!r}. Fix: set "
        "dataset_test_split: <split of dataset_name> (e.g. test), or eval_strategy: no and final_eval: none.")


def chat_template(v: RunView) -> None:
    """``chat_template`` must parse as Jinja (TRL renders it at the first generation, after the model loads)."""
    template = v.get("chat_template")
    if not isinstance(template, str) or not template:
        return
    import jinja2

    try:
        jinja2.Environment().parse(template)
    except jinja2.TemplateSyntaxError as err:
        raise RunArgumentError(f"chat_template is not a valid Jinja template ({err.message}, line {err.lineno}). Fix: "
                               "close every {{ ... }} and {% ... %} in it, or remove chat_template to use the "
                               "tokenizer's own.") from None
    if "{{" not in template and "{%" not in template:  # `chatml`, a template's name in other tools' configs
        v.warn(f"chat_template={template!r} has no Jinja in it, so every prompt would render as that text. Fix: give "
               "a Jinja template that reads messages, or remove chat_template to use the tokenizer's own.")


def compare_base_adapter(v: RunView) -> None:
    """``final_eval: compare_base`` switches the adapter off to score the base: it needs one."""
    if v.get("final_eval") == "compare_base" and not v.get("use_peft"):
        raise RunArgumentError("final_eval=compare_base needs an adapter to switch off (use_peft: true); with "
                               "use_peft: false set final_eval: adapter (the trained model alone) or none.")


def cpu_bf16_on_float16(v: RunView) -> None:
    """``bf16: true`` on a CPU over a base loaded in float16: torch's CPU autocast fails at the first step."""
    if v.on_cpu and v.get("bf16") is True and v.get("dtype") == "float16":
        raise RunArgumentError(
            "dtype='float16' with bf16=True and use_cpu=True: torch's CPU autocast cannot run bf16 over float16 "
            "weights, and the run would fail at its first step (RuntimeError: Unexpected floating ScalarType in "
            "at::autocast::prioritize). Fix: --dtype float32 (or bfloat16) with bf16: true, or --bf16 false.")


def normalize_then_sum(v: RunView) -> None:
    """`normalize_then_sum` is TRL's fixed formula: advantage settings set next to it would be ignored."""
    if v.get("multi_objective_aggregation") != "normalize_then_sum":
        return
    for name in (n for n in ADVANTAGE_FIELDS if v.is_set(n)):
        v.warn(
            f"{name}={v.values[name]!r} has no effect with multi_objective_aggregation='normalize_then_sum': TRL then "
            "normalises each reward over its group (sample std, ε 1e-4), sums them and normalises over the batch. "
            f"Fix: remove {name}, or use multi_objective_aggregation: sum_then_normalize.")


def zero_variance(v: RunView) -> str | None:
    """`zero_variance.settings`' two checks on the resolved batch; returns the canonical judged reward."""
    from ..zero_variance.settings import check_hard_prompt_settings, check_zero_variance_settings

    mode, b = v.get("zero_variance_filter") or "off", v.batch
    try:
        ineffective = check_hard_prompt_settings(
            mode=mode, signal=v.get("zero_variance_signal") or "off", rollout_budget=v.get("rollout_budget") or "uniform",
            use_vllm=bool(v.get("use_vllm")), world_size=v.world_size, batch=b,
            multi_objective_aggregation=v.get("multi_objective_aggregation") or "sum_then_normalize")
        if ineffective:
            v.warn(ineffective)
        if mode == "off" and v.get("zero_variance_reward") is None:
            return None
        return check_zero_variance_settings(
            mode=mode, zero_variance_reward=v.get("zero_variance_reward"), reward_names=v.reward_names,
            multi_objective_aggregation=v.get("multi_objective_aggregation") or "sum_then_normalize",
            loss_type=v.loss_type(), entropy_coef=as_number(v.get("entropy_coef")) or 0.0,
            use_adaptive_entropy=bool(v.get("use_adaptive_entropy")), num_generations=b["num_generations"],
            skip_history_file=v.get("skip_history_file"),
            world_size=v.world_size, generation_batch_size=b.get("generation_batch_size"),
            steps_per_generation=b.get("steps_per_generation"),
            gradient_accumulation_steps=b["gradient_accumulation_steps"],
            per_device_train_batch_size=b["per_device_train_batch_size"])
    except ValueError as err:
        raise RunArgumentError(str(err)) from None


def clipping(v: RunView) -> None:
    """Clip settings that never act: every update on-policy (`loss_settings.ignored_clipping`)."""
    from ..config.loss_settings import ignored_clipping

    settings = {name: as_number(v.values.get(name)) for name in CLIP_DEFAULTS if v.is_set(name)}
    if not settings:
        return
    b = v.batch
    ga, spg = b["gradient_accumulation_steps"], b.get("steps_per_generation")
    if spg is None and b.get("generation_batch_size"):
        spg = b["generation_batch_size"] // (b["per_device_train_batch_size"] * v.world_size)
    message = ignored_clipping(settings, loss_type=v.get("loss_type") or "dapo", gradient_accumulation_steps=ga,
                               steps_per_generation=spg or ga, num_iterations=b["num_iterations"])
    if message:
        v.warn(message)


def engine_settings(v: RunView) -> None:
    """`validation.engines`: the refused combinations of the run's engine, then the settings it ignores (warnings)."""
    engine = _engine(v)
    check_engine_settings(engine, v.values)
    for line in engine_warnings(engine, v.values):
        v.warn(line)


def trainer_settings(v: RunView) -> None:
    """`validation.trainer_settings`: the settings without effect (warnings), then the refused ones."""
    for line in trainer_warnings(v.values, v.user):
        v.warn(line)
    _several(trainer_problems(v.values, v.user))


def _reward_specs(v: RunView):
    return reward_specs(v.values)


def reward_columns(v: RunView) -> None:
    columns = known_columns(v.values)
    if columns is not None:
        check_reward_columns(columns, _reward_specs(v))


_CLIP = tuple(CLIP_DEFAULTS)
_LORA = ("lora_target_modules", "lora_modules_to_save")
_REWARDS = ("rewards", "reward_weights")
_engine = lambda v: resolve_engine(v.values, accelerate_config=v.engine)  # noqa: E731


def _set(names):
    return lambda v: tuple(n for n in names if v.is_set(n))


#: Every cross-field rule, in the order they run.
RULES: tuple[Rule, ...] = (
    Rule("exclusive", exclusive, (), blocked_by=(), scope="run"),
    Rule("quantity_conflicts", quantity_conflicts, RunView.quantity_keys),
    Rule("advantage_conflicts", advantage_conflicts, _set((*ADVANTAGE_FIELDS, "loss_type"))),
    Rule("ignored_settings", ignored_settings, (), blocked_by=(), scope="run"),
    Rule("ordered", ordered, (), blocked_by=(), scope="run"),
    Rule("evaluation_split", evaluation_split, ("eval_strategy", "final_eval", "dataset_test_split")),
    Rule("chat_template", chat_template, ("chat_template",)),
    Rule("compare_base_adapter", compare_base_adapter, ("final_eval", "use_peft")),
    Rule("cpu_bf16_on_float16", cpu_bf16_on_float16, ("dtype", "bf16", "use_cpu")),
    Rule("push_needs_adapter", lambda v: check_push_settings(v, adapter=True),
         ("push_to_hub_mode", "push_to_hub", "use_peft")),
    Rule("push_needs_repository", lambda v: check_push_settings(v, adapter=False),
         ("push_to_hub_mode", "push_to_hub", "hub_repo_id", "hub_model_id")),
    Rule("quantized_needs_adapter", lambda v: check_quantized_has_adapter(v.values),
         lambda v: (*(n for n in ("load_in_4bit", "load_in_8bit") if v.get(n)), "use_peft"),
         blocked_by=("load_in_4bit", "load_in_8bit", "use_peft")),
    Rule("reward_specs", _reward_specs, _REWARDS),
    Rule("normalize_then_sum", normalize_then_sum, ("multi_objective_aggregation", *ADVANTAGE_FIELDS),
         scope="run"),
    Rule("clipping", clipping, lambda v: (*_set(_CLIP)(v), "num_iterations"),
         blocked_by=lambda v: (*_set(_CLIP)(v), *v.quantity_keys(), "loss_type"), scope="run"),
    Rule("zero_variance", zero_variance, ("zero_variance_filter", "zero_variance_reward", "skip_history_file"),
         blocked_by=lambda v: ("zero_variance_filter", "zero_variance_reward", "multi_objective_aggregation", *_REWARDS,
                               *v.quantity_keys()), scope="run"),
    Rule("generation", lambda v: check_generation_settings(v, v.on_cpu), ("use_vllm", "use_transformers_continuous_batching", "cache_implementation",
                                    "generation_kwargs", "repetition_penalty"), scope="run"),
    Rule("vllm_quantization", check_vllm_settings, ("use_vllm", "load_in_4bit", "load_in_8bit"), scope="run"),
    Rule("rewards_against_run", lambda v: check_rewards_against_run(_reward_specs(v), v.values), (), blocked_by=(*_REWARDS, "max_completion_length")),
    Rule("reward_packages", lambda v: check_reward_packages(_reward_specs(v)), (), blocked_by=_REWARDS),
    Rule("reward_columns", reward_columns, ("embedded_target",),
         blocked_by=(*_REWARDS, "embedded_target", "dataset_name", "dataset_format")),
    # flash-attn, vLLM, Liger, the trackers: before the model, not after (each missing package a line of its own)
    Rule("run_packages", lambda v: check_run_packages(v.values, v.problems), (), blocked_by=()),
    Rule("merged_generation", lambda v: check_merged_generation(v.values, _engine(v), v.user),
         ("merge_adapter_for_generation",),
         blocked_by=("merge_adapter_for_generation", "use_peft", "lora_dropout", "dtype", "model_init_kwargs")),
    Rule("engine_settings", engine_settings, ("deepspeed", "fsdp", "fsdp_config"),
         scope="run"),
    Rule("lora_names", lambda v: check_lora_names(v.values), _LORA, blocked_by=(*_LORA, "use_peft")),
    Rule("lora_targets", lambda v: v.check_model and v.get("use_peft") and check_lora_targets(v.values), _LORA,
         blocked_by=(*_LORA, "use_peft", "model_name_or_path", "model_revision")),
    Rule("rewards_set", lambda v: check_rewards_set(v.values), ("rewards",)),
    Rule("empty_rewards", lambda v: check_rewards_not_empty(v.values), ("rewards",)),
    Rule("reward_weights", lambda v: check_some_weight(_reward_specs(v)), _REWARDS),
    Rule("trainer_settings", trainer_settings, (), blocked_by=TRAINER_FIELDS),
    Rule("batch_dispatch", lambda v: _several(batch_dispatch_problems(v.values)), ("accelerator_config",), scope="run"),
    Rule("continued_adapter", lambda v: check_continued_adapter(v.values), ("model_name_or_path", "use_peft",
                                                                           "output_dir"),
         blocked_by=("model_name_or_path", "output_dir")),  # listed with quantized_needs_adapter's use_peft line
)


def run_rules(view: RunView, problems, scope: str = "args") -> dict[str, Any]:
    """Run :data:`RULES` (with ``scope="run"``: those marked ``"run"``) on ``view``, recording each problem in ``problems``;
    a rule reading a field already refused is skipped. Returns each rule's result by name (``"zero_variance"``: the
    canonical judged reward)."""
    view.problems = problems
    results = {}
    for rule in RULES:
        if scope == "run" and rule.scope != "run":
            continue
        blocked = None if rule.blocked_by is None else rule.field_names(view, "blocked_by")
        results[rule.name] = problems.check(rule.check, view, fields=rule.field_names(view), blocked_by=blocked)
    return results
