"""Math answer accuracy checked with ``math-verify`` (imported on first call; ``pip install trl-grpo-ext[math]``)."""

from __future__ import annotations

import logging
import re
import threading
from typing import Any

from ..checks import Range
from .parameters import check_number
from .registry import register_reward
from .text import DEFAULT_ANSWER_COLUMNS, TextReward, check_tag_name, last_boxed, read_column

logger = logging.getLogger(__name__)

_INSTALL_HINT = "Install it with `pip install trl-grpo-ext[math]` (or `pip install math-verify`)."


def _math_verify():
    try:
        import math_verify
        from latex2sympy2_extended import NormalizationConfig
    except ImportError as exc:
        raise ImportError(f"The `accuracy` reward needs the `math-verify` package. {_INSTALL_HINT}") from exc
    return math_verify, NormalizationConfig


def answer_span(text: str, answer_tag: str = "answer") -> str:
    r"""The part of ``text`` that holds the final answer, by the first rule that applies: the content of the last
    ``<answer_tag>...</answer_tag>`` (what the R1-style system prompt asks for), else the last ``\boxed{...}`` (kept
    boxed), else what follows the last ``####`` (GSM8K), else the whole text. A plain number loses its thousands
    separators (``1,200`` -> ``1200``; math-verify would read ``1,200`` as the set {1, 200}).

    >>> answer_span("<think>2 * 600</think>\n<answer>1,200</answer>")
    '1200'
    >>> answer_span("Natalia sold 72 clips.\n#### 72")
    '72'
    """
    tagged = re.findall(rf"<{re.escape(answer_tag)}>(.*?)</{re.escape(answer_tag)}>", text, flags=re.DOTALL)
    if tagged:
        return _plain_number(tagged[-1].strip())
    boxed = last_boxed(text)
    if boxed is not None:
        return f"\\boxed{{{boxed}}}"
    if "####" in text:
        return _plain_number(text.rsplit("####", 1)[1].strip())
    return text


def _plain_number(span: str) -> str:
    """``span`` without thousands separators when it is one number such as ``1,200`` or ``-3,000.5``."""
    return span.replace(",", "") if _THOUSANDS.fullmatch(span) else span


_THOUSANDS = re.compile(r"[-+]?\$?\d{1,3}(?:,\d{3})+(?:\.\d+)?")


@register_reward("accuracy", "math_accuracy", description="1.0 if the math answer equals the reference (math-verify).")
class Accuracy(TextReward):
    r"""1.0 if the completion's final math answer is equivalent to the reference answer, else 0.0 (math-verify).

    Formula: ``r = verify(parse(span(reference)), parse(span(completion)))``, range {0, 1}, where ``span``
    (:func:`answer_span`) keeps the last ``<answer>...</answer>`` content, else the last ``\boxed{...}``, else what
    follows ``####`` (GSM8K: ``"... #### 72"``), else the whole text, and
    ``parse``/``verify`` are math-verify's (symbolic equivalence, so ``\frac{1}{2}`` equals ``0.5``). The completion
    is parsed with LaTeX (boxed first, units normalised) then plain-expression extraction, first match. A reference
    math-verify cannot parse gives ``None`` (example skipped, as in TRL's ``accuracy_reward``): such completions are
    counted at every call in the metric ``rewards/<name>/unscorable_gold`` (completions per call, averaged over
    processes, through TRL's ``log_metric``) and the first such reference is warned about once. An unparseable
    completion gives 0.0. Source: TRL's ``trl.rewards.accuracy_reward`` / open-r1's accuracy reward, extended to
    GSM8K answers and plain-text completions; math-verify by Hugging Face (github.com/huggingface/Math-Verify).

    Args:
        column (`str`, *optional*): dataset column of the reference answer; ``None`` tries ``solution`` then
            ``answer`` (GSM8K).
        timeout_seconds (`int`, defaults to `5`): math-verify's per-call parse/verify timeout on the main thread
            (signal based; disabled on other threads, as TRL does).
        answer_tag (`str`, defaults to ``"answer"``): tag whose content is the answer.

    Raises:
        ImportError: math-verify is not installed (naming ``pip install trl-grpo-ext[math]``), on first call.
    """

    required_packages = (("math_verify", "math-verify"),)

    def __init__(self, column: str | None = None, timeout_seconds: int = 5, answer_tag: str = "answer"):
        super().__init__()
        self.answer_tag = check_tag_name("accuracy answer_tag", answer_tag)
        self.column = column
        self.timeout_seconds = check_number(
            "accuracy timeout_seconds",
            timeout_seconds,
            Range(low=0, low_open=True, integer=True, fix="e.g. timeout_seconds: 5."),
        )

    def score(self, texts: list[str], **kwargs: Any) -> list[float | None]:
        mv, NormalizationConfig = _math_verify()
        column, refs = read_column(kwargs, self.column or DEFAULT_ANSWER_COLUMNS, len(texts), self.__name__)
        main = threading.current_thread() is threading.main_thread()
        timeout = self.timeout_seconds if main else None
        if not main:
            for name in ("math_verify.parser", "math_verify.grader"):
                logging.getLogger(name).setLevel(logging.ERROR)
        extraction = [
            mv.LatexExtractionConfig(normalization_config=NormalizationConfig(units=True), boxed_match_priority=0),
            mv.ExprExtractionConfig(),
        ]
        out: list[float | None] = []
        golds: dict[str, Any] = {}  # each reference parsed once (a group repeats it G times)
        unscorable = 0
        for text, ref in zip(texts, refs):
            ref = str(ref)
            if ref not in golds:
                golds[ref] = mv.parse(answer_span(ref, self.answer_tag), parsing_timeout=timeout)
            gold = golds[ref]
            if not gold:
                out.append(None)
                unscorable += 1
                self._warn_unscorable(ref, column)
                continue
            pred = mv.parse(
                answer_span(text, self.answer_tag), extraction_config=extraction, extraction_mode="first_match", parsing_timeout=timeout
            )
            out.append(float(bool(pred) and mv.verify(gold, pred, timeout_seconds=timeout)))
        log_metric = kwargs.get("log_metric")
        if callable(log_metric):
            log_metric(f"rewards/{self.__name__}/unscorable_gold", float(unscorable))
        return out

    def _warn_unscorable(self, reference: str, column: str) -> None:
        if getattr(self, "_warned_unscorable", False):
            return
        self._warned_unscorable = True
        text = reference if len(reference) <= 120 else reference[:117] + "..."
        logger.warning(
            "Reward %r: math-verify cannot parse the reference answer %r (dataset column %r); its completions get "
            "None (left out of the reward) and are counted in rewards/%s/unscorable_gold. Warned once; fix the "
            "dataset's answers (GSM8K: '#### <number>'; else a number, an expression or \\boxed{...}).",
            self.__name__, text, column, self.__name__,
        )
