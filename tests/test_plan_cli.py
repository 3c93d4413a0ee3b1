"""`trl-grpo-ext plan`: table, JSON, dataset size sources, processes, one-line errors, no torch import."""

import json
import sys
from pathlib import Path

import pytest

from trl_grpo_ext.cli import main as cli
from trl_grpo_ext.cli import plan as plan_cli

TUTORIAL = """\
model_name_or_path: Qwen/Qwen2.5-0.5B-Instruct
dataset_name: openai/gsm8k
prompts_per_step: 4
num_generations: 8
total_training_steps: 1000
total_epochs: 3
max_completion_length: 256
learning_rate: 1.0e-5
bf16: true
"""


@pytest.fixture
def write_yaml(tmp_path):
    def write(text: str, name: str = "config.yaml") -> str:
        """``text`` as a config file; ``rewards: [format]`` added to a mapping that sets no reward (a run needs one)."""
        path = tmp_path / name
        if "rewards" not in text and "reward_funcs" not in text and not text.startswith("- "):
            text += "rewards: [format]\n"
        path.write_text(text)
        return str(path)

    return write


def run_plan(capsys, *argv):
    code = plan_cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_dispatcher_routes_plan_here():
    assert cli.SUBCOMMANDS["plan"] == "trl_grpo_ext.cli.plan"


