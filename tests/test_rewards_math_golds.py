r"""Math rewards on golds in the shapes real datasets store them, each with a right and a wrong completion.

Shapes: MATH-500's ``answer`` column (bare LaTeX, no delimiters), GSM8K's ``answer`` (a worked solution ending in
``#### n``), NuminaMath's ``solution`` (a worked solution ending in ``\boxed{...}``), plain numbers and ``$...$``.
Right and wrong were worked out by hand: the right completion states the same value (often in another form: 0.5 for
1/2, ``\dfrac`` for ``\frac``), the wrong one a different value, usually the one math-verify read from the bare gold
before it was wrapped in ``$...$`` (``2`` for ``10 - 2\sqrt{5}``), so the wrong one scoring 1 is the old bug.
"""

from __future__ import annotations

import logging

import pytest

from trl_grpo_ext.rewards import get_reward

pytest.importorskip("math_verify")

GSM8K_SOLUTION = (
    "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
    "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72"
)

# (shape, gold, right completion, wrong completion)
GOLDS = [
    # MATH-500 `answer` column: bare LaTeX (the failing examples of issue 22 first)
    ("math500", r"10 - 2\sqrt{5}", r"So it is \boxed{10 - 2\sqrt{5}}.", r"\boxed{2}"),
    ("math500", r"2\sqrt{5}", r"\boxed{\sqrt{20}}", r"\boxed{2}"),
    ("math500", r"x^2 + 1", r"\boxed{1 + x^2}", r"\boxed{1}"),
    ("math500", r"6 - 5i", r"\boxed{6-5i}", r"\boxed{5}"),
    ("math500", r"9\pi", r"\boxed{9\pi}", r"\boxed{9}"),
    ("math500", r"3\sqrt{13}", r"\boxed{\sqrt{117}}", r"\boxed{3}"),
    ("math500", r"\frac{\pi}{4}", r"\boxed{\frac{\pi}{4}}", r"\boxed{4}"),
    ("math500", r"\frac{14}{3}", r"\boxed{\dfrac{14}{3}}", r"\boxed{\frac{3}{14}}"),
    ("math500", r"\left( 3, \frac{\pi}{2} \right)", r"\boxed{\left(3, \frac{\pi}{2}\right)}", r"\boxed{3}"),
    ("math500", r"11\sqrt2", r"\boxed{11\sqrt{2}}", r"\boxed{11}"),
    ("math500", r"\sqrt{2}+\sqrt{3}", r"\boxed{\sqrt{3}+\sqrt{2}}", r"\boxed{\sqrt{5}}"),
    ("math500", r"x^2+7x+10", r"\boxed{(x+2)(x+5)}", r"\boxed{10}"),
    ("math500", r"p - q", r"\boxed{-q + p}", r"\boxed{q - p}"),
    ("math500", r"[-2,7]", r"\boxed{[-2, 7]}", r"\boxed{7}"),
    ("math500", r"\{1, 2\}", r"\boxed{\{2, 1\}}", r"\boxed{2}"),
    ("math500", r"y = 2x + 3", r"\boxed{y = 3 + 2x}", r"\boxed{3}"),
    ("math500", r"\text{Evelyn}", r"\boxed{\text{Evelyn}}", r"\boxed{\text{Bob}}"),
    ("math500", r"\text{(C)}", r"\boxed{C}", r"\boxed{B}"),
    ("math500", r"90^\circ", r"\boxed{90^\circ}", r"\boxed{45^\circ}"),
    ("math500", r"-\frac{1}{2}", r"\boxed{-0.5}", r"\boxed{\frac{1}{2}}"),
    ("math500", r"\$18.90", r"\boxed{18.90}", r"\boxed{18}"),
    # GSM8K `answer` column: a worked solution ending in "#### n"
    ("gsm8k", GSM8K_SOLUTION, "She sold 72 clips.\n#### 72", r"\boxed{24}"),
    ("gsm8k", "He pays 2*3 = <<2*3=6>>6 dollars.\n#### 6", "<answer>6</answer>", "<answer>2</answer>"),
    ("gsm8k", "The total is 1000+200 = <<1000+200=1200>>1200.\n#### 1,200", r"\boxed{1200}", r"\boxed{200}"),
    ("gsm8k", "It drops 10-13 = <<10-13=-3>>-3 degrees.\n#### -3", "<answer>-3</answer>", "<answer>3</answer>"),
    # plain numbers
    ("plain", "72", "The answer is 72", "The answer is 71"),
    ("plain", "0.5", r"\boxed{\frac{1}{2}}", r"\boxed{\frac{1}{3}}"),
    ("plain", "-2", "<answer>-2</answer>", "<answer>2</answer>"),
    # `$...$`
    ("dollars", "$5$", r"\boxed{5}", r"\boxed{6}"),
    ("dollars", r"$\frac{1}{2}$", "<answer>0.5</answer>", "<answer>2</answer>"),
    # NuminaMath `solution` column: a worked solution ending in \boxed{...}
    (
        "numina",
        r"We have $a + b = 5$ and $a - b = 1$, so $a = 3$. Thus the answer is $\boxed{3}$.",
        r"\boxed{3}",
        r"\boxed{5}",
    ),
    (
        "numina",
        r"Squaring, $x^2 = 2$, hence $x = \sqrt{2}$ as $x > 0$. The answer is $\boxed{\sqrt{2}}$.",
        r"\boxed{2^{1/2}}",
        r"\boxed{2}",
    ),
    ("numina", r"By Vieta, the sum is $-\frac{b}{a} = \frac{7}{2}$. $\boxed{\frac{7}{2}}$", r"\boxed{3.5}", r"\boxed{7}"),
    ("numina", r"Only option C satisfies both. \boxed{C}", r"\boxed{C}", r"\boxed{D}"),
]


