"""Helpers shared by the built-in rewards: completion text, dataset columns, answer extraction. Pure Python.

A completion reaches a reward in one of two formats (TRL decides from the dataset):

* plain text: ``"The answer is 72"``;
* conversational: a list of messages, ``[{"role": "assistant", "content": "The answer is 72"}]``; ``content`` may also
  be a list of parts ``[{"type": "text", "text": ...}]``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from .parameters import TRAINER_KWARGS

#: Dataset columns tried, in order, for the reference answer when a reward's ``column`` is ``None``.
DEFAULT_ANSWER_COLUMNS = ("solution", "answer")


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type", "text") == "text")
    return "" if content is None else str(content)


def completion_text(completion: Any, index: int = 0, reward: str = "reward") -> str:
    """The text of one completion, plain or conversational.

    Args:
        completion: a string, or a list of message dicts (``role``/``content``).
        index (`int`): its position in the batch, for the error message.
        reward (`str`): the calling reward's name, for the error message.

    Returns:
        `str`: the string itself, or the contents of its assistant messages (messages without a role count as
        assistant) joined by ``"\\n"``.

    Raises:
        ValueError: the completion is neither a string nor a list of message dicts.
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, (list, tuple)) and all(isinstance(m, dict) for m in completion):
        parts = [_content_text(m.get("content")) for m in completion if m.get("role", "assistant") == "assistant"]
        return "\n".join(parts)
    raise ValueError(
        f"Reward {reward!r}: completion {index} is a {type(completion).__name__} ({str(completion)[:80]!r}); expected "
        'a string or a list of messages like [{"role": "assistant", "content": "..."}].'
    )


def completion_texts(completions: Sequence[Any], reward: str = "reward") -> list[str]:
    """:func:`completion_text` of every completion of the batch."""
    if completions is None:
        raise ValueError(f"Reward {reward!r} was called without `completions`; the trainer passes them by keyword.")
    return [completion_text(c, i, reward) for i, c in enumerate(completions)]


def read_column(kwargs: dict, column: str | Sequence[str], n: int, reward: str) -> tuple[str, list]:
    """Read a dataset column (one value per completion) from a reward's keyword arguments.

    Args:
        kwargs (`dict`): the keyword arguments the trainer passed (every dataset column as a list).
        column (`str` or sequence of `str`): the column name, or candidates tried in order.
        n (`int`): number of completions; the column must have that many values.
        reward (`str`): the calling reward's name, for the error message.

    Returns:
        `(name, values)`: the column found and its values.

    Raises:
        ValueError: no candidate column is present (the message lists the columns received and the ``column``
            parameter to set), or the column's length is not ``n``.
    """
    candidates = [column] if isinstance(column, str) else list(column)
    for name in candidates:
        if kwargs.get(name) is not None:
            values = list(kwargs[name])
            if len(values) != n:
                raise ValueError(
                    f"Reward {reward!r}: column {name!r} has {len(values)} values for {n} completions; a dataset "
                    "column gives one value per completion."
                )
            return name, values
    received = sorted(k for k in kwargs if k not in TRAINER_KWARGS)
    raise ValueError(
        f"Reward {reward!r} needs the dataset column {' or '.join(map(repr, candidates))}, but received the columns "
        f"{received}. Add the column to the dataset or choose one with the reward's `column` parameter "
        f"(YAML: {{name: {reward}, kwargs: {{column: <name>}}}})."
    )


