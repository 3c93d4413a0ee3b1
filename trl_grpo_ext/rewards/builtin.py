"""Built-in rewards that need no extra package: answers, format, length, repetition, the tiny task.

Every reward here is a picklable callable class registered by name; its instances carry ``__name__`` (the metric name
TRL logs as ``rewards/<name>/mean``) and accept plain-text and conversational completions. Each class docstring gives
the formula, the range and the source. Reference answers come from a dataset column; ``column=None`` tries
``"solution"`` then ``"answer"`` (GSM8K's column), see :data:`~trl_grpo_ext.rewards.text.DEFAULT_ANSWER_COLUMNS`.
"""

from __future__ import annotations

import math
import re
from typing import Any

from ..config.checks import Range, check_choice
from .parameters import check_number
from .registry import register_reward
from .text import (
    DEFAULT_ANSWER_COLUMNS,
    LATEX_FRACTION,
    TextReward,
    check_tag_name,
    extract_answer,
    last_number,
    numbers_in,
    read_column,
    stated_number,
)


def _check_phrase(value: Any) -> str:
    if not isinstance(value, str) or not value.strip() or "\n" in value:
        raise ValueError(f"answer_phrase={value!r} must be a non-empty one-line string such as 'The answer is'.")
    return value.strip()


def normalise_answer(text: str, case_sensitive: bool = False) -> str:
    """Normalise an answer for exact comparison: strip whitespace and surrounding ``$``, drop one trailing ``.``,
    collapse runs of whitespace to one space and (unless ``case_sensitive``) case-fold."""
    text = text.strip().strip("$").strip()
    if text.endswith("."):
        text = text[:-1]
    text = " ".join(text.split())
    return text if case_sensitive else text.casefold()


@register_reward("exact_match", description="1.0 if the extracted answer equals the reference answer, else 0.0.")
class ExactMatch(TextReward):
    r"""1.0 if the completion's final answer equals the reference answer after normalisation, else 0.0.

    Formula: ``r = [normalise(extract(completion)) == normalise(extract(reference))]``, range {0, 1}. ``extract``
    takes the last ``<answer>...</answer>``, else the last ``\boxed{...}``, else what follows ``####`` (GSM8K), else
    the whole text (:func:`~trl_grpo_ext.rewards.text.extract_answer`); ``normalise`` is :func:`normalise_answer`.
    A reference that is empty after normalisation gives ``None`` (example skipped). Source: the exact-match metric of
    SQuAD (Rajpurkar et al. 2016, arXiv 1606.05250), without its article/punctuation stripping.

    Args:
        column (`str`, *optional*): dataset column of the reference answer; ``None`` tries ``solution`` then
            ``answer``.
        case_sensitive (`bool`, defaults to `False`): compare case-sensitively.
        answer_tag (`str`, defaults to ``"answer"``): tag whose content is the answer.
    """

    #: (lowest, highest) value this reward can take: a uniform group at either is all right / all wrong.
    value_range = (0.0, 1.0)

    def __init__(self, column: str | None = None, case_sensitive: bool = False, answer_tag: str = "answer"):
        super().__init__()
        self.column = column
        self.case_sensitive = bool(case_sensitive)
        self.answer_tag = check_tag_name("answer_tag", answer_tag)

    #: What a gold answer must be (`data.golds`' fix for a column none of whose golds this reward can score).
    gold_forms = "text that is not empty once normalised"

    def gold_problem(self, reference: str) -> str:
        """Why this reward cannot score ``reference`` (``""``: it can): it scores ``None`` for an empty gold."""
        return "" if normalise_answer(extract_answer(reference, self.answer_tag), self.case_sensitive) else \
            "it is empty once normalised"

    def score(self, texts: list[str], **kwargs: Any) -> list[float | None]:
        _, refs = read_column(kwargs, self.column or DEFAULT_ANSWER_COLUMNS, len(texts), self.__name__)
        out: list[float | None] = []
        for text, ref in zip(texts, refs):
            gold = normalise_answer(extract_answer(str(ref), self.answer_tag), self.case_sensitive)
            pred = normalise_answer(extract_answer(text, self.answer_tag), self.case_sensitive)
            out.append(None if not gold else float(pred == gold))
        return out


