"""Bad datasets the first round of issue 22 let through (an adversarial review): prompts that are neither text nor
chat messages, gold answers math-verify cannot score, load errors answered with advice for another format. Each is
refused by the recipe before any model or tokenizer loads, exit status 2, one `error:` line naming the dataset, its
file or column, the value and a fix."""

import json

import pytest
import yaml
from factories import recipe_stages


def _rows(rows):
    return "".join(json.dumps(r) + "\n" for r in rows)


def _config(tmp_path, dataset_name, **changes):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({
        "model_name_or_path": "embedded:tiny-qwen2", "dataset_train_split": "train", "rewards": ["exact_match"],
        "prompts_per_step": 2, "num_generations": 4, "total_training_steps": 1, "use_cpu": True, "bf16": False,
        "report_to": "none", "output_dir": str(tmp_path / "out"), "max_completion_length": 8,
        "dataset_name": str(dataset_name), **changes}))
    return config


def _recipe_errors(tmp_path, monkeypatch, capsys, files, **changes):
    """Run the recipe (models forbidden) on a dataset folder holding ``files``: the exit status and error lines of its
    argument stage, which lists the dataset's problems with the config's."""
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    for name, content in files.items():
        (data / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    return recipe_stages(["--config", str(_config(tmp_path, data, **changes))], monkeypatch, capsys)


PROMPT_KINDS = {
    "int prompts": ([{"prompt": i, "answer": str(i)} for i in range(8)], {},
                    "8 of 8 rows have a 'prompt' that is not text or a list of chat messages [{'role': 'user', "
                    "'content': '...'}] (rows 0, 1, 2, 3, 4, ..., counted from 0; row 0: int '0')"),
    "lists of strings": ([{"prompt": ["say", str(i)], "answer": str(i)} for i in range(8)], {},
                         "8 of 8 rows have a 'prompt' that is not text or a list of chat messages"),
    "one dict prompt among text": ([{"prompt": {"text": "say 3"} if i == 3 else f"say {i}", "answer": str(i)}
                                    for i in range(8)], {}, "1 of 8 rows have a 'prompt' that is not text or a list "
                                                            "of chat messages [{'role': 'user', 'content': '...'}] "
                                                            "(rows 3, counted from 0; row 3: dict \"{'text': 'say 3'}\")"),
    "messages with a number as content": ([{"prompt": [{"role": "user", "content": i}], "answer": str(i)}
                                           for i in range(8)], {}, "a message whose content is int '0'"),
    "int prompts in another column": ([{"problem": i, "answer": str(i)} for i in range(8)],
                                      {"dataset_prompt_column": "problem"},
                                      "8 of 8 rows have a 'problem' that is not text"),
    "gsm8k questions as lists": ([{"question": [f"What is {i} + 1?"], "answer": f"#### {i + 1}"} for i in range(8)],
                                 {"dataset_format": "gsm8k"}, "8 of 8 rows have a 'question' that is not text (rows"),
    # the breaker's finding: TRL raises "Invalid role in the last message: system" at the first generation
    "system-only prompts": ([{"prompt": [{"role": "system", "content": f"say {i}"}], "answer": str(i)}
                             for i in range(8)], {}, "row 0: chat messages ending with a 'system' message (TRL "
                                                     "generates after a user or tool message"),
}


@pytest.mark.parametrize("case", list(PROMPT_KINDS))
def test_a_prompt_that_is_not_text_or_chat_messages_is_refused(case, tmp_path, monkeypatch, capsys):
    rows, changes, expected = PROMPT_KINDS[case]
    code, errors, err = _recipe_errors(tmp_path, monkeypatch, capsys, {"train.jsonl": _rows(rows)}, **changes)
    assert code == 2, err
    assert len(errors) == 1, err
    assert expected in errors[0], errors[0]
    assert errors[0].startswith(f"error: dataset_name='{tmp_path / 'data'}' ('train' split: train.jsonl)")
    assert "Traceback" not in err


JSONL_ADVICE = "one JSON object (JSON lines)"
LOAD_ERRORS = {
    "a CSV with a row of too many fields": ({"train.csv": "prompt,answer\nsay 1,1\nsay 2,2,3,4\n"},
                                            "('train' split: train.csv) cannot be read (ParserError: Error tokenizing "
                                            "data. C error: Expected 2 fields in line 3, saw 4). Fix: make train.csv "
                                            "a CSV with one header row"),
    "a parquet file that is not parquet": ({"train.parquet": "prompt,answer\n"},
                                           "('train' split: train.parquet) cannot be read (ArrowInvalid: Parquet magic "
                                           "bytes not found in footer. Either the file is corrupted or this is not a "
                                           "parquet file.). Fix: train.parquet is not a valid Parquet file: write it "
                                           "again"),
    "an empty parquet file": ({"train.parquet": ""},
                              "('train' split: train.parquet) is empty (0 bytes). Fix: add prompts to it."),
    "an empty CSV file": ({"train.csv": ""}, "('train' split: train.csv) is empty (0 bytes). Fix: add prompts to it, "
                                             "a header row (e.g. prompt,answer) then one row per prompt."),
    "JSON and CSV files for one split": ({"train.jsonl": '{"prompt": "say 1", "answer": "1"}\n',
                                          "train.csv": "prompt,answer\nsay 2,2\n"},
                                         "('train' split: train.csv, train.jsonl) mixes file formats (.csv, .jsonl); "
                                         "datasets would read the files of one format and silently drop the others"),
    "a broken JSON line (the advice that fits)": ({"train.jsonl": '{"prompt": "say 1"\n'},
                                                  "Fix: make each line of train.jsonl one JSON object (JSON lines)"),
}


@pytest.mark.parametrize("case", list(LOAD_ERRORS))
def test_a_load_error_gets_the_advice_of_its_format(case, tmp_path, monkeypatch, capsys):
    files, expected = LOAD_ERRORS[case]
    code, errors, err = _recipe_errors(tmp_path, monkeypatch, capsys, files)
    assert code == 2, err
    assert len(errors) == 1, err
    assert expected in errors[0], errors[0]
    if not any(name.endswith(".jsonl") for name in files):
        assert JSONL_ADVICE not in errors[0]
    assert "Traceback" not in err


def test_a_missing_relative_folder_is_named_as_a_missing_folder(tmp_path, monkeypatch, capsys):
    """`data/gsm8k` (no leading ./) is a Hub id in datasets' eyes; when no such folder exists the line says so too."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, errors, _ = recipe_stages(["--config", str(_config(tmp_path, "data/gsm8k"))], monkeypatch, capsys)
    assert code == 2
    assert errors == [f"error: dataset_name='data/gsm8k' ('train' split) cannot be read (ConnectionError: Couldn't "
                      "reach 'data/gsm8k' on the Hub (OfflineModeIsEnabled)). Fix: no local folder 'data/gsm8k' exists "
                      f"(relative to {tmp_path}) either: point dataset_name at the folder holding the split files, or "
                      "check the Hub id, dataset_config and your network or cache."]


def test_a_config_name_a_local_folder_lacks_names_dataset_config(tmp_path, monkeypatch, capsys):
    code, errors, err = _recipe_errors(tmp_path, monkeypatch, capsys,
                                       {"train.jsonl": '{"prompt": "say 1", "answer": "1"}\n' * 8},
                                       dataset_config="main")
    assert code == 2, err
    assert errors == ["error: dataset_config='main': ValueError: BuilderConfig 'main' not found. Available: "
                      "['default']. Fix: name a configuration the dataset has, or remove dataset_config (a local "
                      "folder has only 'default')."]


def test_prompts_ending_with_an_assistant_message_are_warned(tmp_path, monkeypatch, capsys):
    """Whole conversations as prompts (the breaker's finding): TRL continues the final assistant message, which holds
    the answer; accepted (a prefill is legitimate), with one warning from the recipe and from plan."""
    from trl_grpo_ext.cli import plan as plan_cli

    rows = [{"prompt": [{"role": "user", "content": f"say {i}"}, {"role": "assistant", "content": str(i)}],
             "answer": str(i)} for i in range(8)]
    code, _, err = _recipe_errors(tmp_path, monkeypatch, capsys, {"train.jsonl": _rows(rows)})
    assert code == 0  # accepted, with the warning
    expected = "8 of 8 prompts end with an assistant message (row 0), which TRL continues instead of answering"
    assert expected in err
    assert plan_cli.main(["--config", str(_config(tmp_path, tmp_path / "data"))]) == 0
    assert sum(expected in line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")) == 1

