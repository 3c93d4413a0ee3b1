"""Can the rewards score a split's gold answers? Each distinct gold of the column a reward reads is read as that
reward reads it: a split none of whose golds a reward can score is refused before the model loads, one with some is
warned about (their completions get ``None``: the group is uniform and teaches nothing)."""

from __future__ import annotations

import re

from .checks import DatasetError, registered_rewards

#: The gold answers a math-verify reward reads (`rewards.math.gold_latex`).
MATH_GOLD_FORMS = ("a number, a LaTeX expression such as 10 - 2\\sqrt{5}, a solution ending in \\boxed{...} or "
                   "GSM8K's '#### N'")
_PLAIN_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")


def gold_column(reward, column_names) -> str | None:
    """The column ``reward`` reads its gold answers from in a split with ``column_names``: ``accuracy``,
    ``numeric_match``, ``exact_match`` (their ``column``, else ``solution`` then ``answer``) and TRL's math rewards
    (``solution``); ``None`` for another reward, or when the column is absent (refused elsewhere)."""
    from ..rewards.math import Accuracy
    from ..rewards.text import DEFAULT_ANSWER_COLUMNS

    if isinstance(reward, Accuracy) or hasattr(reward, "gold_problem"):
        candidates = (reward.column,) if reward.column else DEFAULT_ANSWER_COLUMNS
    elif getattr(reward, "_math_gold", False):
        candidates = ("solution",)
    else:
        return None
    return next((c for c in candidates if c in column_names), None)


def check_golds(dataset, where: str, specs) -> list[str]:
    """Refuse a split none of whose gold answers a reward can score; warn when some cannot be.

    Args:
        dataset (`datasets.Dataset`): the split. where (`str`): how to name it (`checks.describe`).
        specs (iterable of `RewardSpec`): the run's rewards; import paths and rewards that do not build are skipped
            (the config checks report those), and so is a column blank in every row (`checks.check_reward_values`).

    Returns:
        `list[str]`: one warning per reward whose column holds some unscorable golds (how many, the first row, why).

    Raises:
        DatasetError: every gold of such a column is unscorable: the reward would score no completion.
    """
    warnings = []
    for spec, reward in registered_rewards(specs):
        column = gold_column(reward, dataset.column_names)
        if column is None or len(dataset) == 0 or all(not _key(v).strip() for v in dataset[column]):
            continue
        try:
            reasons = _reasons(reward, dataset[column])
        except ImportError:  # math-verify missing: the package check names the install
            continue
        bad = [i for i, value in enumerate(dataset[column]) if reasons[_key(value)]]
        if not bad:
            continue
        first = dataset[column][bad[0]]
        shown = repr(str(first) if len(str(first)) <= 60 else str(first)[:57] + "...")
        detail = f"row {bad[0]}: {shown}, {reasons[_key(first)]}"
        if len(bad) == len(dataset):
            raise DatasetError(
                f"{where}: none of the {len(dataset)} gold answers in column {column!r} can be scored by reward "
                f"{spec.name!r} ({detail}), so it would score no completion. Fix: give each answer as "
                f"{getattr(reward, 'gold_forms', MATH_GOLD_FORMS)}, or point the reward's column parameter at the "
                "column that holds them.")
        warnings.append(f"{where}: {len(bad)} of {len(dataset)} gold answers in column {column!r} cannot be scored "
                        f"by reward {spec.name!r} ({detail}); their completions get None (left out of that reward).")
    return warnings


def _key(value) -> str:
    return "" if value is None else str(value)


def _reasons(reward, values) -> dict[str, str]:
    """Each distinct gold (as text) -> why ``reward`` cannot score it (``""``: it can)."""
    if hasattr(reward, "gold_problem"):
        return {value: reward.gold_problem(value) for value in set(map(_key, values))}
    from ..rewards.math import _math_verify, gold_latex, quiet_off_main_thread

    mv, _ = _math_verify()
    timeout = quiet_off_main_thread(5)
    answer_tag = getattr(reward, "answer_tag", "answer")
    reasons: dict[str, str] = {}
    for value in map(_key, values):
        if value in reasons:
            continue
        if _PLAIN_NUMBER.fullmatch(value.strip()):  # math-verify reads a plain number as itself (GSM8K: 7k of them)
            reasons[value] = ""
        else:
            reasons[value] = "it is empty" if not value.strip() else gold_latex(mv, value, answer_tag, timeout)[1]
    return reasons
