"""Every problem of a config in one go: a collector the checks report to instead of stopping at the first one."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["Problems", "problem_lines"]


def problem_lines(err: BaseException | str) -> list[str]:
    """The problems ``err`` reports, one line each: its ``problems``, else its message folded into one line."""
    problems = getattr(err, "problems", None)
    return list(problems) if problems else [" ".join(str(err).split())]


class Problems:
    """The problems found so far (``messages``), in order, with every field they name (``fields``)."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        self.fields: set[str] = set()
        self._errors: list[BaseException] = []
        self.warnings: list[str] = []  # settings without effect: listed, not refused

    def warn(self, line: str) -> None:
        """Record a setting without effect (one line naming the field, why, and the fix), once."""
        line = " ".join(line.split())
        if line not in self.warnings:
            self.warnings.append(line)

    def add(self, problem: str | BaseException, fields: Iterable[str] = ()) -> None:
        """Record a problem (a message or a check's error; one carrying several adds each), once per line."""
        self.fields.update(fields)
        error = problem if isinstance(problem, BaseException) and not getattr(problem, "problems", None) else None
        for line in problem_lines(problem):
            if line not in self.messages:
                self.messages.append(line)
                self._errors.append(error)

    def blocked(self, fields: Iterable[str]) -> bool:
        """Whether one of ``fields`` is named by a problem already recorded."""
        return not self.fields.isdisjoint(fields)

    def check(self, func: Callable[..., Any], *args: Any, fields: Iterable[str] = (),
              blocked_by: Iterable[str] | None = None, **kwargs: Any) -> Any:
        """``func(*args, **kwargs)``, recording the `ValueError` it raises under ``fields``; skipped (None) when one of
        ``blocked_by`` (default ``fields``) already has a problem. Returns what ``func`` returns, or None."""
        fields = tuple(fields)
        if self.blocked(fields if blocked_by is None else blocked_by):
            return None
        try:
            return func(*args, **kwargs)
        except ValueError as err:
            self.add(err, fields)
            return None

    def raise_if_any(self, error: type[ValueError] = ValueError) -> None:
        """Raise what was recorded: one problem as its check raised it (a message as ``error``), several as one
        ``error`` with one line each, listed in ``problems``."""
        if not self.messages:
            return
        if len(self.messages) == 1:
            raise self._errors[0] if self._errors[0] is not None else error(self.messages[0])
        combined = error("\n".join(self.messages))
        combined.problems = list(self.messages)
        raise combined
