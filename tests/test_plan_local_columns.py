"""`plan` sees the columns of a local JSON-lines or CSV dataset (issue 22 rerun of the reward-argument report: plan
exited 0 on a reward whose named argument is not a column of a local dataset, which only the recipe refused)."""

import json

import pytest
import yaml

from trl_grpo_ext.cli.plan import main as plan_main
from trl_grpo_ext.data.local_columns import local_columns

REWARDS = "def needs_assistant(completions, assistant, **kwargs):\n    return [0.0] * len(completions)\n"


@pytest.fixture
def user_reward(tmp_path, monkeypatch):
    (tmp_path / "user_rew.py").write_text(REWARDS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    return "user_rew:needs_assistant"


def _config(tmp_path, data, reward):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({
        "model_name_or_path": "embedded:tiny-qwen2", "dataset_name": str(data), "dataset_train_split": "train",
        "rewards": [reward], "prompts_per_step": 2, "num_generations": 4, "total_training_steps": 2,
        "use_cpu": True, "bf16": False, "report_to": "none", "output_dir": str(tmp_path / "out")}))
    return path


@pytest.mark.parametrize("name,text", [
    ("train.jsonl", "".join(json.dumps({"prompt": f"say {i}", "answer": str(i)}) + "\n" for i in range(4))),
    ("train.csv", "prompt,answer\nsay 1,1\nsay 2,2\n"),
])
def test_plan_refuses_a_reward_argument_a_local_dataset_lacks(name, text, tmp_path, user_reward, capsys):
    data = tmp_path / "data"
    data.mkdir()
    (data / name).write_text(text)
    assert plan_main(["--config", str(_config(tmp_path, data, user_reward))]) == 2
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert "takes the argument 'assistant', which TRL fills only from the dataset column of that name" in line
    assert "but the training dataset has the columns ['answer', 'prompt']" in line
    # with the column, it plans
    (data / name).write_text(text.replace("answer", "assistant"))
    assert plan_main(["--config", str(_config(tmp_path, data, user_reward))]) == 0


def test_columns_are_every_key_of_every_line_or_unknown(tmp_path):
    data = tmp_path / "d"
    data.mkdir()
    (data / "train.jsonl").write_text('{"prompt": "a"}\n\n{"prompt": "b", "late": 1}\n')
    (data / "test.jsonl").write_text('{"q": "a"}\n')
    assert local_columns(str(data), "train") == ["prompt", "late"]  # a key of a later row counts (datasets unifies)
    assert local_columns(str(data), "test") == ["q"]
    (data / "train.csv").write_text("prompt\nx\n")
    assert local_columns(str(data), "train") is None  # two formats: the recipe refuses that itself
    (data / "test.jsonl").write_text('[1, 2]\n')
    assert local_columns(str(data), "test") is None  # not JSON objects
    assert local_columns(str(tmp_path / "missing"), "train") is None
    assert local_columns("openai/gsm8k", "train") is None
