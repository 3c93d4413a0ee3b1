"""The dataset stage listed with the config's problems (issue 22, items 7 and 10): `plan` and the recipe read a local
or embedded dataset (or a Hub dataset in the datasets cache, offline) and report every problem of its rows with the
config's own, in one go, exit status 2, before any model loads; a dataset plan cannot read is named in one note.

Before this, a config with a bad field and a bad dataset needed two runs: the config's problems first (plan and the
recipe's argument stage), then the dataset's, one at a time, from the recipe's `main`; plan checked only the columns
of local JSON lines and CSV files."""

import json

import pytest
import yaml
from factories import ROOT, recipe_stages, recipe_without_models

from trl_grpo_ext.cli.plan import main as plan_main
from trl_grpo_ext.cli.train import check_before_launch
from trl_grpo_ext.config.recipe_parse import RecipeArgumentError, parse_recipe_args


def _rows(rows):
    return "".join(json.dumps(r) + "\n" for r in rows)


GOOD = [{"prompt": f"say {i}", "answer": str(i)} for i in range(8)]


def _config(tmp_path, dataset_name, **changes):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({k: v for k, v in {
        "model_name_or_path": "embedded:tiny-qwen2", "dataset_train_split": "train", "rewards": ["exact_match"],
        "prompts_per_step": 2, "num_generations": 4, "total_training_steps": 1, "use_cpu": True, "bf16": False,
        "report_to": "none", "output_dir": str(tmp_path / "out"), "max_completion_length": 8,
        "dataset_name": str(dataset_name), **changes}.items() if v is not None}))  # None: the key left out
    return str(config)


def _folder(tmp_path, **files):
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    for name, text in files.items():
        (data / name).write_text(text)
    return data


@pytest.fixture(autouse=True)
def _quiet(monkeypatch):
    import logging

    monkeypatch.setattr(logging, "raiseExceptions", False)  # datasets' handler may hold a closed capture stream
    monkeypatch.delenv("WORLD_SIZE", raising=False)


def _plan_lines(capsys, argv, prefix="trl-grpo-ext plan: error: "):
    code = plan_main(argv)
    err = capsys.readouterr().err
    return code, [line.removeprefix(prefix) for line in err.splitlines() if line.startswith(prefix)], err


def _recipe_lines(capsys, argv):
    with pytest.raises(RecipeArgumentError) as refused:
        parse_recipe_args(argv)
    err = capsys.readouterr().err
    assert refused.value.code == 2
    assert err.splitlines()[-len(refused.value.problems):] == [f"error: {p}" for p in refused.value.problems]
    return refused.value.problems


def test_a_bad_field_and_a_bad_local_dataset_are_refused_in_one_go_by_plan_and_the_recipe(tmp_path, capsys,
                                                                                        monkeypatch):
    # one row (2 prompts make one step), no prompt column, its answer empty; and temperature 0
    data = _folder(tmp_path, **{"train.jsonl": _rows([{"text": "say 1", "answer": ""}])})
    argv = ["--config", _config(tmp_path, data, temperature=0)]
    where = f"dataset_name='{data}' ('train' split: train.jsonl)"
    expected = [
        "temperature=0 must be a number > 0. Fix: GRPO samples G different completions: use e.g. 1.0 (0.7 for "
        "instruct models).",
        f"dataset '{data}' has no 'prompt' column (columns: ['text', 'answer']). Set dataset_prompt_column to the "
        "column holding the prompts, or dataset_format: gsm8k for question/answer rows.",
        f"{where}: the column 'answer' that the rewards score against is empty in all 1 rows, so no completion could "
        "be scored. Fix: fill it with the answers, or point the reward's column parameter at the column that holds "
        "them.",
        f"{where} has 1 row: dataset_size=1 prompts is smaller than one generation batch of 2 prompts: TRL's sampler "
        "drops the incomplete batch and would train 0 steps; use at least 2 prompts or lower prompts_per_step",
    ]
    code, lines, err = _plan_lines(capsys, argv)
    assert (code, lines) == (2, expected), err
    assert "Generating" not in err  # no progress bar of datasets in plan's output
    assert _recipe_lines(capsys, argv) == expected
    assert check_before_launch(argv, ROOT / "recipes/accelerate_configs/cpu.yaml") == expected  # accelerate launch


