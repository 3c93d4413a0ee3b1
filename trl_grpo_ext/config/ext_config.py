"""`GRPOExtConfig`: TRL's `GRPOConfig` with the quantities of a run in the units people think in. Config flows one way
(docs/architecture.md): YAML + CLI -> `__post_init__` (resolve into ``config.resolved``, write TRL's fields from it)
-> `super().__post_init__()` -> `GRPOExtTrainer`; `resolve_config` (pure) resolves for `GRPOExtConfig` and `plan` alike."""

from __future__ import annotations

import dataclasses
import json
import warnings
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field, fields
from typing import Annotated, Any, NewType

from trl import GRPOConfig

from ..models.settings import bf16_available, check_fp16_machine, gpu_available
from ..plan.resolve import _INPUT_FIELDS, NO_STEP_LIMIT_FIX, RAW_BATCH_FIELDS, RAW_STOP_FIELDS, resolve_trl_fields
from ..rewards.guard import REWARD_ERROR_POLICIES
from ..rewards.spec import RewardSpec, parse_reward_specs
from ..zero_variance.settings import ROLLOUT_BUDGETS, ZERO_VARIANCE_SIGNALS, ZeroVarianceSettings
from .advantage_settings import (
    BASELINES,
    EPSILON_RANGE,
    PRESETS,
    STD_KINDS,
    STD_SCALINGS,
    AdvantageSettings,
    resolve_advantage_settings,
)
from .advantage_settings import FIELDS as ADVANTAGE_FIELDS
from .checks import Choices, IneffectiveSettingWarning, Range, choice_from_yaml, declared_checks, world_size_from_env
from .engines import resolve_engine

ZERO_VARIANCE_MODES = ("off", "mask", "resample", "skip")
ADAPTER_DTYPES = ("float32", "bfloat16")
MEMORY_PROBE_MODES = ("auto", "on", "off")

#: One item of `rewards` as the user gave it: a registry name or import path (`str`, also a JSON object as a string on
#: the command line), or a mapping ``{name, weight, kwargs}`` (`dict`, from YAML). A `NewType` because the argument
#: parser calls a list field's item type on every command-line word: this one returns the word unchanged.
RewardEntry = NewType("RewardEntry", str | dict)


def _help(default: Any, text: str) -> Any:
    return field(default=default, metadata={"help": text})


@dataclass(frozen=True)
class ResolvedConfig:
    """What a config's fields resolve to (also ``run_config.json``'s ``"resolved"``): the ``world_size`` resolved for;
    our batch and stop fields (None when TRL's give them) and TRL's as written (`plan.resolve_trl_fields`); the
    `AdvantageSettings` with TRL's ``scale_rewards`` / ``loss_type``; the registry ``rewards`` and TRL's
    ``reward_weights`` (None with ``reward_funcs=``); the `ZeroVarianceSettings` (with the canonical judged reward)."""

    world_size: int
    prompts_per_step: int | None
    micro_batch_size: int | None
    total_training_steps: int | None
    total_epochs: float | None
    per_device_train_batch_size: int
    gradient_accumulation_steps: int
    steps_per_generation: int | None
    generation_batch_size: int | None
    max_steps: int
    num_train_epochs: float
    num_generations: int
    num_iterations: int
    stop_semantics: str
    advantages: AdvantageSettings
    scale_rewards: str
    loss_type: str
    rewards: tuple[RewardSpec, ...] | None
    reward_weights: tuple[float, ...] | None
    zero_variance: ZeroVarianceSettings | None = None

    def quantity_fields(self) -> dict[str, Any]:
        """The quantity fields, as `plan.resolve_plan` takes them."""
        return {name: getattr(self, name) for name in (*_INPUT_FIELDS, "stop_semantics")}

    def trl_fields(self) -> dict[str, Any]:
        """TRL's own batch, stop and advantage fields to write into the config."""
        names = (*RAW_BATCH_FIELDS, *RAW_STOP_FIELDS, "num_generations", "num_iterations", "scale_rewards", "loss_type")
        return {name: getattr(self, name) for name in names}


