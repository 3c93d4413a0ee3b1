"""TRL's own rewards (``trl.rewards``), registered under their TRL names, imported from TRL on first call.

Each is a small picklable adapter around the TRL callable: it imports ``trl.rewards`` only when called (so importing
this package stays free of trl and torch), and turns plain-text completions into the one-message conversational form
TRL's rewards read (``completion[0]["content"]``), so they work for both completion formats. The formulas are TRL's;
each docstring restates it with its source.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from ..config.checks import Range
from .parameters import check_number
from .registry import register_reward


class TrlReward:
    """Adapter calling ``trl.rewards.<_function>`` (or the reward a TRL factory returns) on normalised completions.

    Subclasses set ``_function`` (an attribute of ``trl.rewards``) and ``_factory`` (whether that attribute is a
    factory called with the parameters, like ``get_soft_overlong_punishment``). Parameters of a plain function are
    passed with every call.
    """

    _function: str = ""
    _factory: bool = False
    #: Dataset columns read (one tuple of alternatives each) and packages imported ((import name, pip requirement)),
    #: checked before the model loads by :mod:`trl_grpo_ext.validation`.
    required_columns: tuple[tuple[str, ...], ...] = ()
    required_packages: tuple[tuple[str, str], ...] = ()
    #: Whether the ``solution`` column holds math answers, read as :func:`~trl_grpo_ext.rewards.math.gold_latex`
    #: reads them (bare LaTeX wrapped in ``$...$``; a gold that is not one whole answer passed as ``""``, so TRL
    #: gives ``None``) before TRL parses them.
    _math_gold: bool = False

    def __init__(self, **params: Any) -> None:
        self.__name__ = getattr(type(self), "__reward_name__", type(self).__name__)
        self.params = params
        self._fn = None

    def _resolve(self):
        if self._fn is None:
            obj = getattr(import_module("trl.rewards"), self._function)
            self._fn = obj(**self.params) if self._factory else obj
        return self._fn

    def __call__(self, completions=None, **kwargs: Any) -> list[float | None]:
        if completions is None:
            raise ValueError(f"Reward {self.__name__!r} was called without `completions`.")
        messages = [[{"role": "assistant", "content": c}] if isinstance(c, str) else c for c in completions]
        extra = {} if self._factory else self.params
        if self._math_gold and kwargs.get("solution") is not None:
            kwargs["solution"] = self._gold_latex(kwargs["solution"])
        return self._resolve()(completions=messages, **kwargs, **extra)

    def _gold_latex(self, solutions: list) -> list[str]:
        from .math import _math_verify, gold_latex, quiet_off_main_thread, warn_unscorable  # math-verify on first call

        mv, _ = _math_verify()
        timeout = quiet_off_main_thread(5)
        read: dict[str, str] = {}  # each solution read once (a group repeats it G times)
        for solution in map(str, solutions):
            if solution not in read:
                read[solution], reason = gold_latex(mv, solution, timeout=timeout)
                if reason:
                    warn_unscorable(self, solution, "solution", reason)
        return [read[str(solution)] for solution in solutions]

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_fn": None}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.params.items())})"


@register_reward("think_format_reward", description="TRL: 1.0 if the completion starts with <think>...</think>.")
class ThinkFormatReward(TrlReward):
    r"""TRL's ``think_format_reward``: 1.0 if the completion matches ``^<think>(?!.*<think>)(.*?)</think>.*$``, else
    0.0. Range {0, 1}. Source: ``trl/rewards/format_rewards.py``."""

    _function = "think_format_reward"

    def __init__(self) -> None:
        super().__init__()


@register_reward("accuracy_reward", description="TRL: math-verify accuracy against the `solution` column.")
class AccuracyReward(TrlReward):
    r"""TRL's ``accuracy_reward``: 1.0 if math-verify finds the completion's LaTeX answer (boxed first) equivalent to
    the ``solution`` column, 0.0 otherwise, ``None`` when the solution is unparseable. Range {0, 1}. Needs
    ``math-verify``. Source: ``trl/rewards/accuracy_rewards.py``. The solutions are first read as ``accuracy`` reads
    a reference (:func:`~trl_grpo_ext.rewards.math.gold_latex`: bare LaTeX such as ``10 - 2\sqrt{5}`` is wrapped in
    ``$...$``, GSM8K's ``####`` answer kept, a gold that is not one whole answer gives ``None``, warned once); the
    same holds for ``reasoning_accuracy_reward`` and ``cosine_scaled_reward``. Our ``accuracy`` also reads
    plain-number and ``<answer>`` completions."""

    _function = "accuracy_reward"
    required_columns = (("solution",),)
    required_packages = (("math_verify", "math-verify"),)
    _math_gold = True

    def __init__(self) -> None:
        super().__init__()


@register_reward(
    "reasoning_accuracy_reward", description="TRL: math-verify accuracy of the text after the reasoning delimiter."
)
class ReasoningAccuracyReward(TrlReward):
    r"""TRL's ``reasoning_accuracy_reward``: as ``accuracy_reward`` on the text after the last reasoning delimiter;
    0.0 when no delimiter is present (incomplete reasoning), ``None`` for an unparseable ``solution``. Range {0, 1}.
    Source: ``trl/rewards/accuracy_rewards.py``.

    Args:
        reasoning_delimiters (`list[str]`, *optional*): where reasoning ends; TRL's default ``["</think>"]``.
    """

    _function = "reasoning_accuracy_reward"
    required_columns = (("solution",),)
    required_packages = (("math_verify", "math-verify"),)
    _math_gold = True

    def __init__(self, reasoning_delimiters: list[str] | None = None) -> None:
        super().__init__(
            **({} if reasoning_delimiters is None else {"reasoning_delimiters": list(reasoning_delimiters)})
        )


@register_reward(
    "cosine_scaled_reward",
    "cosine",  # open-r1's name
    description="TRL: correctness scaled by completion length on a cosine schedule.",
    example_kwargs={"max_len": 8},
)
class CosineScaledReward(TrlReward):
    r"""TRL's ``get_cosine_scaled_reward``: ``r = v_min + (v_max - v_min)(1 + cos(pi * min(|y|/max_len, 1))) / 2``
    with ``(v_min, v_max)`` = (min_value_correct, max_value_correct) for a correct answer (math-verify, ``solution``
    column) and (max_value_wrong, min_value_wrong) for a wrong one; ``|y|`` in tokens. Range [min_value_wrong,
    max_value_correct]. Source: Appendix C.1 of arXiv 2502.03373; ``trl/rewards/accuracy_rewards.py``.

    Args:
        max_len (`int`): length in tokens normalising the schedule.
        min_value_wrong, max_value_wrong, min_value_correct, max_value_correct (`float`): TRL's defaults -1.0, -0.5,
            0.5, 1.0.
    """

    _function = "get_cosine_scaled_reward"
    required_columns = (("solution",),)
    required_packages = (("math_verify", "math-verify"),)
    _math_gold = True
    _factory = True

    def __init__(
        self,
        max_len: int,
        min_value_wrong: float = -1.0,
        max_value_wrong: float = -0.5,
        min_value_correct: float = 0.5,
        max_value_correct: float = 1.0,
    ) -> None:
        super().__init__(
            max_len=max_len,
            min_value_wrong=min_value_wrong,
            max_value_wrong=max_value_wrong,
            min_value_correct=min_value_correct,
            max_value_correct=max_value_correct,
        )


@register_reward("repetition_penalty_reward", description="TRL: penalty for repeated token-id n-grams.")
class RepetitionPenaltyReward(TrlReward):
    r"""TRL's ``get_repetition_penalty_reward`` on token ids: ``r = (1 - #unique n-grams / #n-grams) * max_penalty``
    over ``completion_ids``; 0 below ``ngram_size`` tokens. Range [max_penalty, 0]. Source: Appendix C.2 of
    arXiv 2502.03373; ``trl/rewards/other_rewards.py``.

    Args:
        ngram_size (`int`, defaults to `3`): n.
        max_penalty (`float`, defaults to `-1.0`): value of a fully repetitive completion, <= 0 (TRL raises
            otherwise, on first call).
    """

    _function = "get_repetition_penalty_reward"
    _factory = True

    def __init__(self, ngram_size: int = 3, max_penalty: float = -1.0) -> None:
        super().__init__(ngram_size=ngram_size, max_penalty=max_penalty)


@register_reward(
    "soft_overlong",
    "soft_overlong_punishment_reward",
    description="DAPO soft overlong punishment: 0, then linear down to -1 over the last soft_punish_cache tokens.",
    example_kwargs={"max_completion_len": 8, "soft_punish_cache": 4},
)
class SoftOverlong(TrlReward):
    r"""DAPO's soft overlong punishment (Eq. 13 of arXiv 2503.14476), computed by TRL's
    ``get_soft_overlong_punishment`` on the completion length ``|y|`` in tokens (``completion_ids``):

    ``r = 0`` if ``|y| <= L_max - L_cache``; ``r = ((L_max - L_cache) - |y|) / L_cache`` if
    ``L_max - L_cache < |y| <= L_max``; ``r = -1`` if ``|y| > L_max``. Range [-1, 0]. Source: DAPO (Yu et al. 2025,
    arXiv 2503.14476, §3.4); ``trl/rewards/other_rewards.py``.

    Args:
        max_completion_len (`int`): ``L_max`` in tokens, > 0; usually the trainer's ``max_completion_length``
            (DAPO used 20480).
        soft_punish_cache (`int`): ``L_cache`` in tokens, 0 <= L_cache <= L_max (DAPO used 4096).
    """

    _function = "get_soft_overlong_punishment"
    _factory = True

    def __init__(self, max_completion_len: int, soft_punish_cache: int) -> None:
        lengths = Range(low=0, integer=True, fix="e.g. max_completion_len: 1024, soft_punish_cache: 256.")
        max_completion_len = check_number("soft_overlong max_completion_len", max_completion_len, lengths)
        soft_punish_cache = check_number("soft_overlong soft_punish_cache", soft_punish_cache, lengths)
        if max_completion_len == 0 or soft_punish_cache > max_completion_len:
            raise ValueError(
                f"soft_overlong needs 0 <= soft_punish_cache ({soft_punish_cache}) <= max_completion_len "
                f"({max_completion_len}) and max_completion_len > 0, e.g. max_completion_len: 1024, "
                "soft_punish_cache: 256."
            )
        super().__init__(max_completion_len=max_completion_len, soft_punish_cache=soft_punish_cache)

    def __call__(self, completions=None, completion_ids=None, **kwargs: Any) -> list[float | None]:
        if completion_ids is None:
            raise ValueError(
                "Reward 'soft_overlong' needs `completion_ids` (token ids per completion, given by GRPOTrainer)."
            )
        return super().__call__(completions=completions, completion_ids=completion_ids, **kwargs)
