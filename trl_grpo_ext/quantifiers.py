"""Quantities of a GRPO run, resolved once into a frozen :class:`RunPlan` (pure Python: no torch, no TRL import).

Users state a run in the units they think in (``docs/quantifiers.md``, ``GLOSSARY.md``):

- ``prompts_per_step`` [prompts]: distinct prompts per optimizer step, summed over all processes;
- ``num_generations`` (G) [completions per prompt]: TRL's own field, the group size;
- ``micro_batch_size`` [completions]: completions per forward/backward pass on one device;
- ``total_training_steps`` [optimizer steps]: the hard stop;
- ``total_epochs`` [passes over the prompts, fractions allowed]: the fallback stop.

When both limits are set, whichever is reached first stops the run ("first_reached"). :func:`resolve_trl_fields`
turns them into TRL's own fields (``per_device_train_batch_size``, ``gradient_accumulation_steps``, ``max_steps``,
``num_train_epochs``, ...); :func:`resolve_plan` reproduces what TRL 1.16 and transformers 5 will really do with those
fields on a dataset of a given size. The arithmetic follows three sources, read from the installed packages:

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

Bad input raises :class:`QuantityError` (a ``ValueError``) naming the field, the value and a fix.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import asdict, dataclass, fields
from fractions import Fraction

__all__ = [
    "QuantityError",
    "TRL_DEFAULTS",
    "RunPlan",
    "resolve_trl_fields",
    "resolve_plan",
    "plan_warnings",
    "check_resume_compatible",
]


class QuantityError(ValueError):
    """A run quantity is invalid or conflicts with another; the message names the field(s), the value and a fix."""


#: Defaults of ``trl.GRPOConfig`` (TRL 1.16) for the fields this module reads; a raw TRL field counts as "set" when
#: its value differs from these. tests/test_quantifiers_trl_defaults.py pins them to ``trl.GRPOConfig``.
TRL_DEFAULTS: dict = {
    "per_device_train_batch_size": 8,
    "gradient_accumulation_steps": 1,
    "max_steps": -1,
    "num_train_epochs": 3.0,
    "generation_batch_size": None,
    "steps_per_generation": None,
    "num_generations": 8,
    "num_iterations": 1,
    "max_completion_length": 512,
}

#: Our fields, by the group of raw TRL fields they replace.
OUR_BATCH_FIELDS = ("prompts_per_step", "micro_batch_size")
OUR_STOP_FIELDS = ("total_training_steps", "total_epochs")
RAW_BATCH_FIELDS = ("per_device_train_batch_size", "gradient_accumulation_steps", "generation_batch_size",
                    "steps_per_generation")
RAW_STOP_FIELDS = ("max_steps", "num_train_epochs")
_INPUT_FIELDS = (*OUR_BATCH_FIELDS, *OUR_STOP_FIELDS, *RAW_BATCH_FIELDS, *RAW_STOP_FIELDS, "num_generations",
                 "num_iterations")

#: ``micro_batch_size`` chosen when only ``prompts_per_step`` is given: the largest divisor of the completions per
#: step on one process that is at most this (TRL's default ``per_device_train_batch_size``).
DEFAULT_MICRO_BATCH_CAP = 8

# --------------------------------------------------------------------------------------------------------------------
# small validators
# --------------------------------------------------------------------------------------------------------------------


def _as_int(name: str, value, minimum: int, fix: str) -> int:
    """Return ``value`` as an int >= ``minimum`` (integral floats such as ``4.0`` accepted), else raise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise QuantityError(f"{name}={value!r} must be a whole number >= {minimum}; {fix}")
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise QuantityError(f"{name}={value!r} must be a whole number >= {minimum}; {fix}")
    if value < minimum:
        raise QuantityError(f"{name}={value!r} must be >= {minimum}; {fix}")
    return int(value)


