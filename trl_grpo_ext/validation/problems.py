"""Every problem of a config in one go: a collector the checks report to instead of stopping at the first one. A
check that reads a field already reported is skipped (``blocked_by``); identical lines are kept once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["Problems", "problem_lines"]


def problem_lines(err: BaseException) -> list[str]:
    """The problems ``err`` reports, one line each: its ``problems`` when it carries several (raised by
    :meth:`Problems.raise_if_any`), else its message with newlines and repeated spaces folded into one line."""
    problems = getattr(err, "problems", None)
    return list(problems) if problems else [" ".join(str(err).split())]


class Problems:
    """The problems found so far, in the order found, each with the fields it names.

    Attributes:
        messages (`list[str]`): one line per problem.
        fields (`set[str]`): every field named by a problem so far (what :meth:`check`'s ``blocked_by`` consults).
    """

    def __init__(self) -> None:
        self.messages: list[str] = []
        self.fields: set[str] = set()
        self._errors: list[BaseException] = []

    def __len__(self) -> int:
        return len(self.messages)

    def __bool__(self) -> bool:
        return bool(self.messages)

    def add(self, problem: str | BaseException, fields: Iterable[str] = ()) -> None:
        """Record a problem (a message, or the error a check raised; an error carrying several problems adds each)
        naming ``fields``. A line already recorded is not repeated."""
        self.fields.update(fields)
        self.fields.update(getattr(problem, "fields", ()))
        error = problem if isinstance(problem, BaseException) else None
        for line in problem_lines(problem) if error is not None else [" ".join(str(problem).split())]:
            if line not in self.messages:
                self.messages.append(line)
                self._errors.append(error if error is not None and not getattr(error, "problems", None) else None)

    def blocked(self, fields: Iterable[str]) -> bool:
        """Whether one of ``fields`` is named by a problem already recorded."""
        return not self.fields.isdisjoint(fields)

    def check(self, func: Callable[..., Any], *args: Any, fields: Iterable[str] = (),
              blocked_by: Iterable[str] | None = None, **kwargs: Any) -> Any:
        """``func(*args, **kwargs)``, recording the `ValueError` it raises instead of propagating it.

        Args:
            func: a check that raises `ValueError` (``RunArgumentError``, ``QuantityError``, ...) on a problem.
            fields (iterable of `str`): the fields the check judges; recorded with its problem.
            blocked_by (iterable of `str`, *optional*, defaults to ``fields``): skip the check when one of these
                fields already has a problem (the check reads it, so it would restate that problem).

        Returns:
            what ``func`` returns; ``None`` when it was skipped or found a problem.
        """
        fields = tuple(fields)
        if self.blocked(fields if blocked_by is None else blocked_by):
            return None
        try:
            return func(*args, **kwargs)
        except ValueError as err:
            self.add(err, fields)
            return None

    def raise_if_any(self, error: type[ValueError] = ValueError) -> None:
        """Raise when a problem was recorded: a single problem as the error its check raised (its type and message
        unchanged; a message-only problem as ``error``), several as one ``error`` whose message holds one line per
        problem and whose ``problems`` attribute lists them."""
        if not self.messages:
            return
        if len(self.messages) == 1:
            raise self._errors[0] if self._errors[0] is not None else error(self.messages[0])
        combined = error("\n".join(self.messages))
        combined.problems = list(self.messages)
        raise combined