def test_a_missing_column_in_the_train_and_the_test_split_is_two_problems(tmp_path, capsys):
    rows = _rows([{"prompt": f"say {i}", "label": str(i)} for i in range(8)])
    data = _folder(tmp_path, **{"train.jsonl": rows, "test.jsonl": rows})
    argv = ["--config", _config(tmp_path, data, dataset_test_split="test", final_eval="adapter", eval_num_prompts=4)]
    code, lines, err = _plan_lines(capsys, argv)
    assert code == 2 and len(lines) == 2, err
    for line, split in zip(lines, ("training", "evaluation")):
        assert line.startswith("rewards[0] 'exact_match' reads the dataset column 'solution' or 'answer', but the "
                               f"{split} dataset has the columns ['label', 'prompt']. Fix: add the column"), line
    assert _recipe_lines(capsys, argv) == lines


def test_too_few_rows_and_a_second_reward_s_missing_column_are_both_listed(tmp_path, capsys):
    data = _folder(tmp_path, **{"train.jsonl": _rows(GOOD[:3])})  # 3 rows; 4 prompts a step
    argv = ["--config", _config(tmp_path, data, prompts_per_step=4,
                                rewards=["exact_match", {"name": "char_fraction", "kwargs": {"column": "letter"}}])]
    code, lines, err = _plan_lines(capsys, argv)
    assert code == 2 and len(lines) == 2, err
    assert lines[0].startswith("rewards[1] 'char_fraction' reads the dataset column 'letter', but the training "
                               "dataset has the columns ['answer', 'prompt']")
    assert lines[1].endswith("has 3 rows: dataset_size=3 prompts is smaller than one generation batch of 4 prompts: "
                             "TRL's sampler drops the incomplete batch and would train 0 steps; use at least 4 prompts "
                             "or lower prompts_per_step")
    assert _recipe_lines(capsys, argv) == lines


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_plan_counts_the_rows_of_a_local_dataset_and_plans_its_epochs(fmt, tmp_path, capsys):
    """11 rows / 2 prompts a step = 5 steps an epoch (TRL drops the last incomplete batch); 2 epochs = 10 steps. The
    plan used to refuse an epoch-only config on a local dataset ("dataset size unknown (a streaming dataset?)")."""
    from datasets import Dataset

    data = tmp_path / "data"
    data.mkdir()
    rows = Dataset.from_list([{"prompt": f"say {i}", "answer": str(i)} for i in range(11)])
    getattr(rows, "to_json" if fmt == "jsonl" else f"to_{fmt}")(str(data / f"train.{fmt}"))
    config = _config(tmp_path, data, total_training_steps=None, total_epochs=2)
    code = plan_main(["--config", config, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    plan = json.loads(out)
    assert (plan["dataset_size"], plan["steps_per_epoch"], plan["total_steps"]) == (11, 5, 10)
    # a --dataset-size that differs from the rows read is refused; the same number is accepted
    code, lines, _ = _plan_lines(capsys, ["--config", config, "--dataset-size", "400"])
    assert (code, lines) == (2, [f"--dataset-size 400: the training split of dataset_name='{data}' has 11 rows, "
                                 "which the run trains on. Fix: remove --dataset-size (plan counts the rows)."])
    assert plan_main(["--config", config, "--dataset-size", "11"]) == 0


def test_with_max_prompt_length_plan_drops_the_long_prompts_as_the_run_does(tmp_path, capsys, monkeypatch):
    """plan loads the run's tokenizer (the tiny model's, local) and drops what the recipe drops: 2 of 8 prompts are
    100 words (499 tokens with this tokenizer, 5 for "say i"), over max_prompt_length 64. Before, plan counted all 8
    rows and only said so in a note."""
    rows = [*GOOD[:6], *({"prompt": " ".join(["word"] * 100), "answer": "1"} for _ in range(2))]
    data = _folder(tmp_path, **{"train.jsonl": _rows(rows)})
    config = _config(tmp_path, data, max_prompt_length=64)
    code = plan_main(["--config", config, "--json"])
    out, err = capsys.readouterr()
    assert code == 0 and json.loads(out)["dataset_size"] == 6
    assert err == ("note: max_prompt_length=64: dropped 2 of 8 prompts that are longer (as the run drops them; the "
                   "plan counts the 6 left).\n")
    assert plan_main(["--config", config, "--dataset-size", "6", "--json"]) == 0  # the exact size: accepted
    capsys.readouterr()
    code, lines, _ = _plan_lines(capsys, ["--config", config, "--dataset-size", "8"])
    assert (code, lines) == (2, [f"--dataset-size 8: the training split of dataset_name='{data}' has 6 rows within "
                                 "max_prompt_length=64, which the run trains on. Fix: remove --dataset-size (plan "
                                 "counts the rows)."])
    # every prompt over the limit: refused by plan and the recipe's argument stage, listed with another problem
    config = _config(tmp_path, data, max_prompt_length=4, temperature=0)
    expected = ("max_prompt_length=4: every prompt of the training split is longer (the shortest has 5 tokens). Fix: "
                "raise max_prompt_length to at least 5, or remove it.")
    code, lines, _ = _plan_lines(capsys, ["--config", config])
    assert code == 2 and expected in lines and len(lines) == 2, lines
    code, errors, err = recipe_stages(["--config", config], monkeypatch, capsys)
    assert code == 2 and f"error: {expected}" in errors and len(errors) == 2, err


def test_a_hub_dataset_plan_cannot_read_is_named_in_one_note(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = _config(tmp_path, "someone/not-cached")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code = plan_main(["--config", config])
    _, err = capsys.readouterr()
    assert code == 0
    assert err == ("note: dataset checks not run: dataset_name='someone/not-cached' is a Hub dataset that is not in the "
                   "datasets cache, and HF_HUB_OFFLINE is set (the recipe checks it once downloaded)\n")
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    code = plan_main(["--config", config])
    assert code == 0 and capsys.readouterr().err == (
        "note: dataset checks not run: dataset_name='someone/not-cached' is a Hub dataset (no local folder of that name "
        f"exists in {tmp_path}) and plan downloads nothing (the recipe checks it once downloaded; with HF_HUB_OFFLINE=1 "
        "plan checks a copy in the datasets cache)\n")
    # without a step limit the plan's refusal says why the size is unknown
    code, lines, _ = _plan_lines(capsys, ["--config", _config(tmp_path, "someone/not-cached",
                                                              total_training_steps=None, total_epochs=1)])
    assert code == 2 and lines[0].startswith("dataset size unknown (a dataset that was not read, such as a Hub dataset "
                                             "plan does not download, or one without a length, such as an "
                                             "IterableDataset) and no step limit")


def test_a_hub_dataset_in_the_cache_is_checked_by_plan_offline(tmp_path, capsys, monkeypatch):
    """Offline, datasets reads a Hub dataset from its cache: plan checks it as the recipe does (the cache stood in for
    by datasets' reader returning the rows)."""
    from datasets import Dataset

    from trl_grpo_ext.data import load

    cached = Dataset.from_list([{"prompt": f"say {i}", "label": str(i)} for i in range(8)])
    monkeypatch.setattr(load, "read_dataset", lambda name, config, split, field: cached)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    argv = ["--config", _config(tmp_path, "someone/cached")]
    code, lines, err = _plan_lines(capsys, argv)
    assert code == 2 and len(lines) == 1 and "the training dataset has the columns ['label', 'prompt']" in lines[0], err
    assert _recipe_lines(capsys, argv) == lines


def test_an_embedded_dataset_is_checked_and_sized_by_plan(tmp_path, capsys):
    """embedded:count-char has the columns prompt and target: exact_match's answer column is missing (the config rule
    says so from the columns it knows; the dataset stage repeats the same line, which is listed once)."""
    argv = ["--config", _config(tmp_path, "embedded:count-char", embedded_num_prompts=1)]
    code, lines, err = _plan_lines(capsys, argv)
    assert code == 2 and len(lines) == 2, err
    assert "reads the dataset column 'solution' or 'answer', but the training dataset has the columns ['prompt', " \
           "'target']" in lines[0]
    assert lines[1].startswith("dataset_name='embedded:count-char' ('train' split) has 1 row: dataset_size=1 prompts")


def test_some_unscorable_golds_are_warned_by_plan_too(tmp_path, capsys):
    golds = ["72", "9", "we have $x = 2$ and so $y = 3$", "4", "5", "6", "7", "8"]
    data = _folder(tmp_path, **{"train.jsonl": _rows([{"prompt": f"q{i}", "answer": g} for i, g in enumerate(golds)])})
    code = plan_main(["--config", _config(tmp_path, data, rewards=["accuracy"])])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert [line for line in err.splitlines() if "gold answers" in line] == [
        f"warning: dataset_name='{data}' ('train' split: train.jsonl): 1 of 8 gold answers in column 'answer' cannot "
        "be scored by reward 'accuracy' (row 2: 'we have $x = 2$ and so $y = 3$', a worked solution with several "
        "$...$ formulas and no final \\boxed{...} answer); their completions get None (left out of that reward)."]


def test_a_reward_of_weight_0_is_warned_once_and_a_negative_one_is_a_penalty(tmp_path, capsys, monkeypatch):
    data = _folder(tmp_path, **{"train.jsonl": _rows(GOOD)})
    rewards = [{"name": "exact_match", "weight": 1.0}, {"name": "length", "weight": 0, "kwargs": {"max_length": 4}},
               {"name": "numeric_match", "weight": -0.5}]
    config = _config(tmp_path, data, rewards=rewards)
    warning = ("warning: rewards[1] 'length' has weight 0: it is computed and logged (rewards/length/mean) but adds "
               "nothing to the advantages, so it does not train (a metric only). Give it a weight if it should train, "
               "or remove it.")
    assert plan_main(["--config", config]) == 0
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if "weight" in line] == [warning]
    args = parse_recipe_args(["--config", config])
    with pytest.raises(AssertionError, match="the model was loaded"):  # the recipe goes on, after warning once
        recipe_without_models(monkeypatch).main(*args)
    assert [line for line in capsys.readouterr().err.splitlines() if "weight" in line] == [warning]


def test_a_dataset_field_s_own_problem_is_not_restated_by_the_dataset_stage(tmp_path, capsys):
    """A split name the config refuses is reported once, by its check; the dataset is not read with it."""
    data = _folder(tmp_path, **{"train.jsonl": _rows(GOOD)})
    argv = ["--config", _config(tmp_path, data, dataset_format="gsm9k")]
    code, lines, err = _plan_lines(capsys, argv)
    assert code == 2 and len(lines) == 1 and lines[0].startswith("dataset_format='gsm9k'"), err


def test_the_recipe_stage_and_main_agree_on_a_good_dataset(tmp_path, capsys, monkeypatch):
    data = _folder(tmp_path, **{"train.jsonl": _rows(GOOD)})
    code, errors, err = recipe_stages(["--config", _config(tmp_path, data, temperature=0)], monkeypatch, capsys)
    assert (code, len(errors)) == (2, 1), err


def test_plan_reads_a_local_dataset_without_loading_a_model_or_tokenizer(tmp_path):
    import subprocess
    import sys

    data = _folder(tmp_path, **{"train.jsonl": _rows(GOOD)})
    config = _config(tmp_path, data, rewards=["accuracy"])  # math-verify reads the golds too
    code = (  # any model or tokenizer load fails the run
        "import transformers\n"
        "def refuse(*a, **k): raise AssertionError('plan loaded a model or tokenizer')\n"
        "for name in ('AutoModelForCausalLM', 'AutoTokenizer', 'PreTrainedModel', 'PreTrainedTokenizerBase'):\n"
        "    setattr(getattr(transformers, name), 'from_pretrained', classmethod(refuse))\n"
        "from trl_grpo_ext.cli import plan as plan_cli\n"
        f"assert plan_cli.main(['--config', {config!r}, '--json']) == 0\n"
        "print('[]')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path,
                            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"})
    *plan, loaded = result.stdout.strip().splitlines()
    assert json.loads("\n".join(plan))["dataset_size"] == 8 and loaded == "[]"


def test_plan_evaluates_on_the_test_rows_it_read_and_refuses_what_the_recipe_refuses(tmp_path, capsys, monkeypatch):
    """A 3-row test split, eval every 2 steps, eval batch 8, 4 generations: 3 × 4 = 12 completions, not a multiple of
    8. plan showed "eval prompts 0" and passed; the recipe refused it naming eval_num_prompts, which is unset."""
    data = _folder(tmp_path, **{"train.jsonl": _rows(GOOD), "test.jsonl": _rows(GOOD[:3])})
    settings = {"dataset_test_split": "test", "eval_strategy": "steps", "eval_steps": 2, "num_generations_eval": 4}
    argv = ["--config", _config(tmp_path, data, per_device_eval_batch_size=8, **settings)]
    expected = ("the test split has 3 rows (all evaluated: eval_num_prompts is unset), and 3 × num_generations_eval=4 "
                "= 12 completions is not a multiple of the eval batch (8 × 1 process(es)). Fix: set eval_num_prompts to a "
                "multiple of 2 (at most 3), give the test split a multiple of 2 rows, or set "
                "per_device_eval_batch_size: 4.")
    code, lines, err = _plan_lines(capsys, argv)
    assert (code, lines) == (2, [expected]), err
    # the recipe: its argument stage refuses it with the same line, listed with any other problem
    code, errors, err = recipe_stages(argv, monkeypatch, capsys)
    assert (code, errors) == (2, [f"error: {expected}"]), err
    # 4 per eval batch: 12 / 4 = 3 batches of the 3 rows read
    capsys.readouterr()
    assert plan_main(["--config", _config(tmp_path, data, per_device_eval_batch_size=4, **settings)]) == 0
    out = capsys.readouterr().out
    assert "eval prompts              3 prompts" in out and "eval batches              3 = 12 / (4 per device" in out


_EVALUATING = {"dataset_test_split": "test", "eval_strategy": "steps", "eval_steps": 1, "per_device_eval_batch_size": 4}


@pytest.mark.parametrize("test_file, problem", [
    ("not json\n", " ('test' split: test.jsonl) cannot be read (ValueError: Unexpected character found when decoding "
                   "'null'). Fix: make each line of test.jsonl one JSON object (JSON lines), e.g. {\"prompt\": \"...\", "
                   "\"answer\": \"...\"}."),
    (_rows([{"question": "say 1", "answer": "1"}]),
     ": the splits have different columns: train ['prompt', 'answer'], test ['question', 'answer']; datasets builds a "
     "folder's splits together, so it reads none of them. Fix: give every split's file the same columns, of the same "
     "types."),
], ids=["test.jsonl not JSON", "test.jsonl other columns"])
def test_a_bad_test_file_is_blamed_on_itself_not_on_train_jsonl(test_file, problem, tmp_path, capsys):
    """datasets builds a folder's splits together: a bad test.jsonl failed the read of the training split, and the
    message blamed train.jsonl ("make each line of train.jsonl one JSON object"), after datasets' own log line."""
    data = _folder(tmp_path, **{"train.jsonl": _rows(GOOD), "test.jsonl": test_file})
    expected = f"dataset_name='{data}'{problem}"
    argv = ["--config", _config(tmp_path, data, **_EVALUATING)]
    code, lines, err = _plan_lines(capsys, argv)
    assert (code, lines) == (2, [expected]), err  # once: the training split's read and the test split's agree
    assert _recipe_lines(capsys, argv) == [expected]


def test_datasets_log_line_of_a_bad_file_is_not_printed(tmp_path):
    """datasets logs "Failed to load JSON from file ..." before raising; plan's one line says it (in a fresh process:
    datasets' log handler writes to the stderr it found at import)."""
    import subprocess
    import sys

    data = _folder(tmp_path, **{"train.jsonl": _rows(GOOD), "test.jsonl": "not json\n"})
    result = subprocess.run([sys.executable, "-m", "trl_grpo_ext.cli", "plan", "--config",
                             _config(tmp_path, data, **_EVALUATING)], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"trl-grpo-ext plan: error: dataset_name='{data}' ('test' split: test.jsonl) "
                                          "cannot be read (ValueError: Unexpected character found when decoding "
                                          "'null'). Fix: make each line of test.jsonl one JSON object (JSON lines), "
                                          "e.g. {\"prompt\": \"...\", \"answer\": \"...\"}."], result.stderr


def test_a_split_the_folder_lacks_is_named_as_such_next_to_good_splits(tmp_path, capsys):
    """The split-at-fault diagnosis reads each split alone only for a split the folder has: a dataset_test_split the
    folder lacks keeps its own line (not "the splits have different column types")."""
    data = _folder(tmp_path, **{"train.jsonl": _rows(GOOD), "test.jsonl": _rows(GOOD[:4])})
    code, lines, err = _plan_lines(capsys, ["--config", _config(tmp_path, data, **{**_EVALUATING,
                                                                                  "dataset_test_split": "validation"})])
    assert code == 2 and len(lines) == 1 and lines[0].startswith("dataset_test_split='validation': "), err
    assert "Fix: name a split that exists, or set eval_strategy: no and final_eval: none." in lines[0]


def test_a_gold_column_of_mappings_is_refused_with_the_field_to_flatten(tmp_path, capsys):
    # verl's layout: reward_model: {style: rule, ground_truth: "1"}; read as text, no completion could match it
    rows = [{"prompt": f"say {i}", "reward_model": {"style": "rule", "ground_truth": str(i)}} for i in range(8)]
    data = _folder(tmp_path, **{"train.jsonl": _rows(rows)})
    config = _config(tmp_path, data, rewards=[{"name": "accuracy", "kwargs": {"column": "reward_model"}}])
    assert plan_main(["--config", config]) == 2
    err = capsys.readouterr().err
    assert ("the column 'reward_model' that the rewards score against holds a dict in row 0 ({'style': 'rule', "
            "'ground_truth': '0'}), not an answer") in err, err
    assert "dataset.map(lambda r: {'answer': r['reward_model']['ground_truth']})" in err
