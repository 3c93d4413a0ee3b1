"""The user's quantities -> TRL's own fields (pure: no torch), following ``GRPOConfig.__post_init__``
(docs/quantifiers.md). Bad input raises :class:`QuantityError` naming the field, the value and a fix."""

from __future__ import annotations

import math

from ..config.checks import Range, format_number

__all__ = ["QuantityError", "TRL_DEFAULTS", "resolve_trl_fields"]


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
#: The fix for a ``total_training_steps`` below 1 (``-1``, TRL's ``max_steps`` for "no step limit", included).
NO_STEP_LIMIT_FIX = ("use a positive number of optimizer steps; for no step limit (TRL's max_steps: -1) leave it out, "
                     "and the run stops by total_epochs (or num_train_epochs).")
RAW_BATCH_FIELDS = ("per_device_train_batch_size", "gradient_accumulation_steps", "generation_batch_size",
                    "steps_per_generation")
RAW_STOP_FIELDS = ("max_steps", "num_train_epochs")
_INPUT_FIELDS = (*OUR_BATCH_FIELDS, *OUR_STOP_FIELDS, *RAW_BATCH_FIELDS, *RAW_STOP_FIELDS, "num_generations",
                 "num_iterations")

#: ``micro_batch_size`` chosen when only ``prompts_per_step`` is given: the largest divisor of the completions per
#: step on one process that is at most this (TRL's default ``per_device_train_batch_size``).
DEFAULT_MICRO_BATCH_CAP = 8


class _AsGiven:
    """A value :class:`Range` must refuse although it reads as a number (None, a numeric string), shown as given."""

    def __init__(self, value):
        self.value = value

    def __repr__(self) -> str:
        return repr(self.value)


def _number(value):
    return value if isinstance(value, (int, float)) else _AsGiven(value)


def _as_int(name: str, value, minimum: int | None, fix: str) -> int:
    """``value`` as an int >= ``minimum`` (None: unbounded; ``4.0`` accepted), else raise QuantityError."""
    return Range(low=minimum, integer=True, fix=fix).check(name, _number(value), error=QuantityError)


def _as_float(name: str, value, fix: str, positive: bool) -> float:
    """``value`` as a finite float (> 0 when ``positive``), else raise QuantityError."""
    return float(Range(low=0 if positive else None, low_open=True, fix=fix).check(name, _number(value),
                                                                                  error=QuantityError))


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _near_multiples(value: int, step: int) -> str:
    """The multiples of ``step`` nearest to ``value``, e.g. ``"12 or 16"``."""
    below, above = (value // step) * step, (value // step + 1) * step
    return f"{below} or {above}" if below > 0 else f"{above}"


def _our_batch(prompts_per_step: int | None, micro_batch_size: int | None, num_generations: int, world_size: int):
    """(prompts_per_step, micro_batch_size, gradient_accumulation_steps) from our fields. Only
    ``micro_batch_size``: the smallest step of whole micro-batches on every process and whole groups,
    ``lcm(micro_batch_size × world_size, G)`` completions. Only ``prompts_per_step``: ``micro_batch_size`` is the largest
    divisor of the completions per process that is <= :data:`DEFAULT_MICRO_BATCH_CAP`."""
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
    """TRL's derivation of (steps_per_generation, generation_batch_size) (``GRPOConfig.__post_init__``);
    ``allow_both``: both set and agreeing is accepted."""
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
    our_text = ", ".join(f"{k}={format_number(v)}" for k, v in ours.items())
    fix = fix or f"Remove {raw_name} (our fields write it), or remove {' and '.join(ours)} and use TRL's fields alone"
    return QuantityError(
        f"{our_text} conflicts with {raw_name}={format_number(raw_value)}: set one of them; {why} writes "
        f"{raw_name}={format_number(expected)}. {fix}"
    )


def resolve_trl_fields(values: dict, world_size: int, set_fields=None) -> dict:
    """Validate the user's quantities and compute the TRL fields to write (docs/quantifiers.md).

    Args:
        values (`dict`): ours (``prompts_per_step`` [prompts], ``micro_batch_size`` [completions],
            ``total_training_steps`` [steps], ``total_epochs`` [passes]; None or absent: unset) and TRL's raw batch/stop
            fields (absent: :data:`TRL_DEFAULTS`; without ``set_fields`` one counts as set when not its default).
        world_size (`int`): training processes. set_fields (`set[str]`, *optional*): the keys the user set.

    Returns:
        `dict`: TRL's batch and stop fields (at most one of ``steps_per_generation`` / ``generation_batch_size``),
        ``num_generations``, ``num_iterations``, ours (None when TRL's fields give the batch) and ``stop_semantics``
        (``"first_reached"`` or ``"trl"``).

    Raises:
        QuantityError: an invalid value, a conflict (both fields named), or a divisibility error (nearest valid values).
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
        "total_training_steps": NO_STEP_LIMIT_FIX,
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
    raw["max_steps"] = _as_int("max_steps", v["max_steps"], None,
                               "use -1 to stop by num_train_epochs or a positive number of optimizer steps")
    if raw["max_steps"] == 0:
        raise QuantityError("max_steps=0 trains nothing; use -1 to stop by num_train_epochs, or a positive "
                            "number of optimizer steps (or total_training_steps)")
    raw["num_train_epochs"] = _as_float("num_train_epochs", v["num_train_epochs"],
                                        "use a positive number of passes, e.g. 3", positive=False)
    is_set = {k: raw[k] != TRL_DEFAULTS[k] if set_fields is None else k in set_fields for k in raw}
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
        fixes = {"max_steps": (f"Remove max_steps: {raw['max_steps']} is TRL's 'no step limit', which is what "
                               "leaving it out means; total_training_steps / total_epochs set the stop"
                               if raw["max_steps"] < 0 else
                               f"Remove max_steps, or use total_training_steps={raw['max_steps']} in its place"),
                 "num_train_epochs": f"Remove num_train_epochs, or use total_epochs="
                                     f"{format_number(raw['num_train_epochs'])} in its place"}
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
                f"num_train_epochs={format_number(raw['num_train_epochs'])} with max_steps={raw['max_steps']} trains "
                "nothing; set num_train_epochs > 0, or max_steps > 0, or total_epochs/total_training_steps")
        out.update(max_steps=raw["max_steps"], num_train_epochs=raw["num_train_epochs"], stop_semantics="trl")
    return out

