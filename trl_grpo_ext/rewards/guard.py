"""Guard around a reward function: check what it returns and report failures with the reward's name and the input.

TRL calls each reward ``f(prompts=, completions=, completion_ids=, **columns, trainer_state=, log_extra=,
log_metric=)`` and expects ``list[float | None]``, one per completion. TRL itself only checks the length, after
the values were used; a NaN or a string surfaces later as a bare tensor error. The guard checks every call:

* the output must be a list/tuple (or a 1-D numpy array / tensor) with exactly one value per completion. A wrong
  length or a scalar is always an error, whatever the policy: a value is never broadcast;
* each value must be ``None``, a bool, an int or a float (numpy/torch scalars accepted) and finite.

With ``on_error="raise"`` (default) a bad value, or an exception inside the reward, raises
:class:`RewardFunctionError` naming the reward, the completion index, an excerpt of that prompt and completion
(at most 200 characters each), what was wrong and how to fix it. To find the index of an exception, each completion
is retried alone; when none fails alone, the message says the reward "failed on the batch of N but on no single
completion" (a failure that depends on the batch's size or mix). With ``on_error="none"`` bad values become ``None``
(TRL then leaves that reward out of the completion's weighted sum); after an exception each completion is retried
alone and those that fail alone become ``None``; the number of values replaced in each call is logged through TRL's
``log_metric`` as ``rewards/<name>/invalid`` (logged at every call, so its logged mean is invalid values per call).

Whatever the policy, a call in which *every* value is invalid (the reward raised on, or returned no number for, each
of its completions) raises :class:`RewardFunctionError`: a reward that scores nothing would leave the run training
on the other rewards alone. A reward that itself returns ``None`` for every completion ("does not apply") is not
invalid and passes.
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
import numbers
from collections.abc import Generator
from typing import Any

from ..config.checks import check_choice

logger = logging.getLogger(__name__)

#: Accepted values of a guard's ``on_error`` (the config's ``reward_error_policy``): fail the step, or treat bad
#: values as missing.
REWARD_ERROR_POLICIES = ("raise", "none")
#: Longest excerpt of a prompt or completion in a message, in characters.
EXCERPT_CHARS = 200
_NOOP_KWARGS = ("log_extra", "log_metric")


class RewardFunctionError(ValueError):
    """A reward function raised, or returned something other than one finite number or None per completion.

    Attributes:
        reward_name (`str`): the reward's name.
        index (`int | None`): the completion index concerned (``None`` when no single completion is to blame).
    """

    def __init__(self, message: str, reward_name: str, index: int | None = None):
        super().__init__(message)
        self.reward_name = reward_name
        self.index = index


def excerpt(value: Any, limit: int = EXCERPT_CHARS) -> str:
    """A one-line ``repr`` of a prompt or completion (messages shown as ``role: content``), cut to ``limit`` chars."""
    if isinstance(value, (list, tuple)) and all(isinstance(m, dict) for m in value):
        value = " | ".join(f"{m.get('role', '?')}: {m.get('content', '')}" for m in value)
    text = repr(value) if isinstance(value, str) else repr(str(value))
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _Failed:
    """Stands for the value of a completion whose call alone raised (``on_error="none"``); always invalid."""

    def __init__(self, reason: str):
        self.reason = reason


def _scalar(value: Any) -> tuple[float | None, str | None]:
    """(float value, None) for a valid reward value, (None, reason) for an invalid one; None stays None."""
    if value is None:
        return None, None
    if isinstance(value, _Failed):
        return None, value.reason
    if not isinstance(value, numbers.Real) and hasattr(value, "item") and getattr(value, "ndim", 0) == 0:
        value = value.item()  # numpy / torch 0-d scalar
    if not isinstance(value, numbers.Real):
        return None, f"{type(value).__name__} {excerpt(value, 60)} is not a number"
    result = float(value)
    if math.isnan(result):
        return None, "NaN is not a valid reward"
    if math.isinf(result):
        return None, f"{result} is not a finite reward"
    return result, None


def _as_list(values: Any) -> list | None:
    if isinstance(values, (list, tuple)):
        return list(values)
    if hasattr(values, "tolist") and getattr(values, "ndim", None) == 1:
        return values.tolist()
    return None


def _is_async(fn: Any) -> bool:
    while isinstance(fn, functools.partial):
        fn = fn.func
    call = type(fn).__call__ if not inspect.isfunction(fn) else None
    return inspect.iscoroutinefunction(fn) or (call is not None and inspect.iscoroutinefunction(call))


def _noop(*args: Any, **kwargs: Any) -> None:
    return None


class RewardGuard:
    """Picklable wrapper checking a reward's output; build it with :func:`guard_reward`.

    Args:
        fn (`callable`): the reward, called with TRL's keyword convention.
        name (`str`): the metric name (``__name__``), used in every message and in ``rewards/<name>/invalid``.
        on_error (`str`, defaults to ``"raise"``): ``"raise"`` or ``"none"``, see the module docstring.
    """

    def __init__(self, fn: Any, name: str, on_error: str = "raise"):
        if not callable(fn):
            raise ValueError(f"guard_reward: fn={fn!r} for reward {name!r} is not callable.")
        if not isinstance(name, str) or not name:
            raise ValueError(f"guard_reward: name={name!r} must be a non-empty string (the metric name).")
        check_choice(
            "on_error",
            on_error,
            REWARD_ERROR_POLICIES,
            error=ValueError,
            fix="'raise' fails the step (default); 'none' treats the value as missing and counts it in "
            "rewards/<name>/invalid.",
        )
        self.fn = fn
        self.__name__ = name
        self.on_error = on_error
        self._warned = False

    def __repr__(self) -> str:
        return f"RewardGuard({self.fn!r}, name={self.__name__!r}, on_error={self.on_error!r})"

    # --- messages -------------------------------------------------------------------------------------------------
    def _where(self, index: int | None, prompts: Any, completions: Any) -> str:
        if index is None or completions is None or not 0 <= index < len(completions):
            return ""
        prompt = excerpt(prompts[index]) if prompts is not None and index < len(prompts) else "(not given)"
        return f" Prompt {index}: {prompt}. Completion {index}: {excerpt(completions[index])}."

    def _error(self, what: str, index: int | None, prompts: Any, completions: Any, fix: str) -> RewardFunctionError:
        at = f" at completion {index}" if index is not None else ""
        msg = f"Reward {self.__name__!r}{at}: {what}.{self._where(index, prompts, completions)} {fix}"
        return RewardFunctionError(msg, self.__name__, index)

    def _report(self, err: RewardFunctionError, count: int, kwargs: dict) -> None:
        log = logger.warning if not self._warned else logger.debug
        self._warned = True
        log("%s (on_error='none': %d value(s) treated as missing)", err, count)

    def _log_invalid(self, count: int, kwargs: dict) -> None:
        log_metric = kwargs.get("log_metric")
        if callable(log_metric):
            log_metric(f"rewards/{self.__name__}/invalid", float(count))

    # --- checks ---------------------------------------------------------------------------------------------------
    def _check(self, values: Any, prompts: Any, completions: Any, kwargs: dict) -> list[float | None]:
        n = len(completions)
        seq = _as_list(values)
        if seq is None or len(seq) != n:
            got = f"a {type(values).__name__} ({excerpt(values, 60)})" if seq is None else f"{len(seq)} values"
            index = None if seq is None else min(len(seq), n)
            raise self._error(
                f"returned {got} for {n} completions",
                index if index is not None and index < n else None,
                prompts,
                completions,
                "Return a list with exactly one float (or None) per completion, in order; a single value is never "
                "broadcast, whatever on_error says.",
            )
        out: list[float | None] = []
        bad: list[tuple[int, str]] = []
        for i, value in enumerate(seq):
            result, reason = _scalar(value)
            out.append(result)
            if reason is not None:
                bad.append((i, reason))
        if bad and len(bad) == n:
            index, reason = bad[0]
            raise self._error(
                f"invalid on every one of the {n} completions of this call (completion {index}: {reason})",
                None,
                prompts,
                completions,
                f"A reward that scores no completion would leave the run training on the other rewards alone, so the "
                f"run stops whatever on_error says (on_error={self.on_error!r}). Fix the reward (for a missing "
                "argument, add the dataset column it names), or remove it from `rewards`.",
            )
        if bad:
            index, reason = bad[0]
            err = self._error(
                f"{reason} ({len(bad)} of {n} values invalid)",
                index,
                prompts,
                completions,
                "Return a finite float, or None to skip a completion; or set the reward's on_error to 'none' to treat "
                "invalid values as missing.",
            )
            if self.on_error == "raise":
                raise err
            self._report(err, len(bad), kwargs)
        if self.on_error == "none":
            self._log_invalid(len(bad), kwargs)
        return out

    def _exception_error(
        self, exc: BaseException, index: int | None, prompts: Any, completions: Any, retried: bool = False
    ) -> RewardFunctionError:
        """The error for an exception raised by the reward on the batch.

        ``index``: the first completion that also fails alone (None if none does, or none was tried); ``retried``:
        every completion was retried alone and none failed, so the failure depends on the batch itself.
        """
        n = len(completions)
        # a missing package is never answered with on_error 'none': that would train on the other rewards alone
        fix = (
            "Install the missing package named above, or remove this reward from `rewards`."
            if isinstance(exc, ImportError)
            else "Fix the reward function (or return None for completions it cannot score); set the reward's on_error "
            "to 'none' to treat a failing call as missing values instead of failing the step."
        )
        if index is not None:
            where = ""
        elif retried:
            where = (
                f"; it failed on the batch of {n} but on no single completion (each of the {n} retried alone "
                "succeeded)"
            )
            fix = (
                "The failure depends on the batch, not on one completion: its size, its mix of completions, or state "
                "kept between calls (a batched model or API call, a cache, a counter). Call the reward with that many "
                "completions to reproduce it. " + fix
            )
        else:
            where = f" for the batch of {n} completions"
        return self._error(f"raised {type(exc).__name__}: {exc}{where}", index, prompts, completions, fix)

    @staticmethod
    def _one(i: int, n: int, prompts: Any, completions: Any, completion_ids: Any, kwargs: dict) -> dict:
        """The keyword arguments of a call on completion ``i`` alone (every per-completion list sliced)."""

        def cut(v: Any) -> Any:
            return v[i : i + 1] if isinstance(v, (list, tuple)) and len(v) == n else v

        sliced = {k: (_noop if k in _NOOP_KWARGS else cut(v)) for k, v in kwargs.items()}
        return dict(prompts=cut(prompts), completions=cut(completions), completion_ids=cut(completion_ids), **sliced)

    def _guarded_call(
        self, prompts: Any, completions: Any, completion_ids: Any, kwargs: dict
    ) -> Generator[dict, Any, list[float | None]]:
        """One guarded call, written once for :class:`RewardGuard` and :class:`AsyncRewardGuard`, which differ only in
        how they call the reward (``fn(...)`` or ``await fn(...)``; see their ``__call__``).

        A generator: each ``yield`` hands over the keyword arguments of one call of the reward (the batch, then, to
        find the completion to blame for an exception, each completion alone until one fails) and receives what the
        reward returned, or has its exception thrown in. It returns the checked values, or raises
        :class:`RewardFunctionError`.
        """
        if completions is None:
            raise RewardFunctionError(
                f"Reward {self.__name__!r} was called without `completions`; call it as TRL does, by keyword.",
                self.__name__,
            )
        try:
            values = yield dict(prompts=prompts, completions=completions, completion_ids=completion_ids, **kwargs)
        except Exception as exc:
            n = len(completions)
            if self.on_error == "none":  # keep what each completion scores alone; those that fail alone are invalid
                values = []
                for i in range(n):
                    try:
                        one = _as_list((yield self._one(i, n, prompts, completions, completion_ids, kwargs)))
                    except Exception as one_exc:
                        values.append(_Failed(f"raised {type(one_exc).__name__}: {one_exc}"))
                    else:
                        values.append(one[0] if one is not None and len(one) == 1 else _Failed(
                            f"returned {excerpt(one, 60)} for 1 completion (retried alone after the batch raised)"))
                if not any(isinstance(v, _Failed) for v in values):
                    self._report(self._exception_error(exc, None, prompts, completions, retried=True), 0, kwargs)
                return self._check(values, prompts, completions, kwargs)
            index = None
            for i in range(n):  # find the first completion that fails alone, for the message
                try:
                    yield self._one(i, n, prompts, completions, completion_ids, kwargs)
                except Exception:
                    index = i
                    break
            raise self._exception_error(exc, index, prompts, completions, retried=index is None) from exc
        return self._check(values, prompts, completions, kwargs)

    def __call__(self, prompts=None, completions=None, completion_ids=None, **kwargs: Any) -> list[float | None]:
        steps = self._guarded_call(prompts, completions, completion_ids, kwargs)
        try:
            call = next(steps)
            while True:
                try:
                    values = self.fn(**call)
                except Exception as exc:
                    call = steps.throw(exc)
                else:
                    call = steps.send(values)
        except StopIteration as done:
            return done.value


class AsyncRewardGuard(RewardGuard):
    """:class:`RewardGuard` for an ``async`` reward (TRL awaits it: ``__call__`` is a coroutine function)."""

    async def __call__(self, prompts=None, completions=None, completion_ids=None, **kwargs: Any):
        steps = self._guarded_call(prompts, completions, completion_ids, kwargs)
        try:
            call = next(steps)
            while True:
                try:
                    values = await self.fn(**call)
                except Exception as exc:
                    call = steps.throw(exc)
                else:
                    call = steps.send(values)
        except StopIteration as done:
            return done.value


def guard_reward(fn: Any, name: str, on_error: str = "raise") -> RewardGuard:
    """Wrap a reward so that its output is checked at every call (see the module docstring).

    Args:
        fn (`callable`): the reward, sync or async, called as ``fn(prompts=, completions=, completion_ids=,
            **kwargs)``.
        name (`str`): the metric name; the returned callable's ``__name__``.
        on_error (`str`, defaults to ``"raise"``): ``"raise"`` fails the step with :class:`RewardFunctionError`;
            ``"none"`` replaces bad values by ``None`` and logs their count as ``rewards/<name>/invalid``.

    Returns:
        A :class:`RewardGuard` (an :class:`AsyncRewardGuard` for an async ``fn``), picklable when ``fn`` is.

    Raises:
        ValueError: ``fn`` not callable, empty ``name``, or an unknown ``on_error``.
    """
    cls = AsyncRewardGuard if _is_async(fn) else RewardGuard
    return cls(fn, name, on_error)