@register_reward(
    "numeric_match", description="1.0 if the last number of the answer is within tolerance of the reference."
)
class NumericMatch(TextReward):
    r"""1.0 if the last number in the completion's final answer is close to the reference number, else 0.0.

    Formula: ``r = [|a - b| <= max(rel_tol * max(|a|, |b|), abs_tol)]`` (``math.isclose``), where ``a`` is the last
    decimal number of ``extract(completion)`` and ``b`` the one number of ``extract(reference)`` (``####`` answers
    of GSM8K, ``\boxed{}``, ``<answer>`` tags; thousands separators ``1,000`` accepted). Range {0, 1}; ``None`` when
    the reference holds no number or several (``\frac{1}{2}``, ``3/4``: no single number to compare; the accuracy
    reward reads them), 0.0 when the completion holds none. Source: the GSM8K answer check
    (Cobbe et al. 2021, arXiv 2110.14168), with a tolerance.

    Args:
        column (`str`, *optional*): dataset column of the reference; ``None`` tries ``solution`` then ``answer``.
        abs_tol (`float`, defaults to `1e-6`): absolute tolerance, >= 0.
        rel_tol (`float`, defaults to `0.0`): relative tolerance, >= 0.
        answer_tag (`str`, defaults to ``"answer"``): tag whose content is the answer.
        answer_phrase (`str`, *optional*): when set (e.g. ``"The answer is"``, for a system prompt that asks
            "End your reply with: The answer is N."), the answer is the number right after the phrase's last
            occurrence that is followed by one (:func:`~trl_grpo_ext.rewards.text.stated_number`, the same reading
            as ``answer_phrase_format``), and a completion without it scores 0.0.
    """

    #: (lowest, highest) value this reward can take: a uniform group at either is all right / all wrong.
    value_range = (0.0, 1.0)

    def __init__(
        self, column: str | None = None, abs_tol: float = 1e-6, rel_tol: float = 0.0, answer_tag: str = "answer",
        answer_phrase: str | None = None,
    ):
        super().__init__()
        self.column = column
        self.abs_tol = float(check_number("numeric_match abs_tol", abs_tol, Range(low=0, fix="e.g. abs_tol: 1e-6.")))
        self.rel_tol = float(check_number("numeric_match rel_tol", rel_tol, Range(low=0, fix="e.g. rel_tol: 1e-6.")))
        self.answer_tag = check_tag_name("answer_tag", answer_tag)
        self.answer_phrase = _check_phrase(answer_phrase) if answer_phrase is not None else None

    #: What a gold answer must be (`data.golds`' fix for a column none of whose golds this reward can score).
    gold_forms = ("a number, GSM8K's '#### N' or a solution ending in \\boxed{N} (for fractions or LaTeX answers use "
                  "the accuracy reward, which reads them with math-verify)")

    def gold_problem(self, reference: str) -> str:
        """Why this reward cannot score ``reference`` (``""``: it can; else `score` gives ``None``): a gold without a
        number, or with several (``\\frac{1}{2}``, ``3/4``, ``10 - 2\\sqrt{5}``)."""
        answer = extract_answer(reference, self.answer_tag)
        numbers = numbers_in(answer)
        if fraction := LATEX_FRACTION.search(answer):
            return f"it holds a fraction ({fraction[0]}), not one number"
        if not numbers:
            return "it holds no number"
        shown = ", ".join(numbers[:4]) + (", ..." if len(numbers) > 4 else "")
        return "" if len(numbers) == 1 else f"it holds {len(numbers)} numbers ({shown}), not one"

    def score(self, texts: list[str], **kwargs: Any) -> list[float | None]:
        _, refs = read_column(kwargs, self.column or DEFAULT_ANSWER_COLUMNS, len(texts), self.__name__)
        out: list[float | None] = []
        golds: dict[str, float | None] = {}  # each reference read once (a group repeats it G times)
        for text, ref in zip(texts, refs):
            ref = str(ref)
            if ref not in golds:  # 3/4, 3\frac{1}{2}: no one number
                golds[ref] = None if self.gold_problem(ref) else last_number(extract_answer(ref, self.answer_tag))
            gold = golds[ref]
            if self.answer_phrase:
                pred = stated_number(text, self.answer_phrase)
            else:
                pred = last_number(extract_answer(text, self.answer_tag))
            if gold is None:
                out.append(None)
            else:
                out.append(
                    float(pred is not None and math.isclose(pred, gold, rel_tol=self.rel_tol, abs_tol=self.abs_tol))
                )
        return out


