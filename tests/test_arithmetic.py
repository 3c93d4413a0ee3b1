"""The embedded arithmetic task: GSM8K-shaped rows, correct gold answers, disjoint splits, seeded."""

import re

import pytest

from trl_grpo_ext.data.arithmetic import arithmetic_problem, arithmetic_rows
from trl_grpo_ext.data.load import gsm8k_final_answer


def _check_solution(row: dict) -> int:
    """Re-derive the gold answer from the numbers in the question, independently of the generator."""
    numbers = [int(n) for n in re.findall(r"\d+", row["question"])]
    q = row["question"]
    if "gets" in q and "gives" in q:  # a + b - c
        return numbers[0] + numbers[1] - numbers[2]
    if "gets" in q:
        return numbers[0] + numbers[1]
    if "gave away" in q:
        return numbers[0] - numbers[1]
    if "loose" in q:  # a boxes of b, plus c
        return numbers[0] * numbers[1] + numbers[2]
    if "uses" in q:
        return numbers[0] * numbers[1] - numbers[2]
    return numbers[0] * numbers[1]  # a boxes of b each


def test_rows_are_gsm8k_shaped_and_their_gold_answers_are_right():
    rows = arithmetic_rows("train", 300, seed=0)
    assert {r["steps"] for r in rows} == {1, 2}
    for row in rows:
        gold = int(gsm8k_final_answer(row["answer"]))
        assert gold == _check_solution(row) and gold >= 0, row


def test_splits_are_disjoint_seeded_and_sized():
    train = arithmetic_rows("train", 2000, seed=0)
    test = arithmetic_rows("test", 500, seed=0)
    assert len(train) == 2000 and len(test) == 500
    assert len({r["question"] for r in train}) == 2000
    assert not {r["question"] for r in train} & {r["question"] for r in test}
    assert arithmetic_rows("test", 5, seed=0) == test[:5]  # a function of (seed, split, index)
    assert arithmetic_rows("test", 5, seed=1) != test[:5]
    assert arithmetic_problem(0, "train", 3) == arithmetic_problem(0, "train", 3)


@pytest.mark.parametrize("kwargs, match", [({"split": "validation"}, "does not exist"),
                                           ({"num_problems": 0}, "embedded_num_prompts=0"), ({"split": "test", "num_problems": 10**9}, "eval_num_prompts"),
                                           ({"two_step_fraction": 1.5}, r"\[0, 1\]")])
def test_bad_arguments_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        arithmetic_rows(**kwargs)