def test_tutorial_table(capsys, write_yaml, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    code, out, err = run_plan(capsys, "--config", write_yaml(TUTORIAL), "--dataset-size", "2000")
    assert code == 0
    assert "floor(2000 / 4) × 1 = 500" in out  # steps per epoch
    assert "min(1000, 1500) stopped by the step limit" in out
    assert "32 completions" in out and "8,192 tokens" in out  # 32 × 256
    # G = 8 for an instruct model, 4 prompts/step, 2 epochs: nothing to warn about; a Hub dataset plan does not read
    # (offline and not in the datasets cache, or online: plan downloads nothing) is said in one line
    assert err.count("\n") == 1 and err.startswith("note: dataset checks not run: dataset_name='openai/gsm8k' is a "
                                                     "Hub dataset"), err


def test_tutorial_json(capsys, write_yaml, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    code, out, _ = run_plan(capsys, "--config", write_yaml(TUTORIAL), "--dataset-size", "2000", "--json")
    assert code == 0
    plan = json.loads(out)
    assert (plan["steps_per_epoch"], plan["total_steps"], plan["epochs_covered"]) == (500, 1000, 2.0)
    assert plan["stop_reason"] == "step_limit" and plan["completions_per_step"] == 32


def test_embedded_dataset_size_from_yaml(capsys, write_yaml, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    # 64 prompts / 4 per step = 16 steps/epoch; 2 epochs = 32 steps
    text = "dataset_name: 'embedded:count-char'\nembedded_num_prompts: 64\nprompts_per_step: 4\nnum_generations: 4\n" \
           "total_epochs: 2\nmax_completion_length: 24\n"
    code, out, _ = run_plan(capsys, "--config", write_yaml(text), "--json")
    assert code == 0 and json.loads(out)["total_steps"] == 32


def test_embedded_dataset_defaults_to_512_prompts(capsys, write_yaml, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    # 512 / 4 = 128 steps in one epoch
    text = "dataset_name: 'embedded:count-char'\nprompts_per_step: 4\nnum_generations: 4\ntotal_epochs: 1\n"
    code, out, _ = run_plan(capsys, "--config", write_yaml(text), "--json")
    assert code == 0
    assert (json.loads(out)["dataset_size"], json.loads(out)["total_steps"]) == (512, 128)


def test_dataset_size_flag_that_differs_from_the_embedded_size_is_refused(capsys, write_yaml, monkeypatch):
    """--dataset-size 40 on an embedded task of 64 prompts planned 10 steps for a run that trains 16 (it used to win
    silently); the same size is accepted."""
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    text = "dataset_name: 'embedded:count-char'\nembedded_num_prompts: 64\nprompts_per_step: 4\ntotal_epochs: 1\n"
    code, out, err = run_plan(capsys, "--config", write_yaml(text), "--dataset-size", "40", "--json")
    assert code == 2 and out == ""
    assert err == ("trl-grpo-ext plan: error: --dataset-size 40: dataset_name='embedded:count-char' is embedded and "
                   "the run trains on its embedded_num_prompts=64 prompts. Fix: remove --dataset-size, or set "
                   "embedded_num_prompts: 40.\n")
    code, out, _ = run_plan(capsys, "--config", write_yaml(text), "--dataset-size", "64", "--json")
    assert code == 0 and json.loads(out)["total_steps"] == 16  # 64 / 4


def test_unknown_dataset_plans_steps_only(capsys, write_yaml, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    code, out, err = run_plan(capsys, "--config", write_yaml(TUTORIAL))
    assert code == 0
    assert "unknown (steps only)" in out and "1000 steps" in out
    assert "warning: total_epochs=3 cannot be checked without the dataset size" in err


def test_num_processes_flag_and_world_size_env(capsys, write_yaml, monkeypatch):
    # TRL terms on 3 processes: 4 × 3 × 2 / 6 = 4 prompts/step, 8000 / 4 = 2000 steps/epoch, 2 epochs = 4000
    text = "num_generations: 6\nper_device_train_batch_size: 4\ngradient_accumulation_steps: 2\nnum_train_epochs: 2\n"
    path = write_yaml(text)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    code, out, _ = run_plan(capsys, "--config", path, "--dataset-size", "8000", "--num-processes", "3", "--json")
    assert code == 0 and json.loads(out)["total_steps"] == 4000
    monkeypatch.setenv("WORLD_SIZE", "3")
    code, out, _ = run_plan(capsys, "--config", path, "--dataset-size", "8000", "--json")
    assert code == 0 and json.loads(out)["world_size"] == 3


def test_numeric_strings_are_read_as_numbers(capsys, write_yaml, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    text = "prompts_per_step: '4'\nnum_generations: '8'\ntotal_epochs: '1.5'\n"
    code, out, _ = run_plan(capsys, "--config", write_yaml(text), "--dataset-size", "100", "--json")
    # 100 / 4 = 25 steps/epoch; ceil(1.5 × 25) = 38
    assert code == 0 and json.loads(out)["total_steps"] == 38


def test_warnings_go_to_stderr(capsys, write_yaml, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    text = "model_name_or_path: Qwen/Qwen2.5-1.5B-Instruct\nprompts_per_step: 1\nnum_generations: 4\ntotal_epochs: 1\n"
    code, out, err = run_plan(capsys, "--config", write_yaml(text), "--dataset-size", "100")
    assert code == 0 and "warning" not in out
    assert "warning: num_generations=4 is below 8 for an instruct model" in err
    assert "warning: prompts_per_step=1" in err


@pytest.mark.parametrize(
    "text, expected",
    [
        ("prompts_per_step: 4\nper_device_train_batch_size: 16\n",
         "prompts_per_step=4 conflicts with per_device_train_batch_size=16"),
        ("prompts_per_step: 4\nmicro_batch_size: 6\n", "micro_batch_size=6 does not divide the 32 completions"),
        ("prompts_per_step: [4\n", "while parsing"),  # invalid YAML
        ("- a\n- b\n", "expected a mapping"),
        ("prompts_per_step: 4\ntotal_epochs: 1\n", "dataset size unknown"),
    ],
    ids=["conflict", "divisibility", "bad yaml", "not a mapping", "no stop without dataset size"],
)
def test_errors_print_one_line_and_exit_2(capsys, write_yaml, monkeypatch, text, expected):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    code, out, err = run_plan(capsys, "--config", write_yaml(text))
    assert code == 2 and out == ""
    assert err.startswith("trl-grpo-ext plan: error: ") and expected in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_missing_config_file(capsys, tmp_path):
    code, _, err = run_plan(capsys, "--config", str(tmp_path / "absent.yaml"))
    assert code == 2 and "no such file" in err and err.count("\n") == 1


def test_bad_world_size_env(capsys, write_yaml, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "two")
    code, _, err = run_plan(capsys, "--config", write_yaml(TUTORIAL))
    assert code == 2 and "WORLD_SIZE='two'" in err and "--num-processes" in err


def test_resample_note_says_how_resampling_counts(tmp_path, capsys):
    from trl_grpo_ext.cli.plan import main

    config = tmp_path / "rs.yaml"
    config.write_text("dataset_name: embedded:count-char\nprompts_per_step: 4\nnum_generations: 8\n"
                      "total_training_steps: 100\nzero_variance_filter: resample\nmax_resample_rounds: 2\n"
                      "rewards: [char_fraction]\n")
    assert main(["--config", str(config)]) == 0
    err = capsys.readouterr().err
    # 2 rounds x 4 prompts = 8 extra prompts = 64 extra completions per step at most
    assert "note: zero_variance_filter=resample" in err
    assert "at most 8 extra prompts (2 rounds × 4), i.e. up to 64 extra completions" in err
    # 100 steps of 128 per epoch (512 prompts / 4): the epochs as the table rounds them, not 0.78125000...
    assert "(the 100 steps and 0.7812 epochs above stay exact)" in err


def test_plan_lists_the_resolved_rewards(capsys):
    from pathlib import Path

    from trl_grpo_ext.cli.plan import main

    config = Path(__file__).resolve().parents[1] / "recipes/configs/qwen2.5-0.5b-instruct_gsm8k.yaml"
    assert main(["--config", str(config), "--dataset-size", "7473"]) == 0
    assert "rewards: accuracy × 1 (column='answer') + format × 0.25" in capsys.readouterr().out


def test_plan_prints_the_evaluation_quantities_and_refuses_an_impossible_eval_batch(capsys, write_yaml):
    config = TUTORIAL + "eval_strategy: steps\neval_steps: 100\neval_num_prompts: 256\nnum_generations_eval: 2\n" \
                        "per_device_eval_batch_size: 32\nfinal_eval: compare_base\nuse_peft: true\n"
    code, out, _ = run_plan(capsys, "--config", write_yaml(config), "--dataset-size", "7473")
    assert code == 0
    assert "512 completions = 256 × 2" in out and "16 = 512 / (32" in out and "10 (every 100 steps)" in out
    code, _, err = run_plan(capsys, "--config", write_yaml(config.replace("eval_batch_size: 32", "eval_batch_size: 3")),
                            "--dataset-size", "7473")
    assert code == 2 and "per_device_eval_batch_size=3" in err


def test_plan_warns_when_an_evaluation_forecasts_mostly_uniform_groups(capsys, write_yaml, tmp_path):
    results = tmp_path / "eval.json"
    results.write_text(json.dumps({"uniform_group_forecast": {"2": 0.9, "4": 0.85, "8": 0.74, "16": 0.7},
                                   "pass_rates": [0.0, 0.125]}))
    code, _, err = run_plan(capsys, "--config", write_yaml(TUTORIAL), "--dataset-size", "2000",
                            "--eval-results", str(results))
    assert code == 0 and "74% of groups with σ = 0 at G=8" in err
    # a forecast below the warning's one half is still reported, as a note (a new user's finding: nothing was printed)
    results.write_text(json.dumps({"uniform_group_forecast": {"8": 0.125}, "pass_rates": [0.0, 0.5]}))
    code, _, err = run_plan(capsys, "--config", write_yaml(TUTORIAL), "--dataset-size", "2000",
                            "--eval-results", str(results))
    assert code == 0 and "warning" not in err
    assert f"note: --eval-results {results}: the σ = 0 forecast for num_generations=8 is 0.12 of the groups" in err


@pytest.mark.slow
def test_plan_costs_what_importing_grpo_config_costs():
    """Issue 23's bar: the median wall time of `plan --config tiny_cpu` is about that of `from trl import GRPOConfig`
    (interleaved runs, benchmarks/plan_latency.py; measured 15.3 s against 17.1 s on one loaded core)."""
    import statistics

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from plan_latency import measure

    times = measure(9, "tiny_cpu")
    assert statistics.median(times["plan"]) <= 1.2 * statistics.median(times["import"]), times


@pytest.mark.parametrize("extra, says", [
    (["--zero_variance_reward", "accuracy"], "is not one of this run's rewards"),  # judged with the filter off too
    (["--zero_variance_filter", "mask", "--zero_variance_reward", "accuracy"], "is not one of this run's rewards"),
    ({"dtype": "fp16"}, "dtype='fp16' is not valid"),  # argparse checks the command line; YAML values too
    ({"log_level": "verbose"}, "log_level='verbose' is not valid"),
    # the recipe refused these after its own checks, plan accepted them (a differential breaker's finding)
    ({"model_name_or_path": "embedded:bogus"}, "'embedded:bogus' is not an embedded model"),
])
def test_plan_refuses_what_the_run_refuses(capsys, tmp_path, extra, says):
    """The zero-variance filter's checks and argparse choices of a YAML value, refused by plan as by the run."""
    from factories import tiny_cpu_yaml

    changes = extra if isinstance(extra, dict) else {}
    cli = [] if isinstance(extra, dict) else extra
    code, _, err = run_plan(capsys, "--config", tiny_cpu_yaml(tmp_path, **changes), *cli)
    assert code == 2 and says in err, err


def test_a_local_model_path_that_does_not_exist_is_refused_as_the_recipe_refuses_it(capsys, write_yaml, tmp_path):
    missing = tmp_path / "no_such_model"
    text = f"model_name_or_path: {missing}\ndataset_name: 'embedded:count-char'\ntemperature: 0\n"
    code, out, err = run_plan(capsys, "--config", write_yaml(text))
    errors = [line for line in err.splitlines() if "error:" in line]
    assert code == 2 and len(errors) == 2, err  # listed with the config's other problem
    assert f"model_name_or_path='{missing}' is not an existing directory" in err and "temperature=0" in err
    # a Hub id is not looked up by plan (offline it is a GPU config's normal case)
    code, _, err = run_plan(capsys, "--config", write_yaml("model_name_or_path: Qwen/Qwen2.5-0.5B-Instruct\n"
                                                           "dataset_name: 'embedded:count-char'\n"))
    assert code == 0, err


def test_eval_results_of_a_graded_reward_beyond_their_samples_ask_for_more_samples(tmp_path, capsys):
    """`eval --k 8` on char_fraction, then `plan --num_generations 16`: the pass/fail table's 100% at G=16 raised a
    false alarm (a new user's finding); now no warning, and the note asks for K >= 16."""
    results = tmp_path / "eval.json"
    results.write_text(json.dumps({"base": {"uniform_group_forecast": {"2": 1.0, "8": 1.0, "16": 1.0},
                                            "uniform_group_forecast_weighted": {"2": 0.3, "8": 0.02},
                                            "pass_rates": [0.0, 0.0], "correctness_reward": "char_fraction"}}))
    code = plan_cli.main(["--config", "tiny_cpu", "--eval-results", str(results), "--num_generations", "16",
                          "--micro_batch_size", "32"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "forecasts" not in err
    assert (f"note: --eval-results {results} holds no σ = 0 forecast for num_generations=16: rerun `trl-grpo-ext eval "
            "--k K` with K >= 16") in err


@pytest.mark.parametrize("value", ["-1", "0", "nan", "abc"])
def test_gpu_memory_must_be_a_positive_number(value, capsys):
    # -1 and nan passed every memory check ("... within it")
    with pytest.raises(SystemExit):
        plan_cli.main(["--config", "tiny_cpu", "--gpu-memory-gib", value])
    assert f"argument --gpu-memory-gib: '{value}' is not a finite number > 0" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["-5", "0", "x"])
def test_dataset_size_must_be_a_whole_number_of_prompts(value, capsys):
    # -5 reached the embedded-task check, whose fix suggested embedded_num_prompts: -5
    with pytest.raises(SystemExit):
        plan_cli.main(["--config", "tiny_cpu", "--dataset-size", value])
    assert f"argument --dataset-size: '{value}' is not a whole number of prompts >= 1 (e.g. 2000)" in \
        capsys.readouterr().err


def test_eval_results_that_cannot_be_read_name_the_flag_and_the_fix(capsys, tmp_path):
    assert plan_cli.main(["--config", "tiny_cpu", "--eval-results", str(tmp_path / "missing.json")]) == 2
    assert (f"--eval-results {tmp_path / 'missing.json'}: cannot be read (No such file or directory); pass the output "
            "of `trl-grpo-ext eval --k K --json`") in capsys.readouterr().err
