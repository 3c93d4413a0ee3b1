"""Gold answers math-verify cannot score, found before the model loads (issue 22 review): a split none of whose golds
a math reward can score is refused (it would train on nothing but the other rewards, that reward None on every
completion); one with some is warned about, with the count. Unscorable golds, worked out from `gold_latex`'s rules
(tests/test_rewards_math_golds.py): prose ("72 clips": math-verify would read 72*c*l*i*p*s), a worked solution with
several $...$ formulas and no \\boxed{}, and blanks."""

import json

import pytest
import yaml
from factories import recipe_without_models

PROSE = [f"{n} clips" for n in range(8)]  # all 8 unscorable
MIXED = ["72", r"10 - 2\sqrt{5}", r"\frac{\pi}{4}", "#### 18", "we have $x = 2$ and so $y = 3$", "6 - 5i",
         "no answer given", "9\\pi"]  # rows 4 and 6 unscorable: 2 of 8


def _run(tmp_path, monkeypatch, capsys, golds, reward="accuracy", column="answer", **changes):
    import logging

    from trl_grpo_ext.config.recipe_parse import RecipeArgumentError, parse_recipe_args

    monkeypatch.setattr(logging, "raiseExceptions", False)
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    (data / "train.jsonl").write_text("".join(json.dumps({"prompt": f"q{i}", column: g}) + "\n"
                                              for i, g in enumerate(golds)))
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({
        "model_name_or_path": "embedded:tiny-qwen2", "dataset_name": str(data), "dataset_train_split": "train",
        "rewards": [reward, "format"], "prompts_per_step": 2, "num_generations": 4, "total_training_steps": 1,
        "use_cpu": True, "bf16": False, "report_to": "none", "output_dir": str(tmp_path / "out"),
        "max_completion_length": 8, **changes}))
    try:
        args = parse_recipe_args(["--config", str(config)])
    except RecipeArgumentError as refused:  # the argument stage lists the dataset's problems with the config's
        return f"refused with the arguments ({refused.code})", capsys.readouterr().err
    recipe = recipe_without_models(monkeypatch)
    try:
        code = recipe.main(*args)
    except AssertionError as err:  # the model was loaded: the data checks passed
        code = str(err)
    err = capsys.readouterr().err
    return code, err


@pytest.mark.parametrize("reward,column", [("accuracy", "answer"), ("accuracy", "solution"),
                                           ("accuracy_reward", "solution"), ({"name": "cosine_scaled_reward", "kwargs": {"max_len": 8}}, "solution")])
def test_a_split_whose_golds_are_all_unscorable_is_refused(reward, column, tmp_path, monkeypatch, capsys):
    code, err = _run(tmp_path, monkeypatch, capsys, PROSE, reward, column)
    reward = reward if isinstance(reward, str) else reward["name"]
    assert code == "refused with the arguments (2)", err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err
    assert errors[0].startswith(f"error: dataset_name='{tmp_path / 'data'}' ('train' split: train.jsonl): none of the "
                                f"8 gold answers in column {column!r} can be scored by reward {reward!r} (row 0: "
                                "'0 clips', its words ['clips'] would be read as symbols")
    assert "Fix: give each answer as a number" in errors[0]


def test_some_unscorable_golds_are_warned_with_the_count(tmp_path, monkeypatch, capsys):
    code, err = _run(tmp_path, monkeypatch, capsys, MIXED)
    assert code == "the model was loaded", err  # not refused: the run goes on to load the model
    warnings = [line for line in err.splitlines() if "gold answers" in line]
    assert warnings == [
        f"warning: dataset_name='{tmp_path / 'data'}' ('train' split: train.jsonl): 2 of 8 gold answers in column "
        "'answer' cannot be scored by reward 'accuracy' (row 4: 'we have $x = 2$ and so $y = 3$', a worked solution "
        "with several $...$ formulas and no final \\boxed{...} answer); their completions get None (left out of "
        "that reward)."]