@register_reward(
    "answer_phrase_format",
    description="1.0 if the completion ends with '<phrase> N', 0.5 if it states '<phrase> N' elsewhere, else 0.",
)
class AnswerPhraseFormat(TextReward):
    r"""Format reward for prompts that ask "End your reply with: The answer is N.".

    Formula: ``r = 1`` if the completion ends with ``phrase`` followed by a number (an optional ``.``, ``$`` or
    closing whitespace allowed); ``r = 0.5`` if ``phrase`` followed by a number occurs but more text follows it;
    ``r = 0`` otherwise. The phrase is matched case-insensitively. Range {0, 0.5, 1}. The partial credit gives a
    learning signal to groups in which no completion has the full format yet. Source: this package (the format half
    of the answer-sentence convention; compare DeepSeek-R1's format reward, arXiv 2501.12948, §2.2.2).

    Args:
        phrase (`str`, defaults to ``"The answer is"``): the sentence start the system prompt asks for.
    """

    #: (lowest, highest) value this reward can take: a uniform group at either is all right / all wrong.
    value_range = (0.0, 1.0)

    def __init__(self, phrase: str = "The answer is"):
        super().__init__()
        self.phrase = _check_phrase(phrase)
        number = r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
        stated = rf"{re.escape(self.phrase)}[\s:*$]*{number}"  # as rewards.text.stated_number reads it
        self._anywhere = re.compile(stated, re.IGNORECASE)
        self._at_end = re.compile(rf"{stated}\**\s*\.?\s*$", re.IGNORECASE)

    def score(self, texts: list[str], **kwargs: Any) -> list[float | None]:
        return [1.0 if self._at_end.search(t) else 0.5 if self._anywhere.search(t) else 0.0 for t in texts]


class _TagReward(TextReward):
    """Base of the rewards that look for a reasoning tag and an answer tag (``<think>`` / ``<answer>`` by default)."""

    def __init__(self, reasoning_tag: str = "think", answer_tag: str = "answer"):
        super().__init__()
        self.reasoning_tag = check_tag_name("reasoning_tag", reasoning_tag)
        self.answer_tag = check_tag_name("answer_tag", answer_tag)


@register_reward("format", description="1.0 if the completion is <think>...</think> then <answer>...</answer>.")
class Format(_TagReward):
    r"""1.0 if the completion is a reasoning block followed by an answer block, else 0.0.

    Formula: ``r = [completion matches ^\s*<think>.*?</think>\s*<answer>.*?</answer>\s*$]`` (dot matches newlines;
    tag names configurable), range {0, 1}. Source: the format reward of DeepSeek-R1 (arXiv 2501.12948, §2.2.2) as
    implemented in open-r1's ``format_reward``, here tolerant to whitespace between the blocks.

    Args:
        reasoning_tag (`str`, defaults to ``"think"``): tag of the reasoning block.
        answer_tag (`str`, defaults to ``"answer"``): tag of the answer block.
    """

    #: (lowest, highest) value this reward can take: a uniform group at either is all right / all wrong.
    value_range = (0.0, 1.0)

    def __init__(self, reasoning_tag: str = "think", answer_tag: str = "answer"):
        super().__init__(reasoning_tag, answer_tag)
        r, a = re.escape(self.reasoning_tag), re.escape(self.answer_tag)
        self._pattern = re.compile(rf"^\s*<{r}>.*?</{r}>\s*<{a}>.*?</{a}>\s*$", re.DOTALL)

    def score(self, texts: list[str], **kwargs: Any) -> list[float | None]:
        return [float(self._pattern.match(t) is not None) for t in texts]


