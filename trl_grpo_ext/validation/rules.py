"""Every cross-field rule of a run in one table, :data:`RULES` (one `tables.Rule` each), run on the same values by
`plan` and the recipe (`user_values.validate_run_args`, after the single values) and by `GRPOExtConfig.__post_init__`
(the rules of scope ``"run"``). A rule reads a :class:`RunView`; a refusal is one line naming the fields, the values
and a fix; a setting without effect is a warning (`RunView.warn`), listed once with the others."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from typing import Any

from ..config.advantage_settings import FIELDS as ADVANTAGE_FIELDS
from ..config.advantage_settings import is_explicit
from ..config.checks import RunArgumentError, as_number, shown
from ..config.engines import resolve_engine
from ..config.push_settings import check_push_settings
from ..zero_variance import settings as zero_variance_settings
from . import engines, generation, lora, packages, rewards, trainer_settings
from .problems import Problems
from .tables import NEEDS, Rule, both, enum_value, evaluates, set_of


class RunView:
    """The values a rule reads: ``values`` (every field), ``user`` (the keys the user set; None for a config built in
    Python, judged against ``defaults``), ``world_size``, ``batch`` (TRL's batch fields as resolved; else resolved from
    the user's keys), ``engine`` (of an accelerate config), ``problems`` (the collector), ``check_model`` (read the
    model's module names)."""

    def __init__(self, values: Mapping[str, Any], user: Mapping[str, Any] | None = None, world_size: int = 1, *,
                 batch: dict | None = None, engine=None, problems=None, defaults: Mapping[str, Any] | None = None,
                 check_model: bool = True):
        self.values, self.user, self.world_size = values, user, world_size
        self._batch, self.engine, self.problems = batch, engine, problems
        self.defaults, self.check_model = defaults or {}, check_model

    def get(self, name: str, default: Any = None) -> Any:
        return enum_value(self.values.get(name, default))

    def __getitem__(self, name: str) -> str:
        """The value of ``name`` as a message shows it (a rule's ``{name}``)."""
        return shown(self.get(name))

    def warn(self, line: str) -> None:
        """A setting without effect: listed with the run's other warnings, not refused."""
        self.problems.warn(line)

    def is_set(self, name: str) -> bool:
        return self.set_keys.get(name) is not None

    @cached_property
    def set_keys(self) -> Mapping[str, Any]:
        """The keys the user set: ``user``, or for a config built in Python the fields not at their default."""
        if self.user is not None:
            return self.user
        return {k: v for k, v in self.values.items() if is_explicit(k, v, self.defaults)}

    @cached_property
    def batch(self) -> dict:
        """TRL's batch and stop fields (``per_device_train_batch_size``, ...). Raises RunArgumentError: invalid or
        conflicting quantities among the user's keys."""
        if self._batch is not None:
            return self._batch
        from ..plan.resolve import QuantityError, resolve_trl_fields
        from .tables import typed_value

        given = {k: typed_value(self.user[k]) for k in self.quantity_keys()}
        try:
            return resolve_trl_fields(given, self.world_size, set_fields=set(given))
        except QuantityError as err:
            raise RunArgumentError(str(err)) from None

    @property
    def specs(self) -> list:
        """`rewards.reward_specs` of the run. Raises ValueError: a misspelt name or parameter."""
        return rewards.reward_specs(self.values)

    @cached_property
    def reward_names(self) -> list[str] | None:
        """The names of the run's registry rewards (None: none, or ``reward_funcs=``)."""
        try:
            return [spec.name for spec in self.specs] or None
        except ValueError:  # the `reward_specs` rule reports it
            return None

    def quantity_keys(self) -> tuple[str, ...]:
        """The quantity fields (ours and TRL's batch/stop fields) the user set."""
        from ..plan.resolve import _INPUT_FIELDS

        return tuple(k for k in (self.user or {}) if k in _INPUT_FIELDS and self.user[k] is not None)


def advantage_conflicts(v: RunView) -> None:
    """The advantage preset, ``scale_rewards``, ``loss_type`` and our advantage fields: conflicts between set keys."""
    from ..config.advantage_settings import AdvantageConfigError, resolve_advantage_settings

    user = v.user or {}
    scale_set, epsilon = user.get("scale_rewards") is not None, user.get("advantage_epsilon")
    try:
        resolve_advantage_settings(
            preset=user.get("advantage_preset"), scale_rewards=user["scale_rewards"] if scale_set else "group",
            advantage_epsilon=as_number(epsilon) if epsilon is not None else None,
            **{name: user.get(name) for name in ("advantage_baseline", "advantage_std_scaling",
                                                 "advantage_std_kind", "loss_type")},
            defaults={"scale_rewards": None if scale_set else "group"})  # a set key is explicit whatever its value
    except AdvantageConfigError as err:
        raise RunArgumentError(str(err)) from None


def chat_template(v: RunView) -> None:
    """``chat_template`` must parse as Jinja (TRL renders it at the first generation, after the model loads); one
    without Jinja (``chatml``, a template's name in other tools' configs) renders every prompt as that text."""
    template = v.get("chat_template")
    if not isinstance(template, str) or not template:
        return
    import jinja2

    try:
        jinja2.Environment().parse(template)
    except jinja2.TemplateSyntaxError as err:
        raise RunArgumentError(f"chat_template is not a valid Jinja template ({err.message}, line {err.lineno}). Fix: "
                               "close every {{ ... }} and {% ... %} in it, or remove chat_template.") from None
    if "{{" not in template and "{%" not in template:
        v.warn(f"chat_template={template!r} has no Jinja in it, so every prompt would render as that text. Fix: give "
               "a Jinja template that reads messages, or remove chat_template to use the tokenizer's own.")


def clipping(v: RunView) -> None:
    """Clip settings that never act, every update being on-policy (`loss_settings.ignored_clipping`): a warning."""
    from ..config.loss_settings import ignored_clipping

    b = v.batch
    ga, spg, gbs = b["gradient_accumulation_steps"], b.get("steps_per_generation"), b.get("generation_batch_size")
    if spg is None and gbs:  # TRL derives it from the generation batch
        spg = gbs // (b["per_device_train_batch_size"] * v.world_size)
    message = ignored_clipping({name: as_number(v.values.get(name)) for name in set_of(_CLIP)(v)},
                               loss_type=v.get("loss_type") or "dapo", gradient_accumulation_steps=ga,
                               steps_per_generation=spg or ga, num_iterations=b["num_iterations"])
    if message:
        v.warn(message)


def reward_columns(v: RunView) -> None:
    columns = rewards.known_columns(v.values)
    if columns is not None:
        rewards.check_reward_columns(columns, v.specs)


_CLIP = ("epsilon", "epsilon_high", "delta")
_LORA = ("lora_target_modules", "lora_modules_to_save")
_REWARDS = ("rewards", "reward_weights")
_engine = lambda v: resolve_engine(v.values, accelerate_config=v.engine)  # noqa: E731

#: Every rule, in the order they run.
RULES: tuple[Rule, ...] = (
    both("load_in_4bit", "load_in_8bit", "choose one quantisation: load_in_4bit (QLoRA, NF4) or load_in_8bit."),
    both("use_peft", "sync_ref_model", "remove sync_ref_model: with PEFT the reference is the base with the adapter "
          "off, which TRL cannot sync (it raises after loading the model)."),
    Rule("quantity_conflicts", RunView.quantity_keys, check=lambda v: v.batch, scope="args"),
    Rule("advantage_conflicts", set_of((*ADVANTAGE_FIELDS, "loss_type")), check=advantage_conflicts, scope="args"),
    *NEEDS,
    # rules between values
    Rule("evaluation_split", ("eval_strategy", "final_eval", "dataset_test_split"),
         lambda v: (evaluates(v) or v.get("final_eval") not in (None, "none")) and not v.get("dataset_test_split"),
         "eval_strategy={eval_strategy} and final_eval={final_eval} evaluate on a test split, but dataset_test_split="
         "{dataset_test_split}. Fix: set dataset_test_split: <split of dataset_name> (e.g. test), or eval_strategy: "
         "no and final_eval: none.", scope="args"),
    Rule("chat_template", ("chat_template",), check=chat_template, scope="args"),
    Rule("compare_base_adapter", ("final_eval", "use_peft"),
         lambda v: v.get("final_eval") == "compare_base" and not v.get("use_peft"),
         "final_eval=compare_base needs an adapter to switch off (use_peft: true); with use_peft: false set "
         "final_eval: adapter (the trained model alone) or none.", scope="args"),
    Rule("cpu_bf16_on_float16", ("dtype", "bf16", "use_cpu"),
         lambda v: v.get("use_cpu") and v.get("bf16") is True and v.get("dtype") == "float16",
         "dtype='float16' with bf16=True and use_cpu=True: torch's CPU autocast cannot run bf16 over float16 weights, "
         "and the run would fail at its first step. Fix: --dtype float32 (or bfloat16) with bf16: true, or --bf16 false.",
         scope="args"),
    Rule("push_needs_adapter", ("push_to_hub_mode", "push_to_hub", "use_peft"),
         check=lambda v: check_push_settings(v, adapter=True), scope="args"),
    Rule("push_needs_repository", ("push_to_hub_mode", "push_to_hub", "hub_repo_id", "hub_model_id"),
         check=lambda v: check_push_settings(v, adapter=False), scope="args"),
    Rule("quantized_needs_adapter", lambda v: (*(n for n in ("load_in_4bit", "load_in_8bit") if v.get(n)), "use_peft"),
         check=lambda v: lora.check_quantized_has_adapter(v.values), scope="args",
         blocked_by=("load_in_4bit", "load_in_8bit", "use_peft")),
    Rule("reward_specs", _REWARDS, check=lambda v: v.specs, scope="args"),
    Rule("clipping", lambda v: (*set_of(_CLIP)(v), "num_iterations"), check=lambda v: set_of(_CLIP)(v) and clipping(v),
         blocked_by=lambda v: (*set_of(_CLIP)(v), *v.quantity_keys(), "loss_type")),
    Rule("zero_variance", ("zero_variance_filter", "zero_variance_reward", "skip_history_file"),
         check=lambda v: zero_variance_settings.check_zero_variance_settings(v),
         blocked_by=lambda v: ("zero_variance_filter", "zero_variance_reward", "multi_objective_aggregation",
                               *_REWARDS, *v.quantity_keys())),
    Rule("generation", ("cache_implementation", "generation_kwargs"), check=generation.check_generation_settings),
    Rule("vllm_quantization", ("use_vllm", "load_in_4bit", "load_in_8bit"), check=generation.check_vllm_settings),
    Rule("reward_packages", check=lambda v: rewards.check_reward_packages(v.specs), blocked_by=_REWARDS, scope="args"),
    Rule("reward_columns", ("embedded_target",), check=reward_columns,
         blocked_by=(*_REWARDS, "embedded_target", "dataset_name", "dataset_format"), scope="args"),
    # flash-attn, vLLM, Liger, the trackers: before the model, not after (each missing package a line of its own)
    Rule("run_packages", check=lambda v: packages.check_run_packages(v.values, v.problems), blocked_by=(),
         scope="args"),
    Rule("merged_generation", ("merge_adapter_for_generation",),
         check=lambda v: generation.check_merged_generation(v.values, _engine(v)),
         blocked_by=("merge_adapter_for_generation", "use_peft", "lora_dropout", "dtype", "model_init_kwargs"),
         scope="args"),
    Rule("engine_settings", ("deepspeed", "fsdp", "fsdp_config"),
         check=lambda v: engines.check_engine_settings(_engine(v), v.values)),
    Rule("lora_targets", _LORA, check=lambda v: v.get("use_peft") and lora.check_lora_targets(v.values, v.check_model),
         blocked_by=(*_LORA, "use_peft", "model_name_or_path", "model_revision"), scope="args"),
    Rule("rewards_set", ("rewards",), check=lambda v: rewards.check_rewards_set(v.values), scope="args"),
    Rule("reward_weights", _REWARDS, check=lambda v: rewards.check_some_weight(v.specs), scope="args"),
    Rule("trainer_settings", check=lambda v: trainer_settings.check_trainer_settings(v.values, v.problems),
         blocked_by=trainer_settings.TRAINER_FIELDS, scope="args"),
    Rule("batch_dispatch", ("accelerator_config",),
         check=lambda v: trainer_settings.check_batch_dispatch(v.values, v.problems)),
    Rule("continued_adapter", ("model_name_or_path", "use_peft", "output_dir"),
         check=lambda v: trainer_settings.check_continued_adapter(v.values), scope="args",
         blocked_by=("model_name_or_path", "output_dir")),
)


def run_rules(view: RunView, problems: Problems, scope: str = "args") -> dict[str, Any]:
    """Run :data:`RULES` (with ``scope="run"``: those of scope "run") on ``view``, recording each problem in
    ``problems``; a rule reading a field already refused is skipped. Returns each rule's result by name
    (``"zero_variance"``: the canonical judged reward)."""
    view.problems = problems
    results = {}
    for rule in RULES:
        if scope == "args" or rule.scope == "run":
            blocked = None if rule.blocked_by is None else rule.field_names(view, "blocked_by")
            results[rule.name] = problems.check(rule, view, fields=rule.field_names(view), blocked_by=blocked)
    return results
