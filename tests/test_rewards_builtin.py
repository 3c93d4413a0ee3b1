"""Worked values for the built-in rewards (builtin.py, math.py, trl_rewards.py), computed by hand from each formula."""

from __future__ import annotations

import sys

import pytest

from trl_grpo_ext.rewards import get_reward

GSM8K_ANSWER = (
    "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
    "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72"
)


def conv(texts):
    return [[{"role": "assistant", "content": t}] for t in texts]


def both(reward, texts, **kwargs):
    """Score plain and conversational completions; they must agree."""
    plain = reward(prompts=["q"] * len(texts), completions=list(texts), **kwargs)
    chat = reward(prompts=[[{"role": "user", "content": "q"}]] * len(texts), completions=conv(texts), **kwargs)
    assert plain == chat
    return plain


# ------------------------------------------------------------------ accuracy (math-verify)
def test_accuracy_gsm8k_and_boxed():
    acc = get_reward("accuracy")
    texts = ["The answer is \\boxed{72}", "so #### 72", "I think it is \\boxed{24}", "no idea"]
    assert both(acc, texts, answer=["#### 72"] * 4) == [1.0, 1.0, 0.0, 0.0]
    assert both(acc, texts[:1], answer=[GSM8K_ANSWER]) == [1.0]  # only the number after #### is the reference
    assert both(acc, ["\\boxed{24}"], answer=[GSM8K_ANSWER]) == [0.0]  # 24 appears in the worked solution only


def test_accuracy_is_symbolic():
    acc = get_reward("math_accuracy")
    assert both(acc, ["The answer is 0.5"], solution=["\\frac{1}{2}"]) == [1.0]
    assert both(acc, ["\\boxed{\\frac{1}{2}}"], solution=["0.5"]) == [1.0]
    assert both(acc, ["\\boxed{\\frac{1}{3}}"], solution=["0.5"]) == [0.0]


def test_accuracy_skips_unparseable_reference_and_reads_column():
    acc = get_reward("accuracy")
    assert both(acc, ["\\boxed{1}"], solution=["no number here"]) == [None]
    # `solution` wins over `answer` by default; `column` picks another.
    assert both(acc, ["\\boxed{1}"], solution=["1"], answer=["#### 2"]) == [1.0]
    assert both(get_reward("accuracy", column="answer"), ["\\boxed{1}"], solution=["1"], answer=["#### 2"]) == [0.0]
    with pytest.raises(
        ValueError, match=r"needs the dataset column 'solution' or 'answer', but received the columns \['question'\]"
    ):
        acc(completions=["1"], question=["q"])


def test_accuracy_counts_unscorable_references_per_call_and_warns_once(caplog):
    acc = get_reward("accuracy")
    logged = []

    def log_metric(name, value):
        logged.append((name, value))

    refs = ["no number here", "#### 3", "no number here", "still none"]
    with caplog.at_level("WARNING", logger="trl_grpo_ext.rewards.math"):
        out = acc(completions=["\\boxed{3}"] * 4, solution=refs, log_metric=log_metric)
        assert out == [None, 1.0, None, None]
        out = acc(completions=["\\boxed{3}"] * 2, solution=["#### 3", "nothing"], log_metric=log_metric)
        assert out == [1.0, None]
        assert acc(completions=["\\boxed{3}"], solution=["#### 3"], log_metric=log_metric) == [1.0]
    # 3 of the first call's 4 completions, 1 of the second's, 0 of the third: one value per call (TRL averages them)
    assert logged == [("rewards/accuracy/unscorable_gold", v) for v in (3.0, 1.0, 0.0)]
    warnings = [r.getMessage() for r in caplog.records if "cannot parse the reference answer" in r.getMessage()]
    assert len(warnings) == 1  # warned once, with the first unscorable reference and its column
    assert "'no number here' (dataset column 'solution')" in warnings[0]
    assert "rewards/accuracy/unscorable_gold" in warnings[0]


def test_accuracy_without_math_verify_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "math_verify", None)  # makes `import math_verify` raise ImportError
    with pytest.raises(ImportError, match=r"pip install trl-grpo-ext\[math\]"):
        get_reward("accuracy")(completions=["1"], solution=["1"])