def test_the_table_has_at_least_30_golds_of_every_shape():
    assert len(GOLDS) >= 30
    assert {shape for shape, *_ in GOLDS} == {"math500", "gsm8k", "plain", "dollars", "numina"}


@pytest.mark.parametrize("shape,gold,right,wrong", GOLDS, ids=[f"{g[0]}-{i}" for i, g in enumerate(GOLDS)])
def test_accuracy_scores_each_gold_shape(shape, gold, right, wrong):
    acc = get_reward("accuracy")
    column = "solution" if shape == "numina" else "answer"
    assert acc(completions=[right, wrong], **{column: [gold, gold]}) == [1.0, 0.0]


# TRL's math rewards read the `solution` column with LaTeX completions; the same golds, boxed completions only.
TRL_ROWS = [(gold, right, wrong) for _, gold, right, wrong in GOLDS if right.startswith("\\boxed")]


@pytest.mark.parametrize("name", ["accuracy_reward", "reasoning_accuracy_reward"])
@pytest.mark.parametrize("gold,right,wrong", TRL_ROWS[:12])
def test_trl_math_rewards_read_the_golds_as_accuracy_does(name, gold, right, wrong):
    reward = get_reward(name)
    completions = [f"<think>work</think> {right}", f"<think>work</think> {wrong}"]
    assert reward(completions=completions, solution=[gold, gold]) == [1.0, 0.0]


def test_cosine_scaled_reward_reads_a_bare_gold():
    # 10 tokens of max_len 100: cos(pi * 0.1) = 0.95106; correct: 0.5 + 0.5 * (1 + 0.95106) / 2 = 0.98776;
    # wrong: -0.5 + (-1.0 + 0.5) * (1 + 0.95106) / 2 = -0.98776.
    cos = get_reward("cosine_scaled_reward", max_len=100)
    out = cos(completions=[r"\boxed{10 - 2\sqrt{5}}", r"\boxed{2}"], solution=[r"10 - 2\sqrt{5}"] * 2,
              completion_ids=[[1] * 10, [1] * 10])
    assert out == pytest.approx([0.98776, -0.98776], abs=1e-5)


@pytest.mark.parametrize(
    "gold,reason",
    [
        ("72 clips", "would be read as symbols"),  # prose: math-verify would score 72*c*i*l*p*s
        ("no answer given", "would be read as symbols"),
        (r"We have $x = 2$ and so $y = 3$.", "no final \\boxed"),  # a worked solution without its answer
        ("", "parses it to nothing"),
    ],
)
def test_a_gold_that_is_not_one_whole_answer_is_flagged(gold, reason, caplog):
    acc = get_reward("accuracy")
    logged = []
    with caplog.at_level(logging.WARNING, logger="trl_grpo_ext.rewards.math"):
        out = acc(completions=["72", r"\boxed{3}"], answer=[gold, gold], log_metric=lambda k, v: logged.append((k, v)))
    assert out == [None, None]
    assert logged == [("rewards/accuracy/unscorable_gold", 2.0)]
    [message] = [r.getMessage() for r in caplog.records if "cannot parse the reference answer" in r.getMessage()]
    assert reason in message and "as one whole answer" in message