def resolve_config(config: Any, world_size: int) -> ResolvedConfig:
    """Resolve the quantity fields (ours and TRL's raw batch/stop fields), the advantage fields (ours and TRL's
    ``scale_rewards`` / ``loss_type``, whose TRL defaults count as unset) and the rewards (ours and TRL's
    ``reward_weights``) of ``config`` (a `GRPOExtConfig`, or `plan`'s twin of it) for ``world_size`` processes.

    Raises:
        QuantityError, AdvantageConfigError, ValueError (rewards): invalid or conflicting values."""
    quantities = resolve_trl_fields({k: getattr(config, k) for k in _INPUT_FIELDS}, world_size)
    advantages, advantage_trl_fields = resolve_advantage_settings(
        preset=config.advantage_preset, **{name: getattr(config, name) for name in (*ADVANTAGE_FIELDS[1:], "loss_type")},
        defaults=_TRL_DEFAULTS)
    rewards = reward_weights = None
    if config.rewards is not None:
        specs = parse_reward_specs(config.rewards, config.reward_weights)
        rewards, reward_weights = tuple(specs), tuple(spec.weight for spec in specs)
    elif config.reward_weights is not None:  # weights for reward functions passed to the trainer (`reward_funcs=`)
        reward_weights = tuple(config.reward_weights)
    return ResolvedConfig(world_size=world_size, **quantities, advantages=advantages, **advantage_trl_fields,
                          rewards=rewards, reward_weights=reward_weights)