# ------------------------------------------------------------------ exact / numeric match
def test_exact_match():
    em = get_reward("exact_match")
    texts = ["<answer> Paris. </answer>", "\\boxed{PARIS}", "The capital is Paris", "####   paris"]
    assert both(em, texts, solution=["paris"] * 4) == [1.0, 1.0, 0.0, 1.0]
    assert both(get_reward("exact_match", case_sensitive=True), texts[:2], solution=["paris"] * 2) == [0.0, 0.0]
    assert both(em, ["72", "73"], answer=[GSM8K_ANSWER] * 2) == [1.0, 0.0]
    assert both(em, ["x"], solution=["  "]) == [None]


def test_numeric_match():
    nm = get_reward("numeric_match")
    texts = ["The total is 1,000 apples", "999.9999995", "999.99", "none", "<answer>-3</answer>"]
    refs = ["#### 1000", "1000", "1000", "1000", "#### -3"]
    # |999.9999995 - 1000| = 5e-7 <= abs_tol 1e-6; |999.99 - 1000| = 0.01 > 1e-6.
    assert both(nm, texts, answer=refs) == [1.0, 1.0, 0.0, 0.0, 1.0]
    # rel_tol 1e-4: 0.01 <= 1e-4 * 1000 = 0.1.
    assert both(get_reward("numeric_match", rel_tol=1e-4), texts[2:3], answer=refs[2:3]) == [1.0]
    assert both(nm, ["5"], answer=["#### none"]) == [None]
    with pytest.raises(ValueError, match=r"numeric_match abs_tol=-1 must be a number >= 0"):
        get_reward("numeric_match", abs_tol=-1)


# ------------------------------------------------------------------ format and tags
def test_format():
    fmt = get_reward("format")
    texts = [
        "<think>a\nb</think>\n<answer>c</answer>",
        "<think>a</think>",
        "<think>a</think><answer>c</answer> trailing",
        " <think></think> <answer></answer>\n",
    ]
    assert both(fmt, texts) == [1.0, 0.0, 0.0, 1.0]
    custom = get_reward("format", reasoning_tag="reasoning")
    assert both(custom, ["<reasoning>x</reasoning><answer>y</answer>", texts[0]]) == [1.0, 0.0]
    with pytest.raises(ValueError, match=r"reasoning_tag='<b>' must be a tag name"):
        get_reward("format", reasoning_tag="<b>")


def test_tag_count():
    tc = get_reward("tag_count")
    texts = [
        "<think>x</think><answer>y</answer>",  # 4 tags once: 1.0
        "<think>x</think>",  # 2 of 4: 0.5
        "<think><think>x</think><answer>y</answer>",  # <think> twice: 3 of 4
        "",
    ]
    assert both(tc, texts) == [1.0, 0.5, 0.75, 0.0]


# ------------------------------------------------------------------ length, overlong, repetition
def test_length_target_range_in_tokens():
    ln = get_reward("length", min_length=2, max_length=8)
    ids = [[0] * n for n in (0, 1, 2, 8, 12, 16, 20)]
    # below: n/2; inside: 1; above: 1 - (n - 8)/8, floored at 0.
    assert both(ln, ["x"] * 7, completion_ids=ids) == [0.0, 0.5, 1.0, 1.0, 0.5, 0.0, 0.0]
    with pytest.raises(ValueError, match=r"unit='tokens' needs `completion_ids`"):
        ln(completions=["x"])


def test_length_in_chars_and_words():
    assert both(get_reward("length", max_length=4, unit="chars"), ["abcd", "abcdef"]) == [1.0, 0.5]
    assert both(get_reward("length", min_length=4, max_length=4, unit="words"), ["a b", "a b c d"]) == [0.5, 1.0]
    with pytest.raises(ValueError, match=r"min_length=5 must be an integer in \[0, 4\]\. Fix: keep min_length <= max_length=4"):
        get_reward("length", min_length=5, max_length=4)


