"""The frozen plan of one run: :class:`RunPlan`, resolved by :func:`resolve_plan`, shown by its table (pure Python:
no torch, no TRL import).

:func:`resolve_plan` reproduces what TRL 1.16 and transformers 5 will really do with the TRL fields written by
:func:`trl_grpo_ext.plan.resolve.resolve_trl_fields` on a dataset of a given size. The arithmetic follows three
sources, read from the installed packages:

- ``trl/trainer/grpo_config.py`` ``GRPOConfig.__post_init__``: ``steps_per_generation`` defaults to
  ``gradient_accumulation_steps``; ``generation_batch_size = per_device_train_batch_size × world_size ×
  steps_per_generation`` [completions], divisible by G; setting both is an error; G >= 2.
- ``trl/trainer/utils.py`` ``RepeatSampler``: the permuted dataset is cut into chunks of
  ``generation_batch_size / G`` prompts, the last incomplete chunk is **dropped**, and each chunk is yielded
  ``num_iterations × steps_per_generation`` times, so one process sees
  ``floor(N / prompts_per_generation) × num_iterations × steps_per_generation`` micro-batches per epoch.
- ``transformers/trainer.py`` ``Trainer.set_initial_training_values``: optimizer steps per epoch =
  ``ceil(micro-batches per epoch / gradient_accumulation_steps)`` (at least 1); with ``max_steps <= 0`` the total is
  ``ceil(num_train_epochs × steps per epoch)`` (in float arithmetic: ``ceil(1.1 × 50) = 56``, not 55); ``max_steps > 0``
  always wins over ``num_train_epochs`` ("trl" stop semantics).

The plan is resolved once per run (the recipe, or `GRPOExtTrainer` for library users), saved as ``run_plan.json``
beside the run and every checkpoint, and rebuilt from that file with :meth:`RunPlan.read` (the model card, a resume).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from fractions import Fraction
from pathlib import Path

from ..config.checks import format_number
from .resolve import TRL_DEFAULTS, QuantityError, _as_int, _trl_generation_batch

__all__ = ["RunPlan", "resolve_plan", "confirm_plan", "format_plan_report"]

_SEMANTICS_TEXT = {"first_reached": "whichever limit is reached first", "trl": "TRL's rule: max_steps > 0 wins"}



@dataclass(frozen=True)
class RunPlan:
    """Every derived quantity of a run, resolved once; the trainer, ``trl-grpo-ext plan``, logs and model card read it.

    Units: prompts, completions, micro-batches, optimizer steps, tokens. ``None`` means unknown or unset.

    Attributes:
        dataset_size: prompts in the training set, or None (streaming / unknown: steps only).
        world_size: training processes.
        prompts_per_step: distinct prompts per optimizer step, all processes (a float when raw TRL fields give a
            fraction: a prompt group then spans optimizer steps).
        num_generations: G, completions per prompt.
        completions_per_step: micro_batch_size × world_size × gradient_accumulation_steps.
        micro_batch_size: completions per forward/backward on one device (TRL's per_device_train_batch_size).
        gradient_accumulation_steps: micro-batches per optimizer step on each process.
        steps_per_generation: micro-batches per process served from one generation batch.
        generation_batch_size: completions generated at once, all processes.
        prompts_per_generation: generation_batch_size / G (the sampler's chunk).
        generation_batches_per_epoch: floor(dataset_size / prompts_per_generation) (TRL drops the remainder).
        num_iterations: μ, policy updates per generation batch.
        steps_per_epoch: ceil(generation_batches_per_epoch × μ × steps_per_generation / gradient_accumulation_steps).
        step_limit: the step limit [optimizer steps] or None.
        epoch_limit: the epoch limit [passes] or None (with "trl" semantics and a step limit it is ignored).
        total_steps: optimizer steps the run will take (what the trainer's final global_step equals).
        epochs_covered: total_steps / steps_per_epoch, or None when the dataset size is unknown.
        stop_reason: "step_limit" or "epoch_limit" (a tie is reported as "step_limit").
        stop_semantics: "first_reached" (our fields) or "trl" (max_steps > 0 overrides num_train_epochs).
        max_completion_length: maximum tokens per completion.
        completions_total: completions_per_step × total_steps (through the loss; generated = this / μ; an upper
            bound when the last step of an epoch has fewer micro-batches).
        token_budget: completions_per_step × max_completion_length, max completion tokens per optimizer step.
        token_budget_total: token_budget × total_steps.
    """

    dataset_size: int | None
    world_size: int
    prompts_per_step: int | float
    num_generations: int
    completions_per_step: int
    micro_batch_size: int
    gradient_accumulation_steps: int
    steps_per_generation: int
    generation_batch_size: int
    prompts_per_generation: int
    generation_batches_per_epoch: int | None
    num_iterations: int
    steps_per_epoch: int | None
    step_limit: int | None
    epoch_limit: float | None
    total_steps: int
    epochs_covered: float | None
    stop_reason: str
    stop_semantics: str
    max_completion_length: int
    completions_total: int
    token_budget: int
    token_budget_total: int

    @property
    def epoch_limit_steps(self) -> int | None:
        """Optimizer steps the epoch limit is worth: ``ceil(epoch_limit × steps_per_epoch)`` (transformers' float
        arithmetic), or None when either is unknown."""
        if self.epoch_limit is None or self.steps_per_epoch is None:
            return None
        return math.ceil(self.epoch_limit * self.steps_per_epoch)

    @property
    def prompts_dropped_per_epoch(self) -> int | None:
        """Prompts left out of each epoch by the sampler (a different random set each epoch), or None if unknown."""
        return None if self.dataset_size is None else self.dataset_size % self.prompts_per_generation

    def to_dict(self) -> dict:
        """All fields as a JSON-serialisable dict (saved with a run and its checkpoints)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> RunPlan:
        """Rebuild a plan from :meth:`to_dict`'s output; raises QuantityError on missing or unknown keys."""
        names = {f.name for f in fields(cls)}
        missing, unknown = sorted(names - set(data)), sorted(set(data) - names)
        if missing or unknown:
            raise QuantityError(f"not a saved RunPlan: missing keys {missing}, unknown keys {unknown}; "
                                "save plans with RunPlan.to_dict() or to_json()")
        return cls(**data)

    def to_json(self) -> str:
        """The plan as indented JSON (``to_dict``): the content of ``run_plan.json``."""
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_json(cls, text: str) -> RunPlan:
        """Rebuild a plan from :meth:`to_json`'s output (equal to the plan that wrote it).

        Raises:
            QuantityError: not JSON, not an object, or missing/unknown keys (see :meth:`from_dict`).
        """
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise QuantityError(f"not a saved RunPlan: not JSON ({err}); save plans with RunPlan.to_json()") from None
        if not isinstance(data, dict):
            raise QuantityError(f"not a saved RunPlan: a JSON {type(data).__name__}, not an object; save plans with "
                                "RunPlan.to_json()")
        return cls.from_dict(data)

    @classmethod
    def read(cls, path: str | Path) -> RunPlan:
        """Rebuild the plan saved in ``path`` (a run's or a checkpoint's ``run_plan.json``), e.g. to show its table
        with :meth:`format_table` (the model card does).

        Raises:
            OSError: the file cannot be read. QuantityError: it holds no saved plan (see :meth:`from_json`).
        """
        return cls.from_json(Path(path).read_text(encoding="utf-8"))

    def _semantics_text(self) -> str:
        """How the stop conditions combine, as the plan table says it."""
        if self.stop_semantics == "trl" and self.step_limit is None:
            return "TRL's rule: max_steps ≤ 0, so num_train_epochs decides"
        return _SEMANTICS_TEXT[self.stop_semantics]

    def format_table(self) -> str:
        """A readable table: quantity, value with its unit, and the arithmetic that produced it (printed by the run
        when training starts and by ``trl-grpo-ext plan``, through :func:`format_plan_report`)."""
        g, w, ga, spg, mu = (self.num_generations, self.world_size, self.gradient_accumulation_steps,
                             self.steps_per_generation, self.num_iterations)
        pps = self.prompts_per_step
        pps_text = format_number(pps) if isinstance(pps, int) else f"{Fraction(self.completions_per_step, g)} (≈{pps:.3g})"
        procs = "1 process" if w == 1 else f"{w} processes"
        rows = [
            ("dataset", "unknown (steps only)" if self.dataset_size is None else f"{self.dataset_size} prompts", ""),
            ("processes", f"{w}", ""),
            ("prompts / step", f"{pps_text} prompts", f"= {self.completions_per_step} / {g}"),
            ("num_generations (G)", f"{g} completions/prompt", ""),
            ("completions / step", f"{self.completions_per_step} completions",
             f"= {self.micro_batch_size} × {w} × {ga} (micro-batch × processes × accumulation)"),
            ("micro-batch", f"{self.micro_batch_size} completions", "per device per forward/backward"),
            ("gradient accumulation", f"{ga} micro-batches",
             f"= {self.completions_per_step} / ({self.micro_batch_size} × {procs})"),
            ("generation batch", f"{self.generation_batch_size} completions",
             f"= {self.micro_batch_size} × {w} × {spg} (steps_per_generation) = {self.prompts_per_generation} prompts"),
            ("num_iterations (μ)", f"{mu}", "policy updates per generation batch"),
        ]
        if self.dataset_size is not None:
            n, pg = self.dataset_size, self.prompts_per_generation
            rows.append(("generation batches/epoch", f"{self.generation_batches_per_epoch}",
                         f"= floor({n} / {pg}), {self.prompts_dropped_per_epoch} prompt{'' if self.prompts_dropped_per_epoch == 1 else 's'} left out per epoch"))
            if spg == ga:
                arith = f"= floor({n} / {pg}) × {mu} = {self.steps_per_epoch}"
            else:
                arith = f"= ceil(floor({n} / {pg}) × {mu} × {spg} / {ga}) = {self.steps_per_epoch}"
            rows.append(("steps / epoch", f"{self.steps_per_epoch} steps", arith))
        rows.append(("step limit", "none" if self.step_limit is None else f"{self.step_limit} steps", ""))
        if self.epoch_limit is None:
            rows.append(("epoch limit", "none", ""))
        else:
            ignored = self.stop_semantics == "trl" and self.step_limit is not None
            if self.steps_per_epoch is None:
                arith = "not checkable without the dataset size"
            else:
                arith = f"= ceil({format_number(self.epoch_limit)} × {self.steps_per_epoch}) = {self.epoch_limit_steps} steps"
            if ignored:
                arith += " (ignored: TRL's max_steps > 0 wins)"
            rows.append(("epoch limit", f"{format_number(self.epoch_limit)} epochs", arith))
        if self.stop_semantics == "first_reached" and self.step_limit is not None and self.epoch_limit_steps:
            total_arith = f"= min({self.step_limit}, {self.epoch_limit_steps})"
        else:
            total_arith = ""
        rows += [
            ("total steps", f"{self.total_steps} steps",
             f"{total_arith} stopped by the {self.stop_reason.replace('_', ' ')} "
             f"({self._semantics_text()})".strip()),
            ("epochs covered", "unknown" if self.epochs_covered is None else f"{round(self.epochs_covered, 4)} epochs",
             "" if self.steps_per_epoch is None else f"= {self.total_steps} / {self.steps_per_epoch}"),
            ("completions total", f"{self.completions_total:,} completions",
             f"= {self.completions_per_step} × {self.total_steps} ({self.completions_total // mu:,} generated)"),
            ("token budget / step", f"{self.token_budget:,} tokens",
             f"= {self.completions_per_step} × {self.max_completion_length} (max_completion_length)"),
            ("token budget total", f"{self.token_budget_total:,} tokens", f"= {self.token_budget} × {self.total_steps}"),
        ]
        w1, w2 = max(len(r[0]) for r in rows), max(len(r[1]) for r in rows)
        lines = [f"{'quantity':<{w1}}  {'value':<{w2}}  arithmetic", f"{'-' * w1}  {'-' * w2}  {'-' * 10}"]
        lines += [f"{a:<{w1}}  {b:<{w2}}  {c}".rstrip() for a, b, c in rows]
        return "\n".join(lines)


def resolve_plan(fields: dict, dataset_size: int | None, world_size: int, max_completion_length: int) -> RunPlan:
    """Resolve the run plan from :func:`resolve_trl_fields`'s output (or a dict of TRL fields alone).

    Args:
        fields (`dict`): output of :func:`resolve_trl_fields` (absent TRL keys take :data:`TRL_DEFAULTS`; absent
            ``stop_semantics`` means ``"trl"``).
        dataset_size (`int` or `None`): prompts in the training set; None for a streaming/unknown dataset (then a
            step limit is required and the epoch limit cannot be evaluated).
        world_size (`int`): training processes; must be the one given to :func:`resolve_trl_fields`.
        max_completion_length (`int`): maximum tokens per completion (for the token budget).

    Returns:
        `RunPlan`: reproduces TRL 1.16's sampler and transformers' step count (see the module docstring).

    Raises:
        QuantityError: no step limit with an unknown dataset size; a dataset smaller than one generation batch
            (TRL would train 0 steps); a world_size other than the one the fields were resolved for; bad values.
    """
    f = {**TRL_DEFAULTS, "stop_semantics": "trl", "prompts_per_step": None, "total_training_steps": None,
         "total_epochs": None, **fields}
    w = _as_int("world_size", world_size, 1, "pass the number of training processes (1 for a single GPU)")
    if dataset_size is not None:
        dataset_size = _as_int("dataset_size", dataset_size, 0, "pass the number of prompts in the training set")
    mcl = _as_int("max_completion_length", max_completion_length, 1, "set the maximum tokens per completion, e.g. 512")
    g = _as_int("num_generations", f["num_generations"], 2, "set num_generations to 2 or more")
    mu = _as_int("num_iterations", f["num_iterations"], 1, "set num_iterations to 1 or more")
    micro = _as_int("per_device_train_batch_size", f["per_device_train_batch_size"], 1, "use a positive value")
    ga = _as_int("gradient_accumulation_steps", f["gradient_accumulation_steps"], 1, "use a positive value")
    for name in ("steps_per_generation", "generation_batch_size"):
        if f[name] is not None:
            _as_int(name, f[name], 1, "use a positive value or None")
    spg, gbs = _trl_generation_batch(micro, w, ga, f["steps_per_generation"], f["generation_batch_size"], g,
                                     allow_both=True)
    completions = micro * w * ga
    pps_frac = Fraction(completions, g)
    pps = int(pps_frac) if pps_frac.denominator == 1 else float(pps_frac)
    if f["prompts_per_step"] is not None and f["prompts_per_step"] != pps:
        raise QuantityError(
            f"world_size={w} gives {format_number(pps)} prompts per step, but the fields were resolved for "
            f"prompts_per_step={f['prompts_per_step']}: pass resolve_plan the world_size given to resolve_trl_fields")
    if f["stop_semantics"] == "first_reached":
        step_limit, epoch_limit = f["total_training_steps"], f["total_epochs"]
    elif f["stop_semantics"] == "trl":
        step_limit = f["max_steps"] if f["max_steps"] > 0 else None
        epoch_limit = float(f["num_train_epochs"]) if f["num_train_epochs"] > 0 else None
    else:
        raise QuantityError(f"stop_semantics={f['stop_semantics']!r} is not 'first_reached' or 'trl'; "
                            "pass the output of resolve_trl_fields")
    if step_limit is None and epoch_limit is None:
        raise QuantityError("no stop: neither a step limit nor an epoch limit is set; set total_training_steps or "
                            "total_epochs (or pass the output of resolve_trl_fields)")
    prompts_per_gen = gbs // g
    if dataset_size is None:
        if step_limit is None:
            raise QuantityError(
                "dataset size unknown (a dataset that was not read, such as a Hub dataset plan does not download, or "
                "one without a length, such as an IterableDataset) and no step limit: the number of steps cannot be "
                "planned; set total_training_steps (or max_steps), or use a dataset with a length (plan: give its size "
                "with --dataset-size N)")
        gen_batches = spe = epochs_covered = None
        total, reason = step_limit, "step_limit"
    else:
        gen_batches = dataset_size // prompts_per_gen
        if gen_batches == 0:
            raise QuantityError(
                f"dataset_size={dataset_size} prompts is smaller than one generation batch of {prompts_per_gen} "
                f"prompts: TRL's sampler drops the incomplete batch and would train 0 steps; use at least "
                f"{prompts_per_gen} prompts or lower prompts_per_step")
        spe = max(math.ceil(gen_batches * mu * spg / ga), 1)
        epoch_steps = None if epoch_limit is None else math.ceil(epoch_limit * spe)
        if step_limit is not None and (f["stop_semantics"] == "trl" or epoch_steps is None
                                       or step_limit <= epoch_steps):
            total, reason = step_limit, "step_limit"
        else:
            total, reason = epoch_steps, "epoch_limit"
        epochs_covered = total / spe
    return RunPlan(
        dataset_size=dataset_size, world_size=w, prompts_per_step=pps, num_generations=g,
        completions_per_step=completions, micro_batch_size=micro, gradient_accumulation_steps=ga,
        steps_per_generation=spg, generation_batch_size=gbs, prompts_per_generation=prompts_per_gen,
        generation_batches_per_epoch=gen_batches, num_iterations=mu, steps_per_epoch=spe, step_limit=step_limit,
        epoch_limit=epoch_limit, total_steps=total, epochs_covered=epochs_covered, stop_reason=reason,
        stop_semantics=f["stop_semantics"], max_completion_length=mcl, completions_total=completions * total,
        token_budget=completions * mcl, token_budget_total=completions * mcl * total,
    )


def confirm_plan(given: RunPlan | None, fields: dict, dataset_size: int | None, world_size: int,
                 max_completion_length: int) -> RunPlan:
    """The run's plan: ``given`` (resolved by the caller, e.g. the recipe before any model loaded) when it is the plan
    of these arguments, else :func:`resolve_plan`'s (for a caller who passed none). `GRPOExtTrainer` calls it.

    Args:
        given (`RunPlan`, *optional*): the caller's plan, or None.
        fields, dataset_size, world_size, max_completion_length: as :func:`resolve_plan` takes them.

    Raises:
        TypeError: ``given`` is not a `RunPlan` (a dict or JSON text: rebuild it with `RunPlan.from_json`).
        ValueError: ``given`` is not the plan of these arguments (the differing fields are named).
        QuantityError: see :func:`resolve_plan`.
    """
    if given is not None and not isinstance(given, RunPlan):
        raise TypeError(f"run_plan must be a RunPlan, got {type(given).__name__}. Fix: pass resolve_plan(...)'s result, "
                        "or RunPlan.read(path) / RunPlan.from_json(text) for a saved run_plan.json, or leave it unset.")
    plan = resolve_plan(fields, dataset_size, world_size, max_completion_length)
    if given is None or given == plan:
        return plan if given is None else given
    now = plan.to_dict()
    diff = "; ".join(f"{k}: {v} given, {now[k]} from the config and dataset"
                     for k, v in given.to_dict().items() if now[k] != v)
    raise ValueError(f"run_plan is not the plan of this config and train_dataset ({diff}). Fix: resolve it from the "
                     "same config and dataset (resolve_plan(args.resolved.quantity_fields(), len(train_dataset), "
                     "args.world_size, args.max_completion_length)), or leave run_plan unset.")


def seed_line(seed: int, embedded_seed: int | None = None) -> str:
    """The report's line naming the seeds: the run's, and an embedded task's (None: not an embedded task)."""
    line = f"seed: {seed} (prompt order, sampling, adapter initialisation)"
    return line + (f"; embedded_seed: {embedded_seed} (the embedded task's problems)" if embedded_seed is not None
                   else "")


def format_plan_report(plan: RunPlan, rewards: Sequence | None = None, notes: Sequence[str] = (),
                       evaluation=None) -> str:
    """What a run prints about its plan when training starts, and ``trl-grpo-ext plan`` before it: one function, so
    that both show the same text.

    Args:
        plan (`RunPlan`): the run's plan; its :meth:`RunPlan.format_table` comes first.
        rewards (sequence of `RewardSpec`, *optional*): the resolved rewards, as one ``rewards: ...`` line
            (`trl_grpo_ext.rewards.spec.format_reward_specs`); None or empty: no line.
        notes (sequence of `str`): lines printed after the rewards (the run prints the resample note there).
        evaluation (`EvalPlan`, *optional*): the evaluation plan, as an ``evaluation:`` block of its
            ``format_lines()``.

    Returns:
        `str`: the lines joined by newlines (no trailing newline).
    """
    lines = [plan.format_table()]
    if rewards:
        from ..rewards.spec import format_reward_specs

        lines.append(format_reward_specs(rewards))
    lines += list(notes)
    if evaluation is not None:
        lines.append("evaluation:\n  " + "\n  ".join(evaluation.format_lines()))
    return "\n".join(lines)