def last_boxed(text: str) -> str | None:
    r"""Content of the last ``\boxed{...}`` (or ``\fbox{...}``) in ``text``, braces matched; ``None`` if absent."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    i = text.index("{", start) + 1
    depth = 1
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j]
    return None


def extract_answer(text: str, answer_tag: str = "answer", answer_phrase: str | None = None) -> str:
    r"""The final answer written in ``text``, by the first rule that applies.

    0. when ``answer_phrase`` is given (e.g. ``"The answer is"``): what follows its last occurrence (case-insensitive)
       up to the end of that line; ``""`` when the phrase does not occur (the asked format was not followed);
    1. the content of the last ``<answer_tag>...</answer_tag>`` pair;
    2. the content of the last ``\boxed{...}``;
    3. what follows the last ``####`` (the GSM8K convention, "... #### 72");
    4. the whole text.

    The result is stripped of surrounding whitespace.

    >>> extract_answer("3 + 4 = 7. The answer is 7.", answer_phrase="The answer is")
    '7.'
    >>> extract_answer("<think>x</think>\n<answer>1,200</answer>")
    '1,200'
    """
    if answer_phrase:
        stated = [m.group(1).strip() for m in re.finditer(rf"{re.escape(answer_phrase)}([^\n]*)", text, re.IGNORECASE)]
        stated = [s for s in stated if s]
        return stated[-1] if stated else ""
    tag = re.escape(answer_tag)
    tagged = re.findall(rf"<{tag}>(.*?)</{tag}>", text, flags=re.DOTALL)
    if tagged:
        return tagged[-1].strip()
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed.strip()
    if "####" in text:
        return text.rsplit("####", 1)[1].strip()
    return text.strip()


_NUMBER_RE = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|[-+]?\.\d+(?:[eE][-+]?\d+)?")


def stated_number(text: str, phrase: str) -> float | None:
    """The number right after the last ``phrase`` that is followed by one (case-insensitive), or ``None``.

    Between the phrase and the number only spaces, newlines, ``:``, ``*`` (Markdown bold) and ``$`` may stand; the
    rest of the line is not read. Thousands separators are allowed.

    >>> stated_number("12 - 5 = 7. The answer is 7. I hope this helps with question 2.", "The answer is")
    7.0
    >>> stated_number("The answer is **1,200**.", "the answer is"), stated_number("no phrase here", "The answer is")
    (1200.0, None)
    """
    pattern = rf"{re.escape(phrase)}[\s:*$]*({_NUMBER_RE.pattern})"
    found = re.findall(pattern, LATEX_THOUSANDS.sub(",", text), flags=re.IGNORECASE)
    return float(found[-1].replace(",", "")) if found else None


# LaTeX's thousands separators (1{,}000, 1\,000, 1\!000); a minus sign spaced from its number on the same line after
# =, :, (, [, { or $ ("x = - 7"; not "10 - 7", nor a Markdown bullet "- 7"); a LaTeX fraction (\frac34, \frac{1}{2})
LATEX_THOUSANDS = re.compile(r"(?<=\d)(?:\{,\}|\\[,!])(?=\d{3})")
_SPACED_MINUS = re.compile(r"(?<=[=:(\[{$])[ \t]*-[ \t]+(?=[\d.])")
LATEX_FRACTION = re.compile(r"\\[dt]?frac\s*(?:\{[^{}]*\}|\d)\s*(?:\{[^{}]*\}|\d)")


def numbers_in(text: str) -> list[str]:
    """Every decimal number in ``text``, as written (the numbers :func:`last_number` chooses from): the Unicode minus
    U+2212 read as ``-``, a minus spaced from its number after ``=``, ``:`` or a bracket (``x = - 7``) joined to it,
    LaTeX's thousands separators (``1{,}000``, ``1\\,000``) read as ``,``; a LaTeX fraction (``\\frac34``,
    ``\\frac{1}{2}``) is no number (its digits are not 34, nor 1 and 2)."""
    text = LATEX_FRACTION.sub(" ", LATEX_THOUSANDS.sub(",", text.replace("\u2212", "-")))
    return _NUMBER_RE.findall(_SPACED_MINUS.sub(" -", text))


def last_number(text: str) -> float | None:
    """The last of :func:`numbers_in` (thousands separators ``1,000`` allowed), or ``None``."""
    found = numbers_in(text)
    return float(found[-1].replace(",", "")) if found else None


class TextReward:
    """Base of the built-in rewards: a picklable callable class; each instance carries ``__name__`` (the metric name).

    Subclasses implement :meth:`score`, which receives the completion texts (plain or conversational, see
    :func:`completion_text`) and every keyword argument the trainer passes.
    """

    #: Python packages the reward imports when called, as ``((import name, pip requirement), ...)``; checked before
    #: the model loads by :mod:`trl_grpo_ext.validation`.
    required_packages: tuple[tuple[str, str], ...] = ()

    def __init__(self) -> None:
        self.__name__ = getattr(type(self), "__reward_name__", type(self).__name__)

    @property
    def required_columns(self) -> tuple[tuple[str, ...], ...]:
        """Dataset columns this reward reads: one tuple of alternatives per column (any one of them suffices).

        A reward with a ``column`` attribute reads that column, or, when it is ``None``, the first of
        :data:`DEFAULT_ANSWER_COLUMNS` present; checked against the dataset before the model loads
        (:func:`trl_grpo_ext.validation.check_reward_columns`).
        """
        if "column" not in vars(self):
            return ()
        return ((self.column,),) if self.column else (tuple(DEFAULT_ANSWER_COLUMNS),)

    def __call__(self, completions: Sequence[Any] | None = None, **kwargs: Any) -> list[float | None]:
        return self.score(completion_texts(completions, self.__name__), **kwargs)

    def score(self, texts: list[str], **kwargs: Any) -> list[float | None]:  # pragma: no cover - abstract
        """One reward per text; ``kwargs`` are the trainer's keyword arguments (dataset columns, completion_ids, ...)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({params})"


def check_tag_name(name: str, value: Any) -> str:
    """Return ``value`` if it is an XML-like tag name (``think``, ``answer``: letters, digits, ``_``, ``-``, not
    starting with a digit), else raise `ValueError` naming the parameter ``name``."""
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z_][\w\-]*", value):
        raise ValueError(f"{name}={value!r} must be a tag name such as 'think' (letters, digits, '_', '-').")
    return value