@register_reward("tag_count", description="0.25 for each of the four reasoning/answer tags present exactly once.")
class TagCount(_TagReward):
    r"""Partial credit for the format tags: 0.25 for each of ``<think>``, ``</think>``, ``<answer>``, ``</answer>``
    that occurs exactly once.

    Formula: ``r = 0.25 * sum_{t in tags} [count(t) == 1]``, range {0, 0.25, 0.5, 0.75, 1}. Source: open-r1's
    ``tag_count_reward`` (itself from willccbb's GRPO demo), here without its newline requirements.

    Args:
        reasoning_tag (`str`, defaults to ``"think"``): tag of the reasoning block.
        answer_tag (`str`, defaults to ``"answer"``): tag of the answer block.
    """

    #: (lowest, highest) value this reward can take: a uniform group at either is all right / all wrong.
    value_range = (0.0, 1.0)

    def score(self, texts: list[str], **kwargs: Any) -> list[float | None]:
        tags = [f"<{t}>" for t in (self.reasoning_tag, self.answer_tag)]
        tags += [f"</{t}>" for t in (self.reasoning_tag, self.answer_tag)]
        return [0.25 * sum(text.count(tag) == 1 for tag in tags) for text in texts]


_UNITS = ("tokens", "chars", "words")


def completion_lengths(texts: list[str], unit: str, completion_ids: Any, reward: str) -> list[int]:
    """Length of each completion in ``unit``: ``"tokens"`` (``len(completion_ids[i])``), ``"chars"`` or ``"words"``
    (whitespace-separated). Raises ValueError when tokens are asked for and ``completion_ids`` is missing."""
    if unit == "tokens":
        if completion_ids is None or len(completion_ids) != len(texts):
            raise ValueError(
                f"Reward {reward!r} with unit='tokens' needs `completion_ids` (one list of token ids per completion, "
                "given by GRPOTrainer); outside a trainer pass them or use unit: chars."
            )
        return [len(ids) for ids in completion_ids]
    if unit == "chars":
        return [len(t) for t in texts]
    return [len(t.split()) for t in texts]


@register_reward(
    "length",
    description="1.0 inside [min_length, max_length], falling linearly to 0 outside.",
    example_kwargs={"min_length": 2, "max_length": 8},
)
class Length(TextReward):
    r"""Reward a completion length inside ``[min_length, max_length]``, falling linearly to 0 outside it.

    Formula, with ``L`` the completion length in ``unit``:
    ``r = 1`` if ``min_length <= L <= max_length``; ``r = L / min_length`` if ``L < min_length``;
    ``r = max(0, 1 - (L - max_length) / max_length)`` if ``L > max_length`` (0 from ``2 * max_length`` on).
    Range [0, 1]. Source: this package (a plain target-range shaping term; compare the length penalty of Kimi k1.5,
    arXiv 2501.12599, §2.3.3).

    Args:
        max_length (`int`): upper end of the target range, > 0.
        min_length (`int`, defaults to `0`): lower end, 0 <= min_length <= max_length.
        unit (`str`, defaults to ``"tokens"``): ``"tokens"`` (from ``completion_ids``, as ``max_completion_length``),
            ``"chars"`` or ``"words"``.
    """

    def __init__(self, max_length: int, min_length: int = 0, unit: str = "tokens"):
        super().__init__()
        max_length = check_number(
            "length max_length", max_length, Range(low=0, low_open=True, integer=True, fix="e.g. max_length: 256.")
        )
        min_length = check_number(
            "length min_length",
            min_length,
            Range(low=0, high=max_length, integer=True, fix=f"keep min_length <= max_length={max_length}."),
        )
        self.unit = check_choice("length unit", unit, _UNITS, error=ValueError)
        self.max_length, self.min_length = max_length, min_length

    def score(self, texts: list[str], completion_ids: Any = None, **kwargs: Any) -> list[float | None]:
        out: list[float | None] = []
        for n in completion_lengths(texts, self.unit, completion_ids, self.__name__):
            if n < self.min_length:
                out.append(n / self.min_length)
            elif n <= self.max_length:
                out.append(1.0)
            else:
                out.append(max(0.0, 1.0 - (n - self.max_length) / self.max_length))
        return out