def _as_float(name: str, value, fix: str, positive: bool) -> float:
    """Return ``value`` as a finite float (> 0 when ``positive``), else raise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise QuantityError(f"{name}={value!r} must be a finite number; {fix}")
    if positive and value <= 0:
        raise QuantityError(f"{name}={value!r} must be > 0; {fix}")
    return float(value)


def _divisors(n: int) -> list[int]:
    """All positive divisors of ``n`` in increasing order."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _near_multiples(value: int, step: int) -> str:
    """The multiples of ``step`` nearest to ``value`` (one below if positive, one above), e.g. ``"12 or 16"``."""
    below, above = (value // step) * step, (value // step + 1) * step
    return f"{below} or {above}" if below > 0 else f"{above}"


_SEMANTICS_TEXT = {"first_reached": "whichever limit is reached first", "trl": "TRL's rule: max_steps > 0 wins"}


def _fmt_num(x) -> str:
    """Numbers as a person writes them: ``3`` for 3.0, ``2.5``, ``None`` for None."""
    if isinstance(x, float) and x.is_integer():
        return str(int(x))
    return str(x)


# --------------------------------------------------------------------------------------------------------------------
# our fields -> TRL fields
# --------------------------------------------------------------------------------------------------------------------


def _our_batch(prompts_per_step: int | None, micro_batch_size: int | None, num_generations: int, world_size: int):
    """Resolve (prompts_per_step, micro_batch_size, gradient_accumulation_steps) from our fields; raise if invalid.

    - Only ``micro_batch_size`` set: the smallest step that is a whole number of micro-batches on every process and a
      whole number of groups: ``lcm(micro_batch_size × world_size, G)`` completions, i.e. TRL's default
      ``gradient_accumulation_steps=1`` when ``micro_batch_size × world_size`` is a multiple of G.
    - Only ``prompts_per_step`` set: ``micro_batch_size`` = largest divisor of the completions per step on one process
      that is <= :data:`DEFAULT_MICRO_BATCH_CAP` (8).
    """
    g = num_generations
    if prompts_per_step is None:
        unit = micro_batch_size * world_size
        step_completions = math.lcm(unit, g)
        return step_completions // g, micro_batch_size, step_completions // unit
    completions = prompts_per_step * g
    if completions % world_size:
        step = world_size // math.gcd(g, world_size)
        raise QuantityError(
            f"prompts_per_step={prompts_per_step} with num_generations={g} gives {completions} completions per step, "
            f"which {world_size} processes cannot share equally; valid prompts_per_step: multiples of {step}, "
            f"nearest {_near_multiples(prompts_per_step, step)} (or change num_generations or the number of processes)"
        )
    per_process = completions // world_size
    where = "on 1 process" if world_size == 1 else f"on each of {world_size} processes"
    if micro_batch_size is None:
        micro_batch_size = max(d for d in _divisors(per_process) if d <= DEFAULT_MICRO_BATCH_CAP)
    elif per_process % micro_batch_size:
        valid = ", ".join(str(d) for d in _divisors(per_process))
        raise QuantityError(
            f"micro_batch_size={micro_batch_size} does not divide the {per_process} completions per step {where}; "
            f"valid: {valid}"
        )
    return prompts_per_step, micro_batch_size, per_process // micro_batch_size


def _trl_generation_batch(per_device: int, world_size: int, ga: int, spg: int | None, gbs: int | None, g: int,
                          allow_both: bool = False):
    """TRL's derivation of (steps_per_generation, generation_batch_size) from ``GRPOConfig.__post_init__``.

    ``allow_both`` accepts both set when they agree (a config after TRL's ``__post_init__`` has both filled in).
    """
    global_batch = per_device * world_size
    if spg is not None and gbs is not None and not (allow_both and gbs == global_batch * spg):
        raise QuantityError(
            f"generation_batch_size={gbs} and steps_per_generation={spg} are both set; TRL accepts one of them: "
            "remove one (generation_batch_size = per_device_train_batch_size × processes × steps_per_generation)"
        )
    if gbs is not None:
        if gbs % global_batch:
            raise QuantityError(
                f"generation_batch_size={gbs} must be a multiple of per_device_train_batch_size × processes = "
                f"{per_device} × {world_size} = {global_batch}; nearest valid: {_near_multiples(gbs, global_batch)}"
            )
        spg = gbs // global_batch
        if gbs % g:
            lcm = math.lcm(global_batch, g)
            raise QuantityError(
                f"generation_batch_size={gbs} is not a multiple of num_generations={g}, so prompt groups would be "
                f"split; valid generation_batch_size: multiples of {lcm}, nearest {_near_multiples(gbs, lcm)}"
            )
        return spg, gbs
    spg = ga if spg is None else spg
    gbs = global_batch * spg
    if gbs % g:
        step = g // math.gcd(g, world_size * spg)
        raise QuantityError(
            f"per_device_train_batch_size={per_device} gives a generation batch of {gbs} completions "
            f"(= {per_device} × {world_size} processes × steps_per_generation {spg}), not a multiple of "
            f"num_generations={g}, so prompt groups would be split; valid per_device_train_batch_size: multiples of "
            f"{step}, nearest {_near_multiples(per_device, step)}; or set prompts_per_step instead"
        )
    return spg, gbs


def _conflict(ours: dict, raw_name: str, raw_value, expected, why: str, fix: str | None = None) -> QuantityError:
    """A conflict between our field(s) ``ours`` and a raw TRL field, naming both, what ours write, and the fix."""
    our_text = ", ".join(f"{k}={_fmt_num(v)}" for k, v in ours.items())
    fix = fix or f"Remove {raw_name} (our fields write it), or remove {' and '.join(ours)} and use TRL's fields alone"
    return QuantityError(
        f"{our_text} conflicts with {raw_name}={_fmt_num(raw_value)}: set one of them; {why} writes "
        f"{raw_name}={_fmt_num(expected)}. {fix}"
    )


def resolve_trl_fields(values: dict, world_size: int, set_fields=None) -> dict:
    """Validate the user's quantities and compute the TRL fields to write.

    Args:
        values (`dict`): the user's settings. Our fields ``prompts_per_step`` [prompts], ``micro_batch_size``
            [completions], ``total_training_steps`` [optimizer steps], ``total_epochs`` [passes] (``None`` or absent =
            unset), and the raw TRL fields ``per_device_train_batch_size``, ``gradient_accumulation_steps``,
            ``max_steps``, ``num_train_epochs``, ``generation_batch_size``, ``steps_per_generation``,
            ``num_generations``, ``num_iterations`` (absent = :data:`TRL_DEFAULTS`). A raw field counts as "set" when
            it differs from :data:`TRL_DEFAULTS` (so an explicit ``per_device_train_batch_size=8`` looks unset).
        world_size (`int`): number of training processes (accelerate's ``num_processes``).
        set_fields (`set[str]`, *optional*): the keys the user set. When given, a raw field counts as "set" exactly
            when it is in this set, whatever its value (`validation` passes the YAML + command-line keys, so an
            explicit ``per_device_train_batch_size: 8`` next to ``micro_batch_size: 4`` is a conflict).

    Returns:
        `dict`: TRL fields to write — ``per_device_train_batch_size``, ``gradient_accumulation_steps``,
        ``max_steps``, ``num_train_epochs``, ``steps_per_generation``, ``generation_batch_size`` (at most one of the
        last two is not None, as TRL requires), ``num_generations``, ``num_iterations`` — plus our normalised fields
        ``prompts_per_step`` and ``micro_batch_size`` (both filled in, defaults included, when the batch is given in
        our fields; None when it is given in TRL's), ``total_training_steps`` and ``total_epochs`` (None where unset;
        never filled from TRL's fields, which would change the stop semantics) and ``stop_semantics``: ``"first_reached"`` when our stop fields are used, ``"trl"``
        when the stop comes from raw ``max_steps``/``num_train_epochs`` (``max_steps > 0`` wins).

    The two groups are independent: the batch shape comes from our ``prompts_per_step``/``micro_batch_size`` or from
    TRL's ``per_device_train_batch_size``/``gradient_accumulation_steps``/``generation_batch_size``/
    ``steps_per_generation``; the stop from our ``total_training_steps``/``total_epochs`` or TRL's
    ``max_steps``/``num_train_epochs``. Within a group a raw field that differs from what our fields write is a
    conflict (one that agrees is accepted, so resolving twice is harmless).

    Writing rules for our fields: ``gradient_accumulation_steps = prompts_per_step × G / (micro_batch_size ×
    world_size)``; ``steps_per_generation`` and ``generation_batch_size`` stay None (TRL sets
    ``steps_per_generation = gradient_accumulation_steps``: one generation per optimizer step);
    ``max_steps = total_training_steps`` or -1; ``num_train_epochs = total_epochs``, or, when only
    ``total_training_steps`` is set, ``float(total_training_steps)``: an epoch limit that cannot bind first, since
    it is worth at least ``total_training_steps`` steps (steps per epoch >= 1). The trainer caps ``max_steps`` to the
    plan's total once the dataset size is known. Defaults: see :func:`_our_batch`.

    Raises:
        QuantityError: an invalid value (field, value, fix), a conflict (both fields named), or a divisibility
            error (with the nearest valid values).
    """
    unknown = sorted(set(values) - set(_INPUT_FIELDS))
    if unknown:
        raise QuantityError(f"unknown quantity field(s) {unknown}; known: {', '.join(_INPUT_FIELDS)}")
    v = {**TRL_DEFAULTS, **{k: None for k in (*OUR_BATCH_FIELDS, *OUR_STOP_FIELDS)}, **values}
    world = _as_int("world_size", world_size, 1, "pass the number of training processes (1 for a single GPU)")
    g = _as_int("num_generations", v["num_generations"], 2,
                "GRPO compares completions within a group of a prompt; set num_generations to 2 or more "
                "(8 or more for instruct models)")
    mu = _as_int("num_iterations", v["num_iterations"], 1,
                 "set num_iterations=1 (one policy update per generation batch) or more to reuse generations")
    opt = {
        "prompts_per_step": "set the number of distinct prompts per optimizer step, e.g. prompts_per_step=4",
        "micro_batch_size": "set the completions per forward/backward on one device, e.g. micro_batch_size=8",
        "total_training_steps": "set a positive number of optimizer steps, or remove it to stop by total_epochs",
    }
    ours = {k: (None if v[k] is None else _as_int(k, v[k], 1, fix)) for k, fix in opt.items()}
    ours["total_epochs"] = (None if v["total_epochs"] is None else _as_float(
        "total_epochs", v["total_epochs"], "set a positive number of passes over the prompts (e.g. 1, 2.5), or "
        "remove it to stop by total_training_steps only", positive=True))
    raw = {
        "per_device_train_batch_size": _as_int("per_device_train_batch_size", v["per_device_train_batch_size"], 1,
                                               "it counts completions per device per forward pass; use e.g. 8"),
        "gradient_accumulation_steps": _as_int("gradient_accumulation_steps", v["gradient_accumulation_steps"], 1,
                                               "use 1 or more micro-batches per optimizer step"),
    }
    for name in ("generation_batch_size", "steps_per_generation"):
        raw[name] = None if v[name] is None else _as_int(name, v[name], 1, "use a positive value or remove it")
    raw["max_steps"] = _as_int("max_steps", v["max_steps"], -(2**63),
                               "use -1 to stop by num_train_epochs or a positive number of optimizer steps")
    if raw["max_steps"] == 0:
        raise QuantityError("max_steps=0 trains nothing; use -1 to stop by num_train_epochs, or a positive "
                            "number of optimizer steps (or total_training_steps)")
    raw["num_train_epochs"] = _as_float("num_train_epochs", v["num_train_epochs"],
                                        "use a positive number of passes, e.g. 3", positive=False)
    if set_fields is None:
        is_set = {k: raw[k] != TRL_DEFAULTS[k] for k in raw}
    else:
        is_set = {k: k in set_fields for k in raw}
    out = {"num_generations": g, "num_iterations": mu, **ours}

    # batch shape
    if ours["prompts_per_step"] is not None or ours["micro_batch_size"] is not None:
        pps, micro, ga = _our_batch(ours["prompts_per_step"], ours["micro_batch_size"], g, world)
        given = {k: ours[k] for k in OUR_BATCH_FIELDS if ours[k] is not None}
        why = (f"prompts_per_step={pps} × num_generations={g} on {world} process{'es' if world > 1 else ''} with "
               f"micro_batch_size={micro}" + ("" if ours["micro_batch_size"] is not None else " (default)"))
        expected = {"per_device_train_batch_size": micro, "gradient_accumulation_steps": ga,
                    "steps_per_generation": ga, "generation_batch_size": pps * g}
        for name, exp in expected.items():
            if is_set[name] and raw[name] != exp:
                raise _conflict(given, name, raw[name], exp, why)
        out.update(prompts_per_step=pps, micro_batch_size=micro, per_device_train_batch_size=micro,
                   gradient_accumulation_steps=ga, steps_per_generation=None, generation_batch_size=None)
    else:
        _trl_generation_batch(raw["per_device_train_batch_size"], world, raw["gradient_accumulation_steps"],
                              raw["steps_per_generation"], raw["generation_batch_size"], g)
        out.update({k: raw[k] for k in RAW_BATCH_FIELDS})

    # stop
    steps, epochs = ours["total_training_steps"], ours["total_epochs"]
    if steps is not None or epochs is not None:
        given = {k: ours[k] for k in OUR_STOP_FIELDS if ours[k] is not None}
        expected = {"max_steps": steps if steps is not None else -1,
                    "num_train_epochs": epochs if epochs is not None else float(steps)}
        fixes = {"max_steps": f"Remove max_steps, or use total_training_steps={raw['max_steps']} in its place",
                 "num_train_epochs": f"Remove num_train_epochs, or use total_epochs="
                                     f"{_fmt_num(raw['num_train_epochs'])} in its place"}
        for name, exp in expected.items():
            if is_set[name] and raw[name] != exp:
                cannot_bind = name == "num_train_epochs" and epochs is None
                why = "our stop rule (whichever limit is reached first" + (
                    "; an epoch limit that cannot stop first)" if cannot_bind else ")")
                raise _conflict(given, name, raw[name], exp, why, fixes[name])
        out.update(expected, stop_semantics="first_reached")
    else:
        if raw["max_steps"] < 0 and raw["num_train_epochs"] <= 0:
            raise QuantityError(
                f"num_train_epochs={_fmt_num(raw['num_train_epochs'])} with max_steps={raw['max_steps']} trains "
                "nothing; set num_train_epochs > 0, or max_steps > 0, or total_epochs/total_training_steps")
        out.update(max_steps=raw["max_steps"], num_train_epochs=raw["num_train_epochs"], stop_semantics="trl")
    return out


# --------------------------------------------------------------------------------------------------------------------
# the plan
# --------------------------------------------------------------------------------------------------------------------


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
        """The plan as indented JSON (``to_dict``)."""
        return json.dumps(self.to_dict(), indent=2)

    def format_table(self) -> str:
        """A readable table: quantity, value with its unit, and the arithmetic that produced it."""
        g, w, ga, spg, mu = (self.num_generations, self.world_size, self.gradient_accumulation_steps,
                             self.steps_per_generation, self.num_iterations)
        pps = self.prompts_per_step
        pps_text = _fmt_num(pps) if isinstance(pps, int) else f"{Fraction(self.completions_per_step, g)} (≈{pps:.3g})"
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
                arith = f"= ceil({_fmt_num(self.epoch_limit)} × {self.steps_per_epoch}) = {self.epoch_limit_steps} steps"
            if ignored:
                arith += " (ignored: TRL's max_steps > 0 wins)"
            rows.append(("epoch limit", f"{_fmt_num(self.epoch_limit)} epochs", arith))
        if self.stop_semantics == "first_reached" and self.step_limit is not None and self.epoch_limit_steps:
            total_arith = f"= min({self.step_limit}, {self.epoch_limit_steps})"
        else:
            total_arith = ""
        rows += [
            ("total steps", f"{self.total_steps} steps",
             f"{total_arith} stopped by the {self.stop_reason.replace('_', ' ')} "
             f"({_SEMANTICS_TEXT[self.stop_semantics]})".strip()),
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
            f"world_size={w} gives {_fmt_num(pps)} prompts per step, but the fields were resolved for "
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
                "dataset size unknown (a streaming dataset?) and no step limit: the number of steps cannot be "
                "planned; set total_training_steps (or max_steps), or give the dataset size (--dataset-size N)")
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


# --------------------------------------------------------------------------------------------------------------------
# advice and resume checks
# --------------------------------------------------------------------------------------------------------------------

#: Vocabulary assumed by the memory estimate of :func:`plan_warnings` (Qwen2.5's, 151,936 tokens).
ASSUMED_VOCAB_SIZE = 151_936
#: Bytes per completion token the estimate counts: the bf16 logits of one token over the vocabulary (2 bytes each).
LOGIT_BYTES_PER_TOKEN = 2 * ASSUMED_VOCAB_SIZE
#: Bytes per model parameter the estimate counts: 4-bit NF4 weights, the smallest any recipe here loads.
WEIGHT_BYTES_PER_PARAM = 0.5


def _estimate_micro_batch_gib(micro_batch_size: int, max_completion_length: int, model_params: float | None) -> float:
    """Lower-bound memory [GiB] of one micro-batch: 4-bit weights + bf16 logits of its completion tokens."""
    weights = (model_params or 0.0) * WEIGHT_BYTES_PER_PARAM
    return (weights + micro_batch_size * max_completion_length * LOGIT_BYTES_PER_TOKEN) / 2**30


def plan_warnings(plan: RunPlan, *, instruct_model: bool | None = None, gpu_memory_gib: float | None = None,
                  model_params: float | None = None) -> list[str]:
    """Advice from the tutorial's rules of thumb (``GLOSSARY.md``), each saying how to fix it.

    Args:
        plan (`RunPlan`): the resolved plan.
        instruct_model (`bool`, *optional*): True for an instruct/chat model (G >= 8 advised), False for a base model
            (G 4–5 is enough), None if unknown (only G < 4 is flagged).
        gpu_memory_gib (`float`, *optional*): memory of one device [GiB]; enables the micro-batch memory check.
        model_params (`float`, *optional*): number of model parameters (e.g. ``0.5e9``), used by that check.

    The memory check is a deliberately rough **lower bound**: 4-bit weights (0.5 byte/parameter) plus the bf16 logits
    of every completion token of one micro-batch over a 151,936-token vocabulary (2 × 151,936 bytes per token ≈ 0.29
    MiB), ignoring prompts, activations, optimizer state and the KV cache. It warns only when even that exceeds
    ``gpu_memory_gib``, i.e. when the micro-batch cannot fit; fitting the estimate does not promise the run fits.

    Returns:
        `list[str]`: one sentence per warning (empty when nothing looks wrong).
    """
    out: list[str] = []
    g, pps = plan.num_generations, plan.prompts_per_step
    if instruct_model and g < 8:
        out.append(f"num_generations={g} is below 8 for an instruct model: its confident completions often score "
                   "alike, so many groups have σ = 0 and give no learning signal; set num_generations=8 or more")
    elif not instruct_model and g < 4:
        out.append(f"num_generations={g} is small: groups of {g} often score alike (σ = 0, no signal); use 4–5 "
                   "for a base model, 8 or more for an instruct model")
    if not isinstance(pps, int):
        out.append(f"{Fraction(plan.completions_per_step, g)} prompts per optimizer step is not a whole number: a "
                   "prompt group spans optimizer steps; set prompts_per_step (or make per_device_train_batch_size × "
                   "processes × gradient_accumulation_steps a multiple of num_generations)")
    if pps < 2:
        out.append(f"prompts_per_step={_fmt_num(pps)}: one hard prompt dominates each step and a group with σ = 0 "
                   "wastes the whole step; use at least 2–4 prompts per step (8+ where memory allows)")
    if plan.epochs_covered is not None and plan.epochs_covered > 5:
        out.append(f"the run covers {plan.epochs_covered:.3g} epochs (more than 5): GRPO overfits little but 2–5 "
                   "passes are usually enough; lower total_epochs/total_training_steps or use more prompts")
    limit_steps = plan.epoch_limit_steps
    if plan.stop_semantics == "first_reached":
        if plan.stop_reason == "step_limit" and limit_steps is not None and plan.epochs_covered < 1:
            out.append(f"total_training_steps={plan.step_limit} stops after {plan.epochs_covered:.3g} of an epoch, "
                       f"before total_epochs={_fmt_num(plan.epoch_limit)} matters: part of the data is never seen; "
                       f"raise total_training_steps to {plan.steps_per_epoch} or more for one full pass")
        if plan.epoch_limit is not None and plan.steps_per_epoch is None:
            out.append(f"total_epochs={_fmt_num(plan.epoch_limit)} cannot be checked without the dataset size: the "
                       f"plan stops at the step limit ({plan.step_limit}); pass the dataset size (--dataset-size N)")
    elif plan.step_limit is not None and limit_steps is not None and limit_steps != plan.step_limit:
        side = "would stop earlier, at" if limit_steps < plan.step_limit else "would go on to"
        out.append(f"max_steps={plan.step_limit} overrides num_train_epochs={_fmt_num(plan.epoch_limit)} (TRL's "
                   f"rule; the epoch limit {side} step {limit_steps}): the run covers {plan.epochs_covered:.3g} "
                   "epochs; for whichever-comes-first use total_training_steps and total_epochs instead")
    if gpu_memory_gib is not None:
        need = _estimate_micro_batch_gib(plan.micro_batch_size, plan.max_completion_length, model_params)
        if need > gpu_memory_gib:
            per_process = plan.completions_per_step // plan.world_size
            fit = [d for d in _divisors(per_process) if _estimate_micro_batch_gib(
                d, plan.max_completion_length, model_params) <= gpu_memory_gib]
            fix = (f"set micro_batch_size={fit[-1]} (gradient accumulation grows, prompts_per_step stays)" if fit
                   else "lower max_completion_length or use a device with more memory")
            out.append(f"micro_batch_size={plan.micro_batch_size} × max_completion_length={plan.max_completion_length}"
                       f" tokens needs at least {need:.1f} GiB (weights at 4 bits + bf16 logits over a "
                       f"{ASSUMED_VOCAB_SIZE}-token vocabulary), more than the {gpu_memory_gib:g} GiB stated; {fix}")
    return out


#: Plan fields that may differ on resume: they change how the same steps are computed (batch split across devices
#: and micro-batches, the completion length cap, or the label of the stop rule), not which prompts a step sees, the
#: number of steps, nor the stop point. Every other field must be equal.
RESUME_SAFE_FIELDS = frozenset({
    "world_size", "micro_batch_size", "gradient_accumulation_steps", "steps_per_generation",
    "max_completion_length", "token_budget", "token_budget_total", "stop_semantics",
})


def check_resume_compatible(saved: dict, plan: RunPlan) -> None:
    """Refuse to resume when the quantities that decide the data order, the step count or the stop point changed.

    Args:
        saved (`dict`): the plan saved with the checkpoint (:meth:`RunPlan.to_dict`).
        plan (`RunPlan`): the plan of the resumed run.

    Differences in :data:`RESUME_SAFE_FIELDS` (e.g. a new micro_batch_size or number of devices with the same
    prompts_per_step) are allowed and explained with a ``UserWarning``: transformers skips ``global_step`` optimizer
    steps of data, and every step still sees the same prompts. Any other difference (prompts_per_step,
    num_generations, dataset_size, steps_per_epoch, a limit, total_steps, ...) would silently move the learning-rate
    schedule, the data skipped on resume, or the stop point.

    Raises:
        QuantityError: listing every unsafe difference ("prompts_per_step: 4 in the checkpoint, 8 now") and the fix.
    """
    now = plan.to_dict()
    unsafe, safe = [], []
    for key, value in now.items():
        if key not in saved:
            unsafe.append(f"{key}: missing in the checkpoint, {value} now")
        elif saved[key] != value:
            (safe if key in RESUME_SAFE_FIELDS else unsafe).append(f"{key}: {saved[key]} in the checkpoint, {value} now")
    if unsafe:
        raise QuantityError(
            "cannot resume: the run's quantities differ from the checkpoint's plan (" + "; ".join(unsafe) + "); "
            "resume with the original config, or start a new output_dir (load the checkpoint as the model)")
    if safe:
        warnings.warn("resuming with changes that keep the data order, step count and stop point: " + "; ".join(safe),
                      UserWarning, stacklevel=2)


def resample_note(plan: RunPlan, max_resample_rounds: int) -> str:
    """How ``zero_variance_filter: resample`` counts in this plan (printed under the plan table).

    Extra prompts drawn to replace uniform groups come from a separate, seeded order of the training prompts and do
    not advance the main sampler: the epochs and total steps above stay exact; the extra generation is at most
    ``max_resample_rounds`` × prompts_per_step prompts (× G completions) per optimizer step.
    """
    extra_prompts = max_resample_rounds * plan.prompts_per_step
    return (
        "zero_variance_filter=resample: prompts drawn to replace uniform groups do not advance the epoch count "
        f"(the {plan.total_steps} steps and {_fmt_num(plan.epochs_covered)} epochs above stay exact); each step "
        f"generates for at most {extra_prompts} extra prompts ({max_resample_rounds} rounds × "
        f"{plan.prompts_per_step}), i.e. up to {extra_prompts * plan.num_generations} extra completions, logged as "
        "zero_variance/prompts_drawn."
    )
