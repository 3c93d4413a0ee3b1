"""`trl-grpo-ext eval` and the recipe's final evaluation on the embedded demo: the trained adapter beats its base.

The module trains the full demo once (tiny_cpu.yaml: 120 optimizer steps, about 30 s on 2 idle cores), then checks
what the recipe wrote and what `eval --compare-base` reports on the same adapter.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trl_grpo_ext.evaluation.evaluate import EvalResult, compare, evaluate_model

ROOT = Path(__file__).resolve().parents[1]


def _run(command: list[str], timeout: int) -> subprocess.CompletedProcess:
    # one torch thread: the tiny model gains nothing from two, and on a busy machine spinning threads stall it
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=timeout)


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "run"
    result = _run([sys.executable, "-m", "accelerate.commands.launch", "--config_file",
                   "recipes/accelerate_configs/cpu.yaml", "recipes/grpo_qlora.py", "--config",
                   "recipes/configs/tiny_cpu.yaml", "--output_dir", str(out), "--save_strategy", "no"], timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return out, result


def test_the_recipe_evaluates_base_and_adapter_after_training(demo_run):
    out, result = demo_run
    results = json.loads((out / "eval_results.json").read_text())
    base, trained = results["base"], results["trained"]
    assert base["num_prompts"] == trained["num_prompts"] == 64
    # a random policy writes the target character about 1/55 of the time; the trained one nearly always
    assert base["mean_reward"]["char_fraction"] < 0.15
    assert trained["mean_reward"]["char_fraction"] > 0.9
    assert results["difference"] == pytest.approx(trained["accuracy"] - base["accuracy"])
    assert results["difference_ci"][0] > 0
    assert "Greedy accuracy on 64 held-out prompts:" in result.stdout and "(base model, no adapter) ->" in result.stdout
    # TRL's eval loop ran every 40 steps on the held-out split
    state = json.loads((out / "trainer_state.json").read_text())
    assert [h["step"] for h in state["log_history"] if "eval_reward" in h] == [40, 80, 120]
    card = (out / "README.md").read_text()
    assert "## Evaluation" in card and "trained adapter" in card and "model-index" in card
    # the run names its seeds under the plan table, as `plan` does
    seeds = "seed: 0 (prompt order, sampling, adapter initialisation); embedded_seed: 0 (the embedded task's problems)"
    plan = _run([sys.executable, "-m", "trl_grpo_ext.cli.main", "plan", "--config", "tiny_cpu"], timeout=120)
    assert seeds in result.stdout.splitlines() and seeds in plan.stdout.splitlines()


def test_eval_compare_base_on_the_demo_adapter_shows_the_gain(demo_run):
    out, _ = demo_run
    result = _run([sys.executable, "-m", "trl_grpo_ext.cli.main", "eval", "--config", "tiny_cpu", "--adapter", str(out),
                   "--compare-base", "--num-prompts", "32", "--k", "4", "--json"], timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    base, adapter = report["base"], report["adapter"]
    for key in ("num_prompts", "accuracy", "accuracy_ci", "mean_reward", "pass_at_k", "uniform_group_forecast"):
        assert key in base and key in adapter, key
    assert base["num_prompts"] == 32 and list(adapter["pass_at_k"]) == ["1", "2", "4"]
    assert base["mean_reward"]["char_fraction"] < 0.15 < 0.9 < adapter["mean_reward"]["char_fraction"]
    low, high = report["difference_ci"]
    assert 0 < low <= report["difference"] <= high
    # read as pass/fail (every character the target), the base almost never passes, so nearly every group would be
    # uniform (a sample that is one 'a' and then EOS passes: about 1/55 × 1/55 per sample, so one of the 128 samples
    # does now and then, and one prompt at pass rate 1/4 gives 0.75^8 = 0.1 of its groups informative: 0.97 here) ...
    assert base["uniform_group_forecast"]["8"] >= 0.95
    # ... but the graded reward the run trains on varies inside most groups (K = 4 samples: G = 2 and 4 only)
    assert set(base["uniform_group_forecast_weighted"]) == {"2", "4"}
    assert base["uniform_group_forecast_weighted"]["4"] < 0.5


@pytest.mark.parametrize(
    "args, message",
    [(["--config", "tiny_cpu", "--compare-base"], "--compare-base needs --adapter"),
     (["--config", "tiny_cpu", "--adapter", "."], "holds no adapter_config.json"),
     (["--config", "tiny_cpu", "--num-prompts", "0"], "--num-prompts=0 must be an integer >= 1"),
     (["--config", "tiny_cpu", "--k", "-1"], "--k=-1 must be an integer >= 0"),
     (["--config", "no_such_config"], "no shipped config of that name"),
     (["--config", "tiny_cpu", "--num-prompts", "65"], "--num-prompts=65 exceeds the 64 prompts"),
     # the train split: every prompt by default, and a refusal names the flag that set the size, not eval_num_prompts
     (["--config", "tiny_cpu", "--split", "train", "--num-prompts", "241"],
      "--num-prompts=241 exceeds the 240 prompts of the 'train' split of 'embedded:count-char'. Fix: pass "
      "--num-prompts 240 or lower."),
     (["--config", "tiny_cpu", "--learning_rte", "1"], "learning_rte")],
)
def test_eval_refuses_bad_arguments_before_loading(args, message, capsys, monkeypatch):
    import transformers

    from trl_grpo_ext.cli.main import main

    def no_weights(*a, **k):
        raise AssertionError("a model was loaded")

    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_weights)
    assert main(["eval", *args]) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and message in errors[0] and "Traceback" not in err, err


def test_eval_refuses_an_adapter_or_output_it_would_fail_on_after_loading(tmp_path, capsys, monkeypatch):
    # a breaker's findings: `{}` as adapter_config.json (KeyError 'peft_type') and garbage weights (SafetensorError)
    # failed after the base loaded; --output /sys/x.json failed after the evaluation, with a traceback; --output naming
    # the --config file overwrote the config; --output "" wrote nothing
    import transformers

    from trl_grpo_ext.cli.main import main

    def no_weights(*a, **k):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_weights)
    config = tmp_path / "tiny_cpu.yaml"  # a copy, so that a hard link to it stays on one file system
    config.write_text((ROOT / "recipes/configs/tiny_cpu.yaml").read_text())
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty/adapter_config.json").write_text("{}")
    (tmp_path / "garbage").mkdir()
    (tmp_path / "garbage/adapter_config.json").write_text('{"peft_type": "LORA"}')
    (tmp_path / "garbage/adapter_model.safetensors").write_bytes(b"\xff" * 64)
    (tmp_path / "weightless").mkdir()
    (tmp_path / "weightless/adapter_config.json").write_text('{"peft_type": "LORA"}')
    (tmp_path / "bogus").mkdir()  # a second breaker's findings: KeyError 'BOGUS', an UnpicklingError
    (tmp_path / "bogus/adapter_config.json").write_text('{"peft_type": "BOGUS"}')
    (tmp_path / "bogus/adapter_model.safetensors").write_bytes(b"")
    (tmp_path / "badbin").mkdir()
    (tmp_path / "badbin/adapter_config.json").write_text('{"peft_type": "LORA"}')
    (tmp_path / "badbin/adapter_model.bin").write_text("garbage")
    os.link(config, tmp_path / "linked.yaml")  # a hard link to the config: the same file
    (tmp_path / "notes.txt").write_text("a file, not a folder")  # a path below it cannot be created, root or not
    cases = [(["--adapter", str(tmp_path / "empty")], "holds an adapter_config.json without a peft_type"),
             (["--adapter", str(tmp_path / "garbage")], "holds an adapter_model.safetensors that cannot be read ("),
             (["--adapter", str(tmp_path / "weightless")], "holds no adapter weights (adapter_model.safetensors or "),
             (["--adapter", str(tmp_path / "bogus")], "whose peft_type 'BOGUS' PEFT does not know"),
             (["--adapter", str(tmp_path / "badbin")], "holds an adapter_model.bin that cannot be read ("),
             (["--output", str(config)], "is the --config file: the result would overwrite it."),
             (["--output", str(tmp_path / "linked.yaml")], "is the --config file: the result would overwrite it."),
             (["--output", ""], "'' must be a file path, e.g. eval.json."),
             (["--output", str(tmp_path / "notes.txt/x.json")], "must be a file path in an existing folder"),
             (["--output", "/proc/x.json"], "cannot be written (")]
    for args, message in cases:
        assert main(["eval", "--config", str(config), *args]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert config.read_text().startswith("#")  # untouched


def test_evaluate_model_scores_with_the_runs_rewards(monkeypatch):
    import trl_grpo_ext.evaluation.evaluate as evaluation

    rows = [{"prompt": [{"role": "user", "content": f"q{i}"}], "answer": str(i)} for i in range(4)]
    outputs = {0: "The answer is 0.", 1: "The answer is 7.", 2: "The answer is 2.", 3: "no idea"}

    def fake_generate(model, tokenizer, prompts, **kwargs):
        texts = [[outputs[int(p[0]["content"][1:])]] for p in prompts]
        return texts, [[[1, 2, 3]] for _ in prompts]

    monkeypatch.setattr(evaluation, "generate_completions", fake_generate)
    from trl_grpo_ext.rewards.spec import RewardSpec, build_reward_funcs

    funcs, _ = build_reward_funcs([RewardSpec("numeric_match", 1.0, {"answer_phrase": "The answer is"}),
                                   RewardSpec("answer_phrase_format", 0.2)])

    class Model:
        def eval(self):
            return self

    result = evaluate_model(Model(), None, rows, funcs, max_new_tokens=8)
    assert result.correct == [1, 0, 1, 0] and result.accuracy == 0.5
    assert result.mean_reward == {"numeric_match": 0.5, "answer_phrase_format": 0.75}
    assert result.correctness_reward == "numeric_match" and result.mean_completion_tokens == 3
    other = EvalResult(num_prompts=4, accuracy=1.0, accuracy_ci=[0.5, 1.0], mean_reward={}, correct=[1, 1, 1, 1],
                       correctness_reward="numeric_match", mean_completion_tokens=3)
    comparison = compare(result, other)
    assert comparison["difference"] == 0.5 and comparison["only_adapter_correct"] == 2
    with pytest.raises(ValueError, match="correctness_reward='format'"):
        evaluate_model(Model(), None, rows, funcs, max_new_tokens=8, correctness_reward="format")


def test_sampled_pass_rates_are_the_same_for_the_same_seed():
    """`eval --k` draws its K samples after `set_seed(seed)` (the run's seed): the σ = 0 forecast is reproducible."""
    from transformers import AutoModelForCausalLM

    from trl_grpo_ext.models.embedded import tiny
    from trl_grpo_ext.rewards.spec import RewardSpec, build_reward_funcs

    path = tiny.ensure_tiny_model()
    model, tokenizer = AutoModelForCausalLM.from_pretrained(path), tiny.load_tokenizer(path)
    rows = tiny.count_char_rows(6)
    funcs, _ = build_reward_funcs([RewardSpec("char_fraction", 1.0)])
    settings = dict(max_new_tokens=16, num_samples=4, temperature=1.0, correct_threshold=0.05)
    first, again, other = (evaluate_model(model, tokenizer, rows, funcs, seed=seed, **settings) for seed in (3, 3, 4))
    assert first.pass_rates == again.pass_rates and first.pass_rates != other.pass_rates  # the seed draws them
    assert first.uniform_group_forecast == again.uniform_group_forecast
    import torch

    torch.manual_seed(3)  # the same seed reached through the global generator: the same draws
    assert evaluate_model(model, tokenizer, rows, funcs, seed=None, **settings).pass_rates == first.pass_rates


def test_eval_of_a_dataset_without_a_test_split_suggests_the_train_split(tmp_path, capsys, monkeypatch):
    import json

    import transformers

    from trl_grpo_ext.cli.main import main

    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl").write_text("".join(json.dumps({"prompt": f"say {i}", "answer": str(i)}) + "\n"
                                              for i in range(8)))
    config = tmp_path / "c.yaml"
    config.write_text(f"model_name_or_path: embedded:tiny-qwen2\ndataset_name: {data}\n"
                      "rewards: [{name: exact_match, kwargs: {column: answer}}]\n")
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained",
                        lambda *a, **k: (_ for _ in ()).throw(AssertionError("a model was loaded")))
    assert main(["eval", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "Fix: pass --split train to evaluate the train split instead, or set dataset_test_split" in err, err
    assert ".." not in err and "eval_strategy: no" not in err


@pytest.mark.parametrize(("args", "dtype"), [([], "float32"), (["--dtype", "bfloat16"], "bfloat16")])
def test_eval_on_a_cpu_loads_the_base_in_the_dtype_the_run_names(args, dtype, capsys, monkeypatch):
    """A run trained on a bf16 base (`dtype: bfloat16`) is evaluated on that base, not silently on float32."""
    import torch
    import transformers

    from trl_grpo_ext.cli.main import main

    loaded = []

    def record(*a, dtype=None, **k):
        loaded.append(dtype)
        raise RuntimeError("stop after the load's arguments")

    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", record)
    with pytest.raises(RuntimeError, match="stop after"):
        main(["eval", "--config", "tiny_cpu", "--num-prompts", "2", *args])
    assert loaded == [getattr(torch, dtype)]


def test_an_adapter_of_another_shape_is_one_line_after_loading(tmp_path, tiny_model_dir, capsys):
    # a second breaker's finding: an adapter of rank 8 whose config says rank 4 ended in PEFT's size-mismatch traceback
    import json

    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from trl_grpo_ext.cli.main import main

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir),
                           LoraConfig(r=8, target_modules=["q_proj", "v_proj"]))
    model.save_pretrained(tmp_path / "adapter")
    config = json.loads((tmp_path / "adapter/adapter_config.json").read_text())
    (tmp_path / "adapter/adapter_config.json").write_text(json.dumps({**config, "r": 4}))
    assert main(["eval", "--config", str(ROOT / "recipes/configs/tiny_cpu.yaml"), "--adapter",
                 str(tmp_path / "adapter"), "--num-prompts", "2"]) == 2
    err = capsys.readouterr().err
    assert f"--adapter '{tmp_path / 'adapter'}' does not fit 'embedded:tiny-qwen2' (Error(s) in loading state_dict" in err
    assert "Fix: pass an adapter trained on that model" in err and "Traceback" not in err