@register_reward(
    "repetition_penalty", description="Penalty for repeated word n-grams: (1 - unique/total) * max_penalty."
)
class RepetitionPenalty(TextReward):
    r"""Penalise repeated word n-grams.

    Formula: ``r = (1 - #unique n-grams / #n-grams) * max_penalty`` over the lower-cased whitespace-separated words
    of the completion; 0 when it has fewer than ``ngram_size`` words. Range [max_penalty, 0]. Source: Appendix C.2 of
    "Demystifying Long Chain-of-Thought Reasoning" (Yeo et al. 2025, arXiv 2502.03373), words as in open-r1's
    ``get_repetition_penalty_reward``; computed by TRL's ``trl.rewards.get_repetition_penalty_reward`` applied to the
    words (the registered ``repetition_penalty_reward`` is TRL's token-id version).

    Args:
        ngram_size (`int`, defaults to `3`): n, >= 1.
        max_penalty (`float`, defaults to `-1.0`): value of a fully repetitive completion, <= 0.
    """

    def __init__(self, ngram_size: int = 3, max_penalty: float = -1.0):
        super().__init__()
        self.ngram_size = check_number(
            "repetition_penalty ngram_size", ngram_size, Range(low=1, integer=True, fix="e.g. ngram_size: 3.")
        )
        self.max_penalty = float(
            check_number("repetition_penalty max_penalty", max_penalty, Range(high=0, fix="e.g. max_penalty: -1.0."))
        )

    def score(self, texts: list[str], **kwargs: Any) -> list[float | None]:
        from trl.rewards import get_repetition_penalty_reward

        penalty = get_repetition_penalty_reward(self.ngram_size, self.max_penalty)
        return [float(r) for r in penalty(completion_ids=[t.lower().split() for t in texts])]


@register_reward("char_fraction", description="Fraction of completion characters equal to the `target` column.")
class CharFraction(TextReward):
    r"""The embedded count-char task: the fraction of the completion's characters equal to the target character.

    Formula: ``r = #{i : c_i == target} / max(1, len(completion))``, range [0, 1] (0 for an empty completion).
    Source: this package's synthetic task (:mod:`trl_grpo_ext.models.embedded.tiny`).

    Args:
        column (`str`, defaults to ``"target"``): dataset column holding the target character (one per completion).
    """

    #: (lowest, highest) value this reward can take: a uniform group at either is all right / all wrong.
    value_range = (0.0, 1.0)

    def __init__(self, column: str = "target"):
        super().__init__()
        self.column = column

    def score(self, texts: list[str], **kwargs: Any) -> list[float | None]:
        name, targets = read_column(kwargs, self.column, len(texts), self.__name__)
        out: list[float | None] = []
        for i, (text, target) in enumerate(zip(texts, targets)):
            if not isinstance(target, str) or len(target) != 1:
                raise ValueError(f"char_fraction: column {name!r} row {i} is {target!r}; it must be one character.")
            out.append(text.count(target) / max(1, len(text)))
        return out
