"""GSM8K row mapping (question -> chat prompt, answer -> number after ####) on local rows of that format."""

import json
from types import SimpleNamespace

import pytest

from trl_grpo_ext.data.load import GSM8K_SYSTEM_PROMPT, gsm8k_final_answer, gsm8k_to_prompt, load_prompt_dataset

# Three rows in GSM8K's exact format (train split, "main" config).
GSM8K_ROWS = [
    {
        "question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
        "How many clips did Natalia sell altogether in April and May?",
        "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
        "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72",
    },
    {
        "question": "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting. "
        "How much did she earn?",
        "answer": "Weng earns 12/60 = $<<12/60=0.2>>0.2 per minute.\nWorking 50 minutes, she earned "
        "0.2 x 50 = $<<0.2*50=10>>10.\n#### 10",
    },
    {"question": "A big number?", "answer": "It is 1,234 + 1 = 1,235.\n#### 1,235"},
]


def test_final_answer_is_the_number_after_hashes():
    assert [gsm8k_final_answer(r["answer"]) for r in GSM8K_ROWS] == ["72", "10", "1235"]
    with pytest.raises(ValueError, match="####"):
        gsm8k_final_answer("no marker here")


def test_row_becomes_chat_prompt():
    mapped = gsm8k_to_prompt(GSM8K_ROWS[0])
    assert mapped["answer"] == "72"
    assert mapped["prompt"] == [
        {"role": "system", "content": GSM8K_SYSTEM_PROMPT},
        {"role": "user", "content": GSM8K_ROWS[0]["question"]},
    ]
    assert gsm8k_to_prompt(GSM8K_ROWS[1], system_prompt=None)["prompt"] == [
        {"role": "user", "content": GSM8K_ROWS[1]["question"]}
    ]


def test_load_prompt_dataset_from_local_gsm8k_files(tmp_path):
    (tmp_path / "train.jsonl").write_text("\n".join(json.dumps(r) for r in GSM8K_ROWS))
    args = SimpleNamespace(dataset_name=str(tmp_path), dataset_config=None, dataset_train_split="train",
                           dataset_format="gsm8k", system_prompt="Be brief.")
    dataset = load_prompt_dataset(args)
    assert sorted(dataset.column_names) == ["answer", "prompt"]
    assert dataset["answer"] == ["72", "10", "1235"]
    assert dataset[2]["prompt"] == [{"role": "system", "content": "Be brief."},
                                    {"role": "user", "content": "A big number?"}]


def test_load_prompt_dataset_without_prompt_column_names_the_fix(tmp_path):
    (tmp_path / "train.jsonl").write_text(json.dumps({"text": "x"}))
    args = SimpleNamespace(dataset_name=str(tmp_path), dataset_config=None, dataset_train_split="train",
                           dataset_format="prompt", system_prompt=None)
    with pytest.raises(ValueError, match="dataset_format: gsm8k"):
        load_prompt_dataset(args)


def test_embedded_dataset():
    args = SimpleNamespace(dataset_name="embedded:count-char", embedded_num_prompts=10, embedded_target="e")
    dataset = load_prompt_dataset(args)
    assert len(dataset) == 10 and set(dataset["target"]) == {"e"}


def test_reward_trend_and_plot(tmp_path):
    from trl_grpo_ext.hub.plot import plot_training, reward_trend

    history = [{"step": i, "reward": r, "reward_std": 0.1, "frac_reward_zero_std": 0.5}
               for i, r in enumerate([0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.0], start=1)]
    history.append({"train_runtime": 1.0})
    assert reward_trend(history) == (0.0, 1.0)  # 10% of 12 logged steps -> 1 step each end
    assert reward_trend(history, fraction=0.25) == pytest.approx((0.1, (0.9 + 1.0 + 1.0) / 3))
    path = plot_training(history, tmp_path / "plot.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="logging_steps"):
        plot_training([{"loss": 1.0}], tmp_path / "x.png")


def test_the_run_s_seed_leaves_the_embedded_problems_alone(tmp_path):
    """Runs of several seeds train and are evaluated on the same problems (the held-out set of `make demo-real` is
    the same 200 for every seed); `embedded_seed` draws another set."""
    from factories import tiny_cpu_yaml

    from trl_grpo_ext.config.frontdoor import read_run_args
    from trl_grpo_ext.data.arithmetic import arithmetic_rows
    from trl_grpo_ext.data.load import load_eval_dataset

    def test_split(*cli):
        config = tiny_cpu_yaml(tmp_path, drop=("embedded_target",), dataset_name="embedded:arithmetic",
                               rewards=["numeric_match"])
        run = read_run_args(["--config", config, *cli], light=True)
        return load_eval_dataset(run.script_args, split="test", num_prompts=5)["prompt"]

    assert test_split("--seed", "0") == test_split("--seed", "1") == test_split("--seed", "7")
    other = test_split("--embedded_seed", "1")
    assert other != test_split()
    assert [prompt[-1]["content"] for prompt in other] == [row["question"] for row in arithmetic_rows("test", 5, seed=1)]
