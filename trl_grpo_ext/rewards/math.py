"""Math answer accuracy checked with ``math-verify`` (imported on first call; ``pip install trl-grpo-ext[math]``).

A reference answer (the "gold") is read the way datasets store it: bare LaTeX (MATH-500's ``answer`` column, e.g.
``10 - 2\\sqrt{5}``), ``$...$``, ``\\boxed{...}`` at the end of a worked solution (NuminaMath), a plain number, or
GSM8K's ``... #### 72``. math-verify extracts LaTeX only between delimiters, and without them falls back to the last
number (``10 - 2\\sqrt{5}`` would be read as ``2``), so :func:`gold_latex` wraps an undelimited answer in ``$...$``
and refuses a gold that would not be scored as one whole answer (see docs/rewards.md).
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Any

from ..config.checks import Range
from .parameters import check_number
from .registry import register_reward
from .text import DEFAULT_ANSWER_COLUMNS, LATEX_THOUSANDS, TextReward, check_tag_name, last_boxed, read_column

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
# LaTeX math delimiters math-verify's LaTeX extraction looks for; a span without any of them is "undelimited".
_DELIMITED = re.compile(r"(?<!\\)\$|\\\(|\\\[|\\boxed\s*\{|\\fbox\s*\{")
# What may hold letters without being prose: \text{...}-like groups and commands such as \sqrt, \pi.
_TEXT_GROUP = re.compile(r"\\(?:text|textbf|textit|mathrm|mathbf|mbox|operatorname)\s*\{[^{}]*\}")
_COMMAND = re.compile(r"\\[A-Za-z]+")
_WORD = re.compile(r"[A-Za-z]{2,}")


def prose_words(span: str) -> list[str]:
    r"""Runs of two or more letters in ``span`` outside LaTeX commands and ``\text{...}`` groups: words of prose,
    which math-verify's LaTeX parser would read as products of one-letter symbols (``clips`` -> c*l*i*p*s).

    >>> prose_words(r"72 clips")
    ['clips']
    >>> prose_words(r"\frac{\pi}{4} + \text{Evelyn} + 2x")
    []
    """
    return _WORD.findall(_COMMAND.sub(" ", _TEXT_GROUP.sub(" ", span)))


# **72** or __72__ inside a sentence (not 2**3, a power), or *72* / _72_ around the whole answer (not 2*3*4)
_EMPHASIS = re.compile(r"(?<![\w)*])(\*\*|__)(?=\S)(.+?)(?<=\S)\1(?![\w(*])")
_WHOLE_EMPHASIS = re.compile(r"([*_])([^*_\s](?:[^*_]*[^*_\s])?)\1")
_TRAILING = re.compile(r"(?<=[\w}$)\]])\s*[.;,:]+\s*$")


def as_latex(span: str) -> str:
    r"""``span`` wrapped in ``$...$`` when it has no LaTeX delimiter (``$``, ``\(``, ``\[``, ``\boxed{``) and no
    prose words, so that math-verify parses the whole expression rather than its last number; else ``span``. First,
    Markdown emphasis (``**72**``, ``*72*``, ``__72__``) is unwrapped and the sentence's closing ``.``, ``;``, ``,`` or
    ``:`` dropped: math-verify reads ``72.`` or ``**72**`` as nothing and scores a right answer 0; LaTeX's thousands
    separators (``1\,000``, ``1{,}000``) go as ``1,000`` does.

    >>> as_latex(r"10 - 2\sqrt{5}")
    '$10 - 2\\sqrt{5}$'
    >>> as_latex(r"\boxed{2}"), as_latex("The answer is 7")
    ('\\boxed{2}', 'The answer is 7')
    """
    span = _EMPHASIS.sub(r"\2", span.strip())
    span = _WHOLE_EMPHASIS.fullmatch(span)[2] if _WHOLE_EMPHASIS.fullmatch(span) else span
    span = LATEX_THOUSANDS.sub(",", span)
    if prose_words(span):  # math-verify reads a sentence's closing period; a prose answer keeps it
        return span
    span = _plain_number(_TRAILING.sub("", span))
    if not span or _DELIMITED.search(span):
        return span
    return f"${span}$"


def gold_latex(mv: Any, reference: str, answer_tag: str = "answer", timeout: int | None = None) -> tuple[str, str]:
    r"""The reference answer as the string math-verify should parse, or ``("", reason)`` when it cannot be scored
    as one whole answer.

    The answer span (:func:`answer_span`: ``<answer>`` content, last ``\boxed{}``, what follows ``####``, else the
    whole reference) is wrapped in ``$...$`` when it has no delimiter (``$``, ``\(``, ``\[``, ``\boxed{``; an
    escaped ``\$`` is a dollar sign). Refused, with the reason: a span math-verify parses to nothing; an undelimited
    span with prose words whose parse keeps symbols (``72 clips`` would be ``72*c*i*l*p*s``; ``12 cm`` is fine, the
    unit is normalised away); several ``$...$`` formulas and no ``\boxed{}`` (a worked solution without a final
    answer, of which math-verify would score one formula).

    Args:
        mv: the ``math_verify`` module. reference (`str`): the dataset's answer. answer_tag (`str`): the answer tag.
        timeout (`int`, *optional*): math-verify's parse timeout in seconds (``None``: no timeout).

    Returns:
        `tuple[str, str]`: ``(latex, "")`` for a scorable gold, ``("", reason)`` otherwise.
    """
    span = answer_span(str(reference), answer_tag).strip()
    bare = not _DELIMITED.search(span)
    latex = f"${span}$" if bare and span else span
    if not bare and not span.startswith("\\boxed") and span.replace("\\$", "").replace("$$", "$").count("$") >= 4:
        return "", "a worked solution with several $...$ formulas and no final \\boxed{...} answer"
    parsed = mv.parse(latex, parsing_timeout=timeout)
    if not parsed:
        return "", "math-verify parses it to nothing"
    words = prose_words(span) if bare else []
    if words and getattr(parsed[0], "free_symbols", None):
        return "", f"its words {words[:3]} would be read as symbols ({parsed[-1]!r})"
    return latex, ""


@register_reward("accuracy", "math_accuracy", description="1.0 if the math answer equals the reference (math-verify).")
class Accuracy(TextReward):
    r"""1.0 if the completion's final math answer is equivalent to the reference answer, else 0.0 (math-verify).

    Formula: ``r = verify(parse(gold_latex(reference)), parse(as_latex(span(completion))))``, range {0, 1}, where
    ``span`` (:func:`answer_span`) keeps the last ``<answer>...</answer>`` content, else the last ``\boxed{...}``,
    else what follows ``####`` (GSM8K: ``"... #### 72"``), else the whole text; :func:`gold_latex` and
    :func:`as_latex` wrap an undelimited answer (MATH-500's bare ``10 - 2\sqrt{5}``) in ``$...$`` so that the whole
    expression is parsed; ``parse``/``verify`` are math-verify's (symbolic equivalence, so ``\frac{1}{2}`` equals
    ``0.5``). The completion is parsed with LaTeX (boxed first, units normalised) then plain-expression extraction,
    first match. A reference that cannot be scored as one whole answer (math-verify parses it to nothing, or it is
    prose, or a worked solution without ``\boxed{}``: :func:`gold_latex`) gives ``None`` (example skipped, as in
    TRL's ``accuracy_reward``): such completions are counted at every call in the metric
    ``rewards/<name>/unscorable_gold`` (completions per call, averaged over processes, through TRL's ``log_metric``)
    and the first such reference is warned about once, with the reason. An unparseable completion gives 0.0.
    Source: TRL's ``trl.rewards.accuracy_reward`` / open-r1's accuracy reward, extended to bare-LaTeX and GSM8K
    answers and plain-text completions; math-verify by Hugging Face (github.com/huggingface/Math-Verify).

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
        mv, _ = _math_verify()
        column, refs = read_column(kwargs, self.column or DEFAULT_ANSWER_COLUMNS, len(texts), self.__name__)
        timeout = quiet_off_main_thread(self.timeout_seconds)
        extraction = [
            # math-verify's own normalisation (units, malformed operators such as \frac12 and \sqrt2, nits): TRL
            # 1.16's NormalizationConfig(units=True) switches the last two off, and such right answers scored 0
            mv.LatexExtractionConfig(boxed_match_priority=0),
            mv.ExprExtractionConfig(),
        ]
        out: list[float | None] = []
        golds: dict[str, Any] = {}  # each reference parsed once (a group repeats it G times)
        unscorable = 0
        for text, ref in zip(texts, refs):
            ref = str(ref)
            if ref not in golds:
                latex, reason = gold_latex(mv, ref, self.answer_tag, timeout)
                golds[ref] = mv.parse(latex, parsing_timeout=timeout) if latex else None
                if reason:
                    warn_unscorable(self, ref, column, reason)
            gold = golds[ref]
            if not gold:
                out.append(None)
                unscorable += 1
                continue
            pred = mv.parse(
                as_latex(answer_span(text, self.answer_tag)),
                extraction_config=extraction,
                extraction_mode="first_match",
                parsing_timeout=timeout,
            )
            out.append(float(bool(pred) and mv.verify(gold, pred, timeout_seconds=timeout)))
        log_metric = kwargs.get("log_metric")
        if callable(log_metric):
            log_metric(f"rewards/{self.__name__}/unscorable_gold", float(unscorable))
        return out


def quiet_off_main_thread(timeout_seconds: int) -> int | None:
    """math-verify's timeout for this thread: ``timeout_seconds`` on the main thread, ``None`` elsewhere (its timeout
    is signal based), where its parser and grader loggers are also set to ERROR (as TRL does)."""
    if threading.current_thread() is threading.main_thread():
        return timeout_seconds
    for name in ("math_verify.parser", "math_verify.grader"):
        logging.getLogger(name).setLevel(logging.ERROR)
    return None


def warn_unscorable(reward: Any, reference: str, column: str, reason: str) -> None:
    """Warn once per reward object that ``reference`` (dataset column ``column``) cannot be scored, and why."""
    if getattr(reward, "_warned_unscorable", False):
        return
    reward._warned_unscorable = True
    text = reference if len(reference) <= 120 else reference[:117] + "..."
    logger.warning(
        "Reward %r: math-verify cannot parse the reference answer %r (dataset column %r) as one whole answer: %s. "
        "Its completions get None (left out of the reward) and are counted in rewards/%s/unscorable_gold. Warned "
        "once; fix the dataset's answers (GSM8K: '#### <number>'; else a number, a LaTeX expression such as "
        "10 - 2\\sqrt{5}, or a solution ending in \\boxed{...}).",
        reward.__name__, text, column, reason, reward.__name__,
    )
