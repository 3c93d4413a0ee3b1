"""Tests of trl_grpo_ext.rewards.text: completion text, dataset columns, answer and number extraction."""

from __future__ import annotations

import pytest

from trl_grpo_ext.rewards.text import completion_text, extract_answer, last_boxed, last_number, read_column


def test_completion_text_formats():
    assert completion_text("plain") == "plain"
    assert completion_text([{"role": "assistant", "content": "a"}]) == "a"
    parts = [
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "x"}, {"type": "image"}, {"type": "text", "text": "y"}],
        }
    ]
    assert completion_text(parts) == "xy"
    tools = [
        {"role": "assistant", "content": "call"},
        {"role": "tool", "content": "42"},
        {"role": "assistant", "content": "42"},
    ]
    assert completion_text(tools) == "call\n42"  # tool output is not the model's text
    with pytest.raises(
        ValueError, match=r"Reward 'r': completion 3 is a int \('7'\); expected a string or a list of messages"
    ):
        completion_text(7, index=3, reward="r")


def test_read_column():
    assert read_column({"answer": ["1", "2"]}, ("solution", "answer"), 2, "r") == ("answer", ["1", "2"])
    with pytest.raises(ValueError, match=r"column 'answer' has 1 values for 2 completions"):
        read_column({"answer": ["1"]}, "answer", 2, "r")
    with pytest.raises(ValueError, match=r"needs the dataset column 'target', but received the columns \['x'\]"):
        read_column({"x": [1], "trainer_state": None, "log_metric": print}, "target", 1, "r")


def test_extract_answer_rules_in_order():
    assert extract_answer("<answer>1</answer> \\boxed{2} #### 3") == "1"
    assert extract_answer("\\boxed{\\frac{1}{2}} and \\boxed{{3}} #### 4") == "{3}"
    assert extract_answer("work... #### 72 ") == "72"
    assert extract_answer("  just text ") == "just text"
    assert extract_answer("<ans>5</ans>", answer_tag="ans") == "5"
    assert last_boxed("\\boxed{a{b}c}") == "a{b}c" and last_boxed("\\boxed{open") is None


def test_last_number():
    assert last_number("3 apples and 1,234.5 pears") == 1234.5
    assert last_number("minus -7") == -7.0 and last_number("1e3") == 1000.0 and last_number(".5") == 0.5
    assert last_number("none") is None
