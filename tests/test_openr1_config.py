"""Configs users already have: an open-r1 GRPO config and `trl grpo` arguments run with only the model and dataset
paths changed (tests/data/openr1_grpo_config.yaml is written from open-r1's documented fields)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from factories import unset_env

from trl_grpo_ext.config.frontdoor import read_run_args
from trl_grpo_ext.rewards.spec import RewardSpec

ROOT = Path(__file__).resolve().parents[1]
OPENR1 = ROOT / "tests" / "data" / "openr1_grpo_config.yaml"

#: OpenR1-Math-220k's shape: `problem` (the prompt column), `solution` (what open-r1's accuracy reward reads).
ROWS = [{"problem": f"What is {a} + {b}?", "solution": f"${a + b}$"} for a in range(8) for b in range(8)]

#: What this machine cannot do, overridden on the command line, each for one reason: no GPU (bf16, flash-attn,
#: vLLM), no network (push, wandb), a 2-core CPU (2 steps of 32 new tokens instead of an epoch of 1024).
CPU_OVERRIDES = ["--bf16", "false", "--use_cpu", "true", "--torch_dtype", "float32", "--attn_implementation", "sdpa",
                 "--use_vllm", "false", "--push_to_hub", "false", "--report_to", "none", "--max_steps", "2",
                 "--max_completion_length", "32"]


#: The packages the config needs that this machine lacks (flash-attn, vLLM, wandb: plan refuses them,
#: tests/test_run_packages.py), set aside, and its push: open-r1 pushes the fully fine-tuned model, the recipe pushes
#: adapters only, so `push_to_hub: true` without `use_peft` is refused (test_its_full_model_push_is_refused); the
#: quantities are the config's own.
PACKAGE_OVERRIDES = ["--attn_implementation", "sdpa", "--use_vllm", "false", "--report_to", "none",
                     "--push_to_hub", "false"]


@pytest.fixture
def swapped(tmp_path, monkeypatch):
    """The open-r1 config with model_name_or_path and dataset_name swapped for local ones; nothing else changes."""
    unset_env(monkeypatch, "WANDB_ENTITY", "WANDB_PROJECT", "WANDB_RUN_GROUP", "WORLD_SIZE")
    data = tmp_path / "openr1-math"
    data.mkdir()
    (data / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    original = OPENR1.read_text()
    text = original.replace("model_name_or_path: Qwen/Qwen2.5-1.5B-Instruct", "model_name_or_path: embedded:tiny-qwen2")
    text = text.replace("dataset_name: open-r1/OpenR1-Math-220k", f"dataset_name: {data}")
    changed = [(a, b) for a, b in zip(original.splitlines(), text.splitlines()) if a != b]
    assert [a.split(":")[0] for a, _ in changed] == ["model_name_or_path", "dataset_name"]
    path = tmp_path / "config_demo.yaml"
    path.write_text(text)
    return path


def test_it_parses_with_every_key_taking_effect(swapped, capsys):
    script_args, training_args, model_args, push_args = read_run_args(
        ["--config", str(swapped), "--bf16", "false", "--use_cpu", "true", *PACKAGE_OVERRIDES])
    assert training_args.resolved.rewards == tuple(RewardSpec(n, 1.0, {}) for n in ("accuracy", "format",
                                                                                     "tag_count"))
    assert model_args.dtype == "bfloat16" and training_args.warmup_steps == 0.1
    assert script_args.dataset_prompt_column == "problem" and script_args.system_prompt.startswith("You are a helpful")
    assert script_args.max_prompt_length == 512 and script_args.overwrite_output_dir is True
    assert os.environ["WANDB_ENTITY"] == "my-team" and os.environ["WANDB_PROJECT"] == "open-r1"
    # 16 completions per device × 4 accumulation steps / 16 per prompt = 4 prompts per step
    assert (training_args.per_device_train_batch_size, training_args.gradient_accumulation_steps) == (16, 4)
    err = capsys.readouterr().err
    for note in ("reward_funcs read as rewards", "torch_dtype read as dtype", "warmup_ratio read as warmup_steps"):
        assert f"note: {note}" in err


@pytest.mark.slow  # a subprocess run of 8 s or more: `make test-slow`
def test_its_full_model_push_is_refused(swapped):
    """open-r1 trains the whole model and pushes it; the recipe pushes adapters (or merges): refused before any model
    loads, naming both fields, instead of a traceback after training."""
    overrides = PACKAGE_OVERRIDES[:-2]  # all but --push_to_hub false
    result = subprocess.run([sys.executable, "-m", "trl_grpo_ext.cli.main", "plan", "--config", str(swapped),
                             "--dataset-size", str(len(ROWS)), *overrides],
                            capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert result.returncode == 2
    assert "push_to_hub=True (a push of the adapter) pushes a LoRA adapter" in result.stderr
    assert "use_peft=False" in result.stderr


def test_it_plans(swapped):
    result = subprocess.run([sys.executable, "-m", "trl_grpo_ext.cli.main", "plan", "--config", str(swapped),
                             "--dataset-size", str(len(ROWS)), "--json", *PACKAGE_OVERRIDES],
                            capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    # 16 × 4 / 16 = 4 prompts per step; floor(64 / 4) = 16 steps in the one epoch
    assert (plan["prompts_per_step"], plan["steps_per_epoch"], plan["total_steps"]) == (4, 16, 16)


@pytest.mark.slow  # a subprocess run of 8 s or more: `make test-slow`
def test_it_trains_two_steps(swapped, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "checkpoint-7").mkdir()  # a previous run's leftovers: overwrite_output_dir: true lets the new run start
    (out / "checkpoint-7" / "trainer_state.json").write_text("{}")
    result = subprocess.run(
        [sys.executable, "-m", "trl_grpo_ext.cli.train", "--config", str(swapped), "--output_dir", str(out),
         *CPU_OVERRIDES],
        capture_output=True, text=True, cwd=tmp_path, timeout=900,
        env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"})
    assert result.returncode == 0, result.stderr[-3000:]
    state = json.loads((out / "trainer_state.json").read_text())
    assert state["global_step"] == 2
    logged = [entry for entry in state["log_history"] if "rewards/accuracy/mean" in entry]
    assert logged and {"rewards/format/mean", "rewards/tag_count/mean"} <= set(logged[0])
    assert "step 1/2  reward" in result.stdout and "step 2/2  reward" in result.stdout


def test_trl_grpo_arguments(tmp_path, monkeypatch):
    """`trl grpo`'s keys (trl/scripts/grpo.py): reward_funcs with TRL's reward names and a dotted import path."""
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    config = {"model_name_or_path": "embedded:tiny-qwen2", "dataset_name": "embedded:count-char",
              "reward_funcs": ["think_format_reward", "trl_grpo_ext.rewards.builtin.CharFraction"],
              "output_dir": str(tmp_path / "out"), "per_device_train_batch_size": 8, "num_generations": 4,
              "max_steps": 3, "use_cpu": True, "bf16": False, "dtype": "float32"}
    path = tmp_path / "trl_grpo.yaml"
    path.write_text(yaml.safe_dump(config))
    _, training_args, _, _ = read_run_args(["--config", str(path)])
    assert [r.name for r in training_args.resolved.rewards] == config["reward_funcs"]
    config["reward_model_name_or_path"] = "some/reward-model"
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(ValueError, match="reward_model_name_or_path.*reward functions"):
        read_run_args(["--config", str(path)], light=True)