def test_blank_golds_count_as_unscorable(tmp_path, monkeypatch, capsys):
    code, err = _run(tmp_path, monkeypatch, capsys, ["", "3", " ", "4", "5", "6", "7", "8"])
    assert code == "the model was loaded", err
    assert "2 of 8 gold answers in column 'answer' cannot be scored by reward 'accuracy' (row 0: '', it is empty)" in err


def test_scorable_golds_and_other_rewards_pass_silently(tmp_path, monkeypatch, capsys):
    code, err = _run(tmp_path, monkeypatch, capsys, [str(n) for n in range(8)])
    assert code == "the model was loaded", err
    assert "gold answers" not in err
    # exact_match is no math-verify reward: its prose golds are text it compares, not refused
    code, err = _run(tmp_path, monkeypatch, capsys, PROSE, reward="exact_match")
    assert code == "the model was loaded", err
    assert "gold answers" not in err


# numeric_match reads the last number of the gold (None without one), exact_match its normalised text (None when
# empty): the same refusal and warning, with what each reward needs (issue 22: numeric golds were never checked)
NUMBERLESS = ["forty", "seven", "twelve", "nine", "a dozen", "x", "none", "eleven"]  # no digit: all 8 unscorable


def test_golds_without_a_number_are_refused_for_numeric_match(tmp_path, monkeypatch, capsys):
    code, err = _run(tmp_path, monkeypatch, capsys, NUMBERLESS, reward="numeric_match")
    assert code == "refused with the arguments (2)", err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(
        f"error: dataset_name='{tmp_path / 'data'}' ('train' split: train.jsonl): none of the 8 gold answers in column "
        "'answer' can be scored by reward 'numeric_match' (row 0: 'forty', it holds no number)"), err
    assert "Fix: give each answer as a number, GSM8K's '#### N'" in errors[0]


def test_some_golds_without_a_number_are_warned_for_numeric_match(tmp_path, monkeypatch, capsys):
    # rows 1 ("four") and 3 ("x") hold no number; "#### 5", "3 apples" and "\boxed{12}" do
    golds = ["3", "four", "#### 5", "x", "3 apples", r"\boxed{12}", "7", "8"]
    code, err = _run(tmp_path, monkeypatch, capsys, golds, reward="numeric_match")
    assert code == "the model was loaded", err
    assert [line for line in err.splitlines() if "gold answers" in line] == [
        f"warning: dataset_name='{tmp_path / 'data'}' ('train' split: train.jsonl): 2 of 8 gold answers in column "
        "'answer' cannot be scored by reward 'numeric_match' (row 1: 'four', it holds no number); their completions "
        "get None (left out of that reward)."]


def test_golds_empty_once_normalised_are_warned_for_exact_match(tmp_path, monkeypatch, capsys):
    # "." and "<answer></answer>" normalise to "" (exact_match scores None); row 0 is the first of the 2
    golds = [".", "b", "c", "<answer></answer>", "e", "f", "g", "h"]
    code, err = _run(tmp_path, monkeypatch, capsys, golds, reward="exact_match")
    assert code == "the model was loaded", err
    assert "2 of 8 gold answers in column 'answer' cannot be scored by reward 'exact_match' (row 0: '.', it is empty " \
           "once normalised)" in err


def test_fraction_and_latex_golds_are_refused_for_numeric_match(tmp_path, monkeypatch, capsys):
    # the breaker's finding: numeric_match read \frac{1}{2} as 2 and 3/4 as 4, so "0.5" scored 0 and "2" scored 1
    golds = [r"\frac{1}{2}", "3/4", r"10 - 2\sqrt{5}", "x^2 + 1", r"\frac{3}{8}", "1/3", "2/5", r"\sqrt{2}/2"]
    code, err = _run(tmp_path, monkeypatch, capsys, golds, reward="numeric_match")
    assert code == "refused with the arguments (2)", err
    error = next(line for line in err.splitlines() if line.startswith("error:"))
    assert "none of the 8 gold answers in column 'answer' can be scored by reward 'numeric_match' (row 0: " \
           "'\\\\frac{1}{2}', it holds a fraction (\\frac{1}{2}), not one number)" in error
    assert "use the accuracy reward, which reads them with math-verify" in error
