"""The parameters of a reward: what its signature accepts, and the callable a lookup with parameters gives.

A *class* is a parameterised reward: its ``__init__`` arguments are the parameters, and the lookup keyword arguments
instantiate it. A *function*'s parameters are its keyword-only arguments (those after ``*``); its other named
arguments are dataset columns, filled by the trainer, and the keyword arguments TRL passes to every reward
(:data:`TRAINER_KWARGS`) are never parameters. Pure Python: nothing here imports torch, transformers or trl.
"""

from __future__ import annotations

import difflib
import functools
import inspect
from dataclasses import dataclass
from typing import Any

from ..config.checks import Range

__all__ = [
    "TRAINER_KWARGS",
    "TRL_DROPPED_COLUMNS",
    "RewardParameter",
    "bind_parameters",
    "check_kwargs",
    "check_number",
    "column_arguments",
    "parameters_of",
]

#: Keyword arguments that TRL's ``GRPOTrainer._calculate_rewards`` passes to every reward besides dataset columns.
TRAINER_KWARGS = frozenset(
    {"prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric", "environments"}
)
#: Dataset columns TRL does not pass to rewards under their own name (it passes ``prompts``, ``completions`` and
#: ``completion_ids`` instead; ``_calculate_rewards`` in ``trl/trainer/grpo_trainer.py``).
TRL_DROPPED_COLUMNS = frozenset({"prompt", "completion", "completion_ids"})


def column_arguments(reward: Any) -> tuple[str, ...]:
    """The named arguments of a reward callable that only a dataset column can fill: TRL calls every reward by
    keyword with :data:`TRAINER_KWARGS` and one keyword per dataset column, so each required argument (no default,
    not bound by ``functools.partial``, not ``*args``/``**kwargs``) that is not a trainer keyword must be a column.

    Args:
        reward: a reward function, a ``functools.partial`` of one, or a callable instance (its ``__call__``).

    Returns:
        `tuple[str, ...]` in signature order; ``()`` when the signature cannot be read (a builtin).

    >>> def f(completions, assistant, *, scale=1.0, **kwargs): ...
    >>> column_arguments(f), column_arguments(functools.partial(f, assistant="x"))
    (('assistant',), ())
    """
    try:
        params = inspect.signature(reward).parameters.values()
    except (TypeError, ValueError):
        return ()
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return tuple(
        p.name for p in params
        if p.kind in kinds and p.default is inspect.Parameter.empty and p.name not in TRAINER_KWARGS
    )


@dataclass(frozen=True)
class RewardParameter:
    """One parameter of a parameterised reward (a keyword argument of :func:`~trl_grpo_ext.rewards.get_reward`).

    Args:
        name (`str`): the keyword.
        required (`bool`): whether the lookup must give it.
        default (`Any`): the default value when not required (``None`` otherwise).
        annotation (`str`): the type annotation as written in the source ("" when absent).
    """

    name: str
    required: bool
    default: Any = None
    annotation: str = ""

    def __str__(self) -> str:
        return self.name if self.required else f"{self.name}={self.default!r}"


def _annotation(param: inspect.Parameter) -> str:
    ann = param.annotation
    if ann is inspect.Parameter.empty:
        return ""
    return ann if isinstance(ann, str) else getattr(ann, "__name__", repr(ann))


def parameters_of(obj: Any) -> tuple[RewardParameter, ...]:
    """Parameters of a reward object: a class's ``__init__`` arguments, a function's keyword-only arguments.

    Args:
        obj: a reward function, a reward class, or a callable instance (which has none).

    Returns:
        `tuple[RewardParameter, ...]`, in signature order; ``*args`` / ``**kwargs`` are skipped.
    """
    if isinstance(obj, type):
        try:
            params = list(inspect.signature(obj.__init__).parameters.values())[1:]
        except (TypeError, ValueError):
            return ()
        kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    elif inspect.isfunction(obj) or inspect.ismethod(obj):
        params = list(inspect.signature(obj).parameters.values())
        kinds = (inspect.Parameter.KEYWORD_ONLY,)
    else:
        return ()
    out = []
    for p in params:
        if p.kind not in kinds or p.name in TRAINER_KWARGS:
            continue
        required = p.default is inspect.Parameter.empty
        out.append(RewardParameter(p.name, required, None if required else p.default, _annotation(p)))
    return tuple(out)


def check_number(name: str, value: Any, valid: Range) -> Any:
    """``valid.check(name, value, typed=True)`` for a reward parameter: returns the value (an `int` for an integer
    range). Reward parameters arrive typed (from YAML or Python), so only an `int` or a `float` is accepted (never a
    bool, a string or ``None``).

    Raises:
        ValueError: "``name=value`` must be <the range in words>. Fix: <``valid.fix``>".
    """
    return valid.check(name, value, error=ValueError, typed=True)


def check_kwargs(name: str, obj: Any, kwargs: dict) -> None:
    """Check lookup keyword arguments against the parameters of the reward ``obj`` registered as ``name``.

    Raises:
        ValueError: a keyword that is not a parameter ("did you mean", and the accepted parameters), or a required
            parameter missing (with the YAML that gives it).
    """
    params = parameters_of(obj)
    known = {p.name for p in params}
    for key in kwargs:
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            accepted = ", ".join(str(p) for p in params) or "none"
            raise ValueError(f"Reward {name!r} has no parameter {key!r}.{hint} Its parameters: {accepted}.")
    missing = [p.name for p in params if p.required and p.name not in kwargs]
    if missing:
        raise ValueError(
            f"Reward {name!r} needs the parameter(s) {', '.join(missing)}; give them as kwargs, e.g. in YAML "
            f"`{{name: {name}, kwargs: {{{missing[0]}: ...}}}}`."
        )


def bind_parameters(name: str, obj: Any, kwargs: dict) -> Any:
    """The reward callable for ``obj`` (registered as ``name``) with the lookup's keyword arguments.

    Args:
        name (`str`): the reward's name (set as ``__name__`` on an instance that has none: TRL's metric name).
        obj: the registered object: a class (instantiated with ``kwargs``), a function (``kwargs`` bound with
            ``functools.partial``; none: the function itself) or a callable instance (takes no ``kwargs``).
        kwargs (`dict`): the parameters.

    Raises:
        ValueError: ``obj`` is not callable, an instance was given parameters, or :func:`check_kwargs` refuses them.
    """
    if not callable(obj):
        raise ValueError(f"Reward {name!r} resolves to {obj!r}, which is not callable.")
    if isinstance(obj, type):
        check_kwargs(name, obj, kwargs)
        instance = obj(**kwargs)
        if not hasattr(instance, "__name__"):
            try:
                instance.__name__ = name
            except AttributeError:
                pass
        return instance
    if kwargs:
        if not (inspect.isfunction(obj) or inspect.ismethod(obj)):
            raise ValueError(f"Reward {name!r} is an instance ({type(obj).__name__}) and takes no parameters.")
        check_kwargs(name, obj, kwargs)
        return functools.partial(obj, **kwargs)
    return obj