def test_soft_overlong_dapo_eq13():
    so = get_reward("soft_overlong", max_completion_len=10, soft_punish_cache=4)
    ids = [[0] * n for n in (6, 7, 8, 10, 11)]
    # 0 up to L_max - L_cache = 6; then (6 - |y|) / 4; -1 beyond L_max.
    assert both(so, ["x"] * 5, completion_ids=ids) == [0.0, -0.25, -0.5, -1.0, -1.0]
    with pytest.raises(ValueError, match="soft_punish_cache \\(11\\) <= max_completion_len \\(10\\)"):
        get_reward("soft_overlong", max_completion_len=10, soft_punish_cache=11)
    with pytest.raises(ValueError, match="needs `completion_ids`"):
        so(completions=["x"])


def test_repetition_penalty_words():
    rp = get_reward("repetition_penalty")
    # "a b c a b c a b c": 7 word 3-grams, 3 distinct -> (1 - 3/7) * -1 = -4/7.
    # "A b c a B c" (lower-cased): 4 3-grams, 3 distinct -> -1/4.  Fewer than 3 words -> 0.
    values = both(rp, ["a b c a b c a b c", "one two three four", "A b c a B c", "a b"])
    assert values == pytest.approx([-4 / 7, 0.0, -0.25, 0.0])
    assert both(get_reward("repetition_penalty", max_penalty=-0.5), ["a b c a b c a b c"]) == pytest.approx([-2 / 7])
    with pytest.raises(ValueError, match="max_penalty=0.5 must be a number <= 0"):
        get_reward("repetition_penalty", max_penalty=0.5)


# ------------------------------------------------------------------ the embedded task
def test_char_fraction():
    cf = get_reward("char_fraction")
    assert both(cf, ["aab", "", "bbbb", "aaaa"], target=["a"] * 4) == [2 / 3, 0.0, 0.0, 1.0]
    with pytest.raises(ValueError, match=r"column 'target' row 0 is 'ab'; it must be one character"):
        cf(completions=["a"], target=["ab"])


# ------------------------------------------------------------------ TRL re-exports (plain text made conversational)
def test_trl_think_format_reward():
    assert both(get_reward("think_format_reward"), ["<think>\nr\n</think>\nanswer", "<think>r"]) == [1.0, 0.0]


def test_trl_accuracy_rewards():
    texts = ["My answer is \\boxed{\\frac{1}{3}}", "My answer is \\boxed{\\frac{1}{2}}"]
    assert both(get_reward("accuracy_reward"), texts, solution=["\\frac{1}{3}"] * 2) == [1.0, 0.0]
    reasoning = get_reward("reasoning_accuracy_reward", reasoning_delimiters=["</r>"])
    texts = ["<r>x</r> \\boxed{\\frac{1}{3}}", "<r>x \\boxed{\\frac{1}{3}}"]  # second: reasoning never ends -> 0
    assert both(reasoning, texts, solution=["\\frac{1}{3}"] * 2) == [1.0, 0.0]


def test_trl_cosine_and_token_repetition():
    cos = get_reward("cosine_scaled_reward", max_len=100)
    texts = ["\\boxed{\\frac{1}{3}}", "\\boxed{\\frac{1}{2}}"]
    # 50 of 100 tokens: cos(pi/2) = 0 -> midpoints: correct (0.5 + 1)/2 = 0.75, wrong (-0.5 - 1)/2 = -0.75.
    assert both(cos, texts, solution=["\\frac{1}{3}"] * 2, completion_ids=[[1] * 50] * 2) == [0.75, -0.75]
    rp = get_reward("repetition_penalty_reward", ngram_size=2)
    # [5,5,5,5,5]: 4 bigrams, 1 distinct -> (1 - 1/4) * -1.
    assert both(rp, ["x", "y"], completion_ids=[[1, 2, 3, 4], [5, 5, 5, 5, 5]]) == [0.0, -0.75]