def test_a_gold_with_a_unit_or_a_phrase_is_still_one_answer():
    acc = get_reward("accuracy")
    assert acc(completions=[r"\boxed{12}", r"\boxed{13}"], answer=["12 cm"] * 2) == [1.0, 0.0]
    assert acc(completions=[r"\boxed{5}", r"\boxed{6}"], answer=["The answer is 5"] * 2) == [1.0, 0.0]


def test_trl_math_reward_skips_a_flagged_gold():
    assert get_reward("accuracy_reward")(completions=[r"\boxed{72}"], solution=["72 clips"]) == [None]


def test_accuracy_reads_shorthand_latex_as_math_verify_does():
    """The breaker's finding: `\\frac12`, `\\tfrac12`, `\\sqrt2`, `2\\sqrt3`, `\\frac34` scored 0 against their
    golds, because TRL 1.16's NormalizationConfig(units=True) switches off math-verify's fixing of malformed operators
    (its LatexExtractionConfig default has them on); wrong answers in the same forms still score 0."""
    pytest.importorskip("math_verify")
    from trl_grpo_ext.rewards.registry import get_reward

    cases = [(r"\frac{1}{2}", r"\boxed{\frac12}", 1.0), (r"\frac{1}{2}", r"\boxed{\tfrac12}", 1.0),
             (r"\sqrt{2}", r"\boxed{\sqrt2}", 1.0), (r"2\sqrt{3}", r"\boxed{2\sqrt3}", 1.0),
             (r"\frac{3}{4}", r"\boxed{\frac34}", 1.0), (r"\frac{1}{2}", r"\boxed{\frac13}", 0.0),
             (r"\sqrt{2}", r"\boxed{\sqrt3}", 0.0), (r"\boxed{3/4}", r"\boxed{0.75}", 1.0), ("42", r"\boxed{43}", 0.0)]
    scores = get_reward("accuracy")(completions=[c for _, c, _ in cases], solution=[g for g, _, _ in cases])
    assert scores == [expected for _, _, expected in cases]


# (gold, right completion, wrong completion): the ways a model closes its answer in prose or Markdown. Before, each
# right one scored 0 (math-verify reads "72." and "**72**" as nothing); the wrong ones differ by one unit.
CLOSINGS = [
    ("#### 72", "<answer>72.</answer>", "<answer>73.</answer>"),
    ("72", "<think>24 + 48</think>\n<answer>\n72.\n</answer>", "<answer>\n71.\n</answer>"),
    ("72", "<answer>**72**</answer>", "<answer>**73**</answer>"),
    ("72", "The final answer is **72**.", "The final answer is **73**."),
    ("72", "<answer>*72*</answer>", "<answer>*73*</answer>"),
    ("3", "<answer>3;</answer>", "<answer>4;</answer>"),
    (r"\frac{1}{2}", "<answer>1/2.</answer>", "<answer>1/3.</answer>"),
    ("2", "<answer>x = 2.</answer>", "<answer>x = 3.</answer>"),
    ("1200", "<answer>1,200.</answer>", "<answer>1,201.</answer>"),
    ("1000", r"<answer>1\,000</answer>", r"<answer>1\,001</answer>"),
    ("1000", r"\boxed{1{,}000}", r"\boxed{1{,}001}"),
    ("-72", "<answer>-72.</answer>", "<answer>72.</answer>"),
    ("24", "<answer>2 * 3 * 4.</answer>", "<answer>2 * 3 * 5.</answer>"),
    # not emphasis (a second breaker's finding: (2)*3*(4) was read as (2)3(4))
    ("24", "<answer>(2)*3*(4)</answer>", "<answer>(2)*3*(5)</answer>"),
    ("24", "<answer>2 *3* 4</answer>", "<answer>2 *3* 5</answer>"),
]


def test_a_power_is_no_emphasis_and_a_prose_answer_keeps_its_closing_period():
    # a second breaker's findings: 2**3 + 2**2 was read as 23 + 22 (45); dropping the period of a prose answer let
    # math-verify read its last number ("72 (the total is 80)." scored 1 against 80)
    reward = get_reward("accuracy")
    completions = ["<answer>2**3 + 2**2</answer>", "<answer>72 (the total is 80).</answer>"]
    assert reward(prompts=["q", "q"], completions=completions, solution=["45", "80"]) == [0.0, 0.0]


@pytest.mark.parametrize("gold,right,wrong", CLOSINGS)
def test_accuracy_reads_an_answer_closed_by_a_period_or_markdown(gold, right, wrong):
    reward = get_reward("accuracy")
    assert reward(prompts=["q", "q"], completions=[right, wrong], solution=[gold, gold]) == [1.0, 0.0]
