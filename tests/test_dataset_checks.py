"""Bad datasets get the same treatment as bad configs (issue 22, item 10): a local dataset that cannot serve the run
is refused by the recipe before any model or tokenizer loads, with exit status 2 and one `error:` line naming the
dataset, its file or column, and a fix; never a traceback from `datasets`."""

import json

import pytest
import yaml
from factories import ROOT, recipe_stages

from trl_grpo_ext.cli.plan import main as plan_main


def _rows(rows):
    return "\n".join(json.dumps(r) for r in rows)


GOOD = [{"prompt": f"say {i}", "answer": str(i)} for i in range(8)]
GSM8K = [{"question": f"What is {i} + 1?", "answer": f"{i} + 1 = {i + 1}\n#### {i + 1}"} for i in range(8)]

# name: (files of the dataset folder, or None for dataset_name = a file; config changes; expected words)
CASES = {
    "empty file": ({"train.jsonl": ""}, {}, "('train' split: train.jsonl) is empty (0 bytes). Fix: add prompts"),
    "not JSON": ({"train.jsonl": "prompt,answer\nsay 1,1\n"}, {},
                 "('train' split: train.jsonl) cannot be read (ValueError: "),
    "no data file": ({"README.md": "# notes"}, {}, "holds no file for the 'train' split"),
    "a file, not a folder": (None, {}, "is a file; datasets reads a folder, one file per split. Fix: put it in a "
                                      "folder as train.jsonl"),
    "missing folder": ({}, {"dataset_name": "MISSING"}, "does not exist. Fix: point it at the folder"),
    "no prompt column": ({"train.jsonl": _rows([{"text": r["prompt"], "answer": r["answer"]} for r in GOOD])}, {},
                         "has no 'prompt' column (columns: ['text', 'answer']). Set dataset_prompt_column"),
    "empty prompts": ({"train.jsonl": _rows([{**r, "prompt": "" if i in (3, 5) else r["prompt"]}
                                             for i, r in enumerate(GOOD)])}, {},
                      "('train' split: train.jsonl): 2 of 8 rows have an empty 'prompt' (rows 3, 5, counted from 0)"),
    "gsm8k without question": ({"train.jsonl": _rows([{"problem": r["question"], "answer": r["answer"]}
                                                      for r in GSM8K])}, {"dataset_format": "gsm8k"},
                               "has no 'question' column (columns: ['problem', 'answer']); dataset_format: gsm8k"),
    "gsm8k answers without ####": ({"train.jsonl": _rows([{**r, "answer": r["answer"].split("\n")[0]} if i == 6 else r
                                                          for i, r in enumerate(GSM8K)])},
                                   {"dataset_format": "gsm8k"},
                                   "1 of 8 answers have no '#### <number>' line (rows 6, counted from 0)"),
    "answers all empty": ({"train.jsonl": _rows([{**r, "answer": ""} for r in GOOD])}, {},
                          "the column 'answer' that the rewards score against is empty in all 8 rows"),
    "too few rows for one step": ({"train.jsonl": _rows(GOOD[:1])}, {},
                                  "dataset_size=1 prompts is smaller than one generation batch of 2 prompts"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_local_dataset_is_refused_in_one_line_before_the_model(case, tmp_path, monkeypatch, capsys):
    """Refused at the recipe's argument stage, with the config's problems, once (the recipe's `main` checks no row
    again), and by plan with the same line."""
    files, changes, expected = CASES[case]
    data = tmp_path / "data"
    if files is None:
        data.mkdir()
        (data / "train.jsonl").write_text(_rows(GOOD))
        dataset_name = str(data / "train.jsonl")
    else:
        data.mkdir()
        for name, text in files.items():
            (data / name).write_text(text)
        dataset_name = str(data)
    if changes.get("dataset_name") == "MISSING":
        dataset_name = str(tmp_path / "no-such-folder")
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({
        "model_name_or_path": "embedded:tiny-qwen2", "dataset_train_split": "train", "rewards": ["exact_match"],
        "prompts_per_step": 2, "num_generations": 4, "total_training_steps": 1, "use_cpu": True, "bf16": False,
        "report_to": "none", "output_dir": str(tmp_path / "out"), "max_completion_length": 8,
        **{k: v for k, v in changes.items() if k != "dataset_name"}, "dataset_name": dataset_name,
    }))
    code, errors, err = recipe_stages(["--config", str(config)], monkeypatch, capsys)
    assert code == 2, err[-2000:]
    assert len(errors) == 1 and expected in errors[0], err[-2000:]
    assert "Fix" in errors[0] or "Set " in errors[0] or "use at least" in errors[0]
    assert "Traceback" not in err
    # plan refuses it the same way, with the same line
    assert plan_main(["--config", str(config)]) == 2
    plan_errors = capsys.readouterr().err.strip().splitlines()
    assert plan_errors == [f"trl-grpo-ext plan: {errors[0]}"]


def test_an_unreadable_dataset_shows_no_traceback_in_a_real_run(tmp_path):
    """The same refusal from the command line, where datasets' own log line is the only other output."""
    import os
    import subprocess
    import sys

    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl").write_text('{"prompt": "say 1", "answer": "1"}\n{"prompt": \n')
    result = subprocess.run([sys.executable, str(ROOT / "recipes/grpo_qlora.py"), "--config",
                             "recipes/configs/tiny_cpu.yaml", "--dataset_name", str(data), "--dataset_format", "prompt",
                             "--output_dir", str(tmp_path / "out")], capture_output=True, text=True, cwd=ROOT,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=300)
    assert result.returncode == 2
    assert f"error: dataset_name='{data}' ('train' split: train.jsonl) cannot be read (" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