def test_numeric_match_scores_none_for_a_gold_of_several_numbers():
    """The breaker's finding: a gold \\boxed{3/4} was read as its last number, so "4" and "7/4" scored 1.0 and the
    right "0.75" 0.0, while the data check warned that such rows get None. They now do (the accuracy reward reads
    them); a gold of one number, with a sign, separators or a percent sign, is scored as before."""
    reward = get_reward("numeric_match", column="solution")
    golds = [r"\boxed{3/4}", r"\boxed{3/4}", r"\boxed{3/4}", r"\dfrac{1}{2}", "#### 42", "1,000", "-5", r"50\%"]
    texts = ["4", "7/4", "0.75", "2", "The answer: 42", "1000", "-5", "50"]
    assert reward(completions=texts, solution=golds) == [None, None, None, None, 1.0, 1.0, 1.0, 1.0]
    assert reward.gold_problem(r"\boxed{3/4}") == "it holds 2 numbers (3, 4), not one"
    # a gold written with the Unicode minus (U+2212) is negative (a second breaker round: "3" scored 1, "-3" 0)
    assert reward(completions=["3", "-3", "\u22123"], solution=["\u22123"] * 3) == [0.0, 1.0, 1.0]


def test_numeric_match_with_an_answer_phrase_reads_the_stated_answer():
    from trl_grpo_ext.rewards.builtin import NumericMatch

    reward = NumericMatch(column="answer", answer_phrase="The answer is")
    completions = [
        "3 + 4 = 7 apples. The answer is 7.",
        "The answer is 7.\nThe answer is ",  # a cut-off repetition: the last complete statement counts
        "3 + 4 = 7",  # right number, but not the asked sentence
        "The answer is 34 - 32 = 2.",  # not the asked "The answer is N": the number right after the phrase counts
        "the answer is 1,200",
        "The answer is 8. Oh wait 7",
        "The answer is 7. I hope this helps with question 2.",
        "The answer is\n**7**.",
    ]
    gold = ["#### 7", "#### 7", "#### 7", "#### 2", "1200", "#### 7", "#### 7", "#### 7"]
    assert reward(completions=completions, answer=gold) == [1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0]
    assert reward(completions=["The answer is 6."], answer=["#### 7"]) == [0.0]
    with pytest.raises(ValueError, match="answer_phrase"):
        NumericMatch(answer_phrase="")


def test_answer_phrase_format_gives_partial_credit():
    from trl_grpo_ext.rewards.builtin import AnswerPhraseFormat

    reward = AnswerPhraseFormat()
    texts = ["3 + 4 = 7. The answer is 7.", "The answer is 7. Then we add more.", "It is 7.", "The answer is $1,200 ",
             "The answer is: 12", "The answer is seven.", "The answer is\n**7**."]
    assert reward(completions=texts) == [1.0, 0.5, 0.0, 1.0, 1.0, 0.0, 1.0]
    # both rewards read the same number: a completion the format reward accepts is scored on that number
    from trl_grpo_ext.rewards.builtin import NumericMatch

    numeric = NumericMatch(answer_phrase="The answer is")
    assert numeric(completions=texts, answer=["7", "7", "7", "1200", "12", "7", "7"]) == [1, 1, 0, 1, 1, 0, 1]


def test_numeric_match_reads_latex_numbers_and_a_spaced_minus():
    reward = get_reward("numeric_match", column="solution")
    texts = ["<answer>34</answer>", r"\boxed{1{,}000}", r"<answer>1\,000</answer>", "<answer>10 - 7</answer>",
             "x = - 7", "<answer>\n- 7\n</answer>", r"<answer>\frac12 of 144 is 72</answer>"]
    golds = [r"\frac34", "1000", "1000", "3", "-7", "7", "72"]
    # \frac34 is 3/4, not 34 (no single number: None); LaTeX's 1{,}000 and 1\,000 are 1000; "10 - 7" still ends in
    # 7 (a subtraction, not a sign); "x = - 7" is -7; a Markdown bullet "- 7" is 7; a fraction's digits are no number
    assert reward(completions=texts, solution=golds) == [None, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0]
    # a gold with a fraction beside a number is no one number either (a reviewer's finding: 3\frac{1}{2} read as 3)
    assert reward(completions=["3"], solution=[r"3\frac{1}{2}"]) == [None]
    phrase = get_reward("numeric_match", column="solution", answer_phrase="The answer is")
    assert phrase(completions=["The answer is 1{,}000."], solution=["1000"]) == [1.0]