@dataclass
class GRPOExtConfig(GRPOConfig):
    """Configuration of [`GRPOExtTrainer`]: every field of TRL's `GRPOConfig`, plus ours (types, defaults, units
    and valid values: docs/configuration.md, generated from these declarations).

    Attributes set by `__post_init__`:
        resolved (`ResolvedConfig`): what the fields resolve to; TRL's own fields are written from it; in `to_dict()`.
        run_plan (`RunPlan`, *optional*): set by the trainer when training starts; in `to_dict()`."""

    # Quantities
    prompts_per_step: Annotated[int | None, Range(low=1, integer=True, fix="use e.g. prompts_per_step: 4.")] = _help(
        None, "Distinct prompts per optimizer step across all processes [prompts].")
    micro_batch_size: Annotated[int | None, Range(low=1, integer=True, fix="use e.g. micro_batch_size: 8.")] = _help(
        None, "Completions per forward/backward pass on one device [completions].")
    total_training_steps: Annotated[int | None, Range(low=1, integer=True, fix=NO_STEP_LIMIT_FIX)] = _help(
        None, "Hard stop [optimizer steps]; with total_epochs, the first reached stops.")
    total_epochs: Annotated[float | None, Range(low=0, low_open=True, fix="use a positive number of passes (e.g. 1, "
                                                "2.5), or remove it.")] = _help(
        None, "Fallback stop [passes over the prompts]; fractions allowed.")
    # Advantages
    advantage_preset: Annotated[str | None, Choices(tuple(PRESETS))] = _help(
        None, "Published variant setting the advantage fields: grpo, dr_grpo, rloo, ...")
    advantage_baseline: Annotated[str | None, Choices(BASELINES)] = _help(
        None, "Baseline: group_mean (GRPO) or leave_one_out (RLOO). Default group_mean.")
    advantage_std_scaling: Annotated[str | None, Choices(STD_SCALINGS)] = _help(
        None, "Std scaling: group, batch or none (one truth with scale_rewards).")
    advantage_epsilon: Annotated[float | None, EPSILON_RANGE] = _help(
        None, "Epsilon added to the std before dividing. Default 1e-4 (TRL's).")
    advantage_std_kind: Annotated[str | None, Choices(STD_KINDS)] = _help(
        None, "sample (unbiased, TRL's) or population standard deviation.")
    # Zero-variance groups
    zero_variance_filter: Annotated[str, Choices(ZERO_VARIANCE_MODES)] = _help(
        "off", "off (TRL's behaviour), mask, resample (DAPO dynamic sampling) or skip (skip prompts predicted uniform "
        "before rollout, GRESO).")
    zero_variance_tolerance: Annotated[float, Range(low=0, fix="use 0 or a small spread such as 1e-6.")] = _help(
        0.0, "A group is uniform when its rewards are equal or their std is at most this.")
    zero_variance_reward: str | None = _help(
        None, "Reward function that decides which groups are uniform (e.g. accuracy): the filter's and the logged "
        "causes'; unset: the weighted total.")
    max_resample_rounds: Annotated[int, Range(low=1, integer=True, fix="use e.g. 3 (0 rounds would be "
                                              "zero_variance_filter: mask; set that instead).")] = _help(
        3, "Extra generation rounds per step in resample mode (bounded).")
    skip_exploration_probability: Annotated[float, Range(low=0, high=1, low_open=True, high_open=True, fix="e.g. 0.25 "
                                                         "(1 would skip nothing: use zero_variance_filter: mask).")] = _help(
        0.25, "skip mode: a prompt uniform at its last k rollouts is rolled out with probability p^k.")
    skip_history_file: str | None = _help(
        None, "skip mode: an `eval --split train --k K --output FILE` result (K >= num_generations); a prompt whose K "
        "samples' rewards were uniform starts as after one uniform rollout, so skipping acts from the first epoch.")
    zero_variance_signal: Annotated[str, Choices(ZERO_VARIANCE_SIGNALS)] = _help(
        "off", "off, or entropy: all-right / all-wrong uniform groups stay in the loss, each token's advantage "
        "±coef scaled by its entropy (RL-ZVP); tied and cut groups stay masked.")
    zero_variance_signal_coef: Annotated[float, Range(low=0, low_open=True, fix="use e.g. 0.1.")] = _help(
        0.1, "zero_variance_signal: the largest |advantage| a uniform group's token gets (alpha).")
    rollout_budget: Annotated[str, Choices(ROLLOUT_BUDGETS)] = _help(
        "uniform", "uniform (G completions per prompt) or adaptive: G/2 per prompt first, the rest of the step's "
        "prompts x G where they most raise the chance of a non-zero gradient (Knapsack RL's value: hard, not hopeless "
        "prompts), none more to those solved.")
    # Rewards
    rewards: list[RewardEntry] | None = _help(
        None, "Reward functions by registry name; in YAML each item may be {name, weight, kwargs}.")
    reward_error_policy: Annotated[str, Choices(REWARD_ERROR_POLICIES)] = _help(
        "raise", "raise (fail the step) or none (treat a bad reward value as missing).")
    # Adapter precision
    adapter_dtype: Annotated[str, Choices(ADAPTER_DTYPES)] = _help(
        "float32", "Trainable adapter weights on a quantized model: float32 or bfloat16.")
    lost_update_steps: Annotated[int, Range(low=0, integer=True, fix="use 0 (off) or e.g. 10.")] = _help(
        0, "Measure the lost-update fraction every N optimizer steps (0 = off).")
    lost_update_warning_threshold: Annotated[float, Range(low=0, high=1, fix="use e.g. 0.2.")] = _help(
        0.2, "Warn when the lost-update fraction exceeds this.")
    # Generation
    allow_vllm_4bit_merge: bool = _help(
        False, "Let use_vllm run on a 4-bit base (its sync re-quantizes the base); logs vllm/base_drift.")
    merge_adapter_for_generation: bool = _help(
        False, "Merge the LoRA adapter into the float32 base for each generation (one matrix product per layer "
        "instead of three; the base is restored exactly after).")
    # Memory
    memory_probe: Annotated[str, Choices(MEMORY_PROBE_MODES)] = _help(
        "auto", "Longest-first probe before step 1 (one generation batch at full length, one forward + backward of a "
        "full micro-batch at the maximum lengths): auto (on for a GPU run), on or off.")

    def __post_init__(self):
        for name, check in _FIELD_CHECKS.items():  # a YAML 1.1 boolean (`zero_variance_filter: off`) as meant
            if isinstance(check, Choices):
                setattr(self, name, choice_from_yaml(getattr(self, name), check.values))
        world_size = world_size_from_env()
        self.resolved: ResolvedConfig = resolve_config(self, world_size)
        for name, value in self.resolved.trl_fields().items():
            setattr(self, name, value)
        if self.reward_weights is None and self.resolved.rewards is not None:  # the user's own list is kept as given
            self.reward_weights = list(self.resolved.reward_weights)
        if self.bf16 is None:  # TRL would default to True; choose what this machine supports
            self.bf16 = bf16_available() and not self.use_cpu and not self.fp16
        checked = FRONT_DOOR_CHECKED.get()  # built by the front door, which checked these values: each check once
        canonical = self._check(world_size) if checked is None else checked.get("zero_variance")
        self.resolved = dataclasses.replace(self.resolved, zero_variance=ZeroVarianceSettings.from_values(
            self, zero_variance_reward=canonical))
        for old, new in (("gradient_checkpointing", "activation_checkpointing"),  # transformers 5.24's names: TRL's
                         ("gradient_checkpointing_kwargs", "activation_checkpointing_kwargs")):  # default then never
            if getattr(self, new, False) is None and getattr(self, old) is not None:  # warns of a key not written
                setattr(self, new, getattr(self, old))
        from ..validation.engines import check_engine_device

        check_engine_device(resolve_engine(vars(self)), gpu_available())  # before TRL sets up the devices
        super().__post_init__()

    def _check(self, world_size: int) -> str | None:
        """For a config built in Python: the checks each field declares, TRL's and transformers' ranges (a learning
        rate of 0 allowed) and the rules of scope ``"run"`` (`validation.rules.RULES`) on this config's values and
        resolved batch; returns the `zero_variance` rule's canonical judged reward."""
        from ..validation.problems import Problems
        from ..validation.rules import RunView, run_rules
        from ..validation.tables import TRL_CHOICES, TRL_RANGES

        ranges = {**{name: TRL_RANGES[name] for name in _DEFAULTS.keys() & TRL_RANGES.keys()},
                  # TRL reads these only in its trainer or loss (transformers refuses a bad strategy itself)
                  **{name: Choices(TRL_CHOICES[name]) for name in ("loss_type", "multi_objective_aggregation",
                                                                   "importance_sampling_level")},
                  **_FIELD_CHECKS, "learning_rate": Range(low=0, fix="QLoRA GRPO typically uses 1e-5 to 1e-4.")}
        for name, check in ranges.items():
            if getattr(self, name) is not None:
                check.check(name, getattr(self, name))
        check_fp16_machine(self.fp16, self.use_cpu)  # (bf16 on this machine: transformers' __post_init__ refuses it)
        view = RunView(vars(self), None, world_size, batch=self.resolved.quantity_fields(), defaults=_DEFAULTS)
        problems = Problems()
        results = run_rules(view, problems, scope="run")
        problems.raise_if_any(ValueError)
        for line in problems.warnings:  # listed together, once (the front door lists them itself)
            warnings.warn(line, IneffectiveSettingWarning, stacklevel=4)
        return results.get("zero_variance")

    def quantity_fields(self) -> dict[str, Any]:
        """Deprecated (removed in 0.3.0): ``config.resolved.quantity_fields()``."""
        warnings.warn("GRPOExtConfig.quantity_fields() is deprecated and will be removed in trl-grpo-ext 0.3.0: use "
                      "config.resolved.quantity_fields().", FutureWarning, stacklevel=2)
        return self.resolved.quantity_fields()

    def to_dict(self) -> dict[str, Any]:
        """`TrainingArguments.to_dict`, plus ``resolved`` and ``run_plan`` (once the trainer set it): what the trackers
        log and ``run_config.json`` holds."""
        values = {**super().to_dict(), "resolved": asdict(self.resolved)}
        if getattr(self, "run_plan", None) is not None:
            values["run_plan"] = json.loads(self.run_plan.to_json())
        return values


#: field -> the `Range` or `Choices` our fields declare on their ``Annotated`` types.
_FIELD_CHECKS: dict[str, Any] = {name: checks["range"] if "range" in checks else Choices(checks["choices"])
                                 for name, checks in declared_checks(GRPOExtConfig).items()}


_DEFAULTS = {f.name: f.default for f in fields(GRPOExtConfig)}
#: TRL 1.16's defaults of ``scale_rewards`` and ``loss_type`` (an ``advantage_preset`` may write them).
_TRL_DEFAULTS = {f.name: f.default for f in fields(GRPOConfig) if f.name in ("scale_rewards", "loss_type")}
#: Set by the front door (`frontdoor.read_run_args`) while it builds the real classes of values it has checked: the
#: rules' results (``"zero_variance"``: the canonical judged reward), so that `__post_init__` checks nothing again.
FRONT_DOOR_CHECKED: ContextVar[dict | None] = ContextVar("FRONT_DOOR_CHECKED", default=None)
