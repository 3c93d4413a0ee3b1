"""The QLoRA recipe end to end under `accelerate launch` on CPU: adapter written, reloads, LoRA weights changed."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def launch(args: list[str], timeout: int = 300) -> subprocess.CompletedProcess:
    """`accelerate launch --config_file recipes/accelerate_configs/cpu.yaml recipes/grpo_qlora.py ARGS`."""
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
               str(ROOT / "recipes/accelerate_configs/cpu.yaml"), str(ROOT / "recipes/grpo_qlora.py"), *args]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=timeout)


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("recipe") / "run"
    result = launch(["--config", "recipes/configs/tiny_cpu.yaml", "--output_dir", str(out),
                     "--total_training_steps", "6", "--save_strategy", "no"])
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return out, result


def test_a_full_fine_tune_saves_and_names_the_model(tmp_path):
    # the tiny config without LoRA and its 4-bit base (a full fine-tune needs float weights; compare_base an adapter)
    dropped = ("load_in_4bit", "bnb_4bit", "use_bnb", "use_peft", "lora_", "final_eval", "adapter_dtype")
    lines = [line for line in (ROOT / "recipes/configs/tiny_cpu.yaml").read_text().splitlines()
             if not line.startswith(dropped)]
    config = tmp_path / "full.yaml"
    config.write_text("\n".join(lines + ["use_peft: false"]) + "\n")
    out = tmp_path / "run"
    result = launch(["--config", str(config), "--output_dir", str(out), "--total_training_steps", "2",
                     "--save_strategy", "no", "--eval_strategy", "no"])
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"Model and tokenizer: {out}" in result.stdout and "Adapter and tokenizer" not in result.stdout
    assert (out / "model.safetensors").is_file() and not (out / "adapter_config.json").exists()
    card = (out / "README.md").read_text()
    assert "fully fine-tuned (every weight, no adapter)" in card and "LoRA adapter" not in card


def test_outputs_are_written(short_run):
    out, result = short_run
    for name in ("adapter_config.json", "adapter_model.safetensors", "tokenizer.json", "trainer_state.json",
                 "train_results.json", "run_plan.json", "run_config.json", "reward_plot.png", "README.md",
                 "eval_results.json"):
        assert (out / name).is_file(), name
    assert f"Adapter and tokenizer: {out}" in result.stdout
    # the run's last line: its uniform groups, their causes (and fix), printed once, after the files
    lines = result.stdout.strip().splitlines()
    assert lines[-1].startswith("Uniform groups (σ = 0): ") and "why, of the groups generated: " in lines[-1], lines[-3:]
    assert result.stdout.count("Uniform groups (σ = 0): ") == 1
    card = (out / "README.md").read_text()  # the 4-bit snippet loads the embedded base from its folder, not its name
    assert "quantization_config=bnb" in card and 'from_pretrained("embedded:' not in card
    assert f"Reward plot: {out / 'reward_plot.png'}" in result.stdout
    plan = json.loads((out / "run_plan.json").read_text())
    state = json.loads((out / "trainer_state.json").read_text())
    assert plan["total_steps"] == state["global_step"] == 6
    assert plan["stop_reason"] == "step_limit"


def test_adapter_reloads_onto_the_base_and_weights_changed(short_run, tiny_model_dir):
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    out, _ = short_run
    weights = load_file(str(out / "adapter_model.safetensors"))
    lora_b = {k: v for k, v in weights.items() if "lora_B" in k}
    assert lora_b and all(v.dtype == torch.float32 for v in weights.values())  # adapter_dtype: float32
    # peft initialises every lora_B to zero: any non-zero value was learned
    assert sum(int(v.ne(0).any()) for v in lora_b.values()) == len(lora_b)
    base_lm_head = AutoModelForCausalLM.from_pretrained(tiny_model_dir).lm_head.weight
    trained_lm_head = next(v for k, v in weights.items() if k.endswith("lm_head.weight"))
    assert not torch.equal(base_lm_head, trained_lm_head)

    bnb = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                             bnb_4bit_compute_dtype=torch.float32)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, quantization_config=bnb, dtype=torch.float32)
    model = PeftModel.from_pretrained(base, str(out))
    loaded = {k: v for k, v in model.state_dict().items() if "lora_B" in k}
    assert len(loaded) == len(lora_b)
    ids = torch.tensor([[1, 5, 6, 7]])
    with torch.no_grad():
        with_adapter = model(ids).logits
        with model.disable_adapter():
            without = model(ids).logits
    assert not torch.allclose(with_adapter, without)


def test_console_plan_then_one_line_per_step_and_metrics_file(short_run):
    """The plan comes before the bar, each step is one line, the full metrics go to metrics.jsonl, and what is
    neither a step line nor the bar fits on one screen."""
    out, result = short_run
    lines = result.stdout.splitlines()
    steps = [line for line in lines if line.startswith("step ") and "  reward " in line]
    assert [line.split("  ")[0] for line in steps] == [f"step {i}/6" for i in range(1, 7)]
    from trl_grpo_ext.training.host_memory import RETAINED

    assert f"host memory: {RETAINED}" in lines  # a CPU run keeps freed memory for reuse (docs/benchmarks.md)
    assert all(" ± " in line and "zero-std" in line and " lr " in line and "s/step" in line for line in steps)
    assert lines.index(next(line for line in lines if line.startswith("total steps"))) < lines.index(steps[0])
    assert "{'loss'" not in result.stdout and "FutureWarning" not in result.stderr
    assert "6/6" in result.stderr  # tqdm's bar, sized by the plan
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "reward" in r] == list(range(1, 7))
    assert {"reward", "reward_std", "frac_reward_zero_std", "learning_rate", "loss", "completions/mean_length"} <= set(
        records[0])
    # what a terminal shows of each line: the text after its last carriage return (tqdm redraws with "\r")
    # (tqdm's cursor-up sequences "\x1b[A" of the nested eval bar move the cursor; they print no line)
    shown = [line.split("\r")[-1].replace("\x1b[A", "") for line in (result.stdout + result.stderr).split("\n")]
    other = [line for line in shown if line.strip() and line not in steps and "it/s]" not in line
             and "s/it]" not in line]
    assert len(other) <= 50, "\n".join(other)  # one screen
    config = json.loads((out / "run_config.json").read_text())
    assert config["training_args"]["run_plan"]["total_steps"] == 6  # what the trackers log with args.to_dict()
    # the resolved values beside the user's own fields, as given (tiny_cpu.yaml: total_epochs 1, prompts_per_step 2)
    training_args = config["training_args"]
    assert (training_args["total_training_steps"], training_args["total_epochs"]) == (6, 1)
    resolved = training_args["resolved"]
    assert (resolved["total_training_steps"], resolved["stop_semantics"], training_args["max_steps"]) == (
        6, "first_reached", 6)
    assert resolved["rewards"] == [{"name": "char_fraction", "weight": 1.0, "kwargs": {}}]


def test_the_plan_command_shows_what_the_run_printed(short_run, capsys, monkeypatch):
    """`trl-grpo-ext plan` with the run's config and overrides prints the run's own plan block, line for line."""
    from trl_grpo_ext.cli.plan import main

    out, result = short_run
    monkeypatch.chdir(ROOT)
    assert main(["--config", "recipes/configs/tiny_cpu.yaml", "--output_dir", str(out),
                 "--total_training_steps", "6", "--save_strategy", "no"]) == 0
    shown = capsys.readouterr().out
    assert shown.startswith("quantity ") and "total steps               6 steps" in shown
    assert shown in result.stdout


@pytest.mark.slow
def test_the_embedded_default_learns(tmp_path):
    """The foundation issue's learning bar on the full demo config: last-10% mean reward >= 3x the first 10%."""
    from trl_grpo_ext.hub.plot import reward_trend

    out = tmp_path / "demo"
    result = launch(["--config", "recipes/configs/tiny_cpu.yaml", "--output_dir", str(out)], timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    state = json.loads((out / "trainer_state.json").read_text())
    first, last = reward_trend(state["log_history"])
    assert state["global_step"] == 120  # 240 prompts / 2 per step: one epoch, before the 200-step limit
    assert last >= 3 * first and last >= 0.5, (first, last)


def test_a_hub_model_whose_tokenizer_cannot_be_loaded_is_one_line(tmp_path, monkeypatch, capsys):
    """Online, a Hub id passes the argument stage (nothing is looked up); when its tokenizer then cannot be fetched
    (no network, a typo, a gated repo: transformers raises OSError) the recipe ended in transformers' traceback, exit 1
    (a new user's finding). Now: one line naming the field and a fix, exit 2, before any weight loads."""
    from factories import recipe_without_models
    from transformers import AutoTokenizer

    from trl_grpo_ext.config.recipe_parse import parse_recipe_args

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # online: check_model_path does not look the id up
    recipe = recipe_without_models(monkeypatch)  # any model load fails the test

    def unreachable(*args, **kwargs):
        raise OSError("We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find them in "
                      "the cached files.")

    monkeypatch.setattr(AutoTokenizer, "from_pretrained", unreachable)
    args = parse_recipe_args(["--config", "tiny_cpu", "--model_name_or_path", "someone/no-such-model",
                              "--output_dir", str(tmp_path / "out"), "--final_eval", "none",
                              "--eval_strategy", "no"])
    assert recipe.main(*args) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert errors == ["error: model_name_or_path='someone/no-such-model': its tokenizer could not be loaded (We "
                      "couldn't connect to 'https://huggingface.co' to load the files, and couldn't find them in the "
                      "cached files.). Fix: check the id, the network and your access (`hf auth login` for a gated "
                      "model); without a network, download it first (`hf download someone/no-such-model`) and set "
                      "HF_HUB_OFFLINE=1."]


def test_a_bad_host_memory_switch_is_one_line_before_the_model_loads(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRL_GRPO_EXT_RETAIN_MEMORY": "maybe"}
    result = subprocess.run([sys.executable, str(ROOT / "recipes/grpo_qlora.py"), "--config", "tiny_cpu",
                             "--output_dir", str(tmp_path / "run")], capture_output=True, text=True, cwd=ROOT,
                            env=env, timeout=300)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1] == (
        "error: TRL_GRPO_EXT_RETAIN_MEMORY='maybe' is neither on nor off. Fix: unset it or use 1 (keep freed memory "
        "for reuse, the default on a CPU), or 0 (glibc's own malloc settings).")
    assert not (tmp_path / "run").exists()


def test_a_push_while_offline_is_announced_before_training_and_loses_nothing(tmp_path):
    # a breaker's finding: offline, a run with a push trained to the end, then failed the push with exit 1 (plan and
    # the start of the run said nothing); the outputs must be written before the upload is tried
    out = tmp_path / "run"
    result = subprocess.run([sys.executable, str(ROOT / "recipes/grpo_qlora.py"), "--config", "tiny_cpu",
                             "--output_dir", str(out), "--total_training_steps", "1", "--save_strategy", "no",
                             "--eval_strategy", "no", "--final_eval", "none", "--push_to_hub_mode", "adapter",
                             "--hub_repo_id", "someone/tiny-test"], capture_output=True, text=True, cwd=ROOT,
                            env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_TOKEN": ""}, timeout=300)
    assert result.returncode == 1, result.stderr[-3000:]
    warning = ("warning: HF_HUB_OFFLINE is set, so the push to someone/tiny-test after training will fail; everything "
               "is written to output_dir first")
    assert warning in result.stderr and result.stderr.index(warning) < result.stderr.index("HF_HUB_OFFLINE is set, so "
                                                                                           "nothing was pushed")
    assert "step 1/1" in result.stdout and (out / "adapter_model.safetensors").is_file()
    assert (out / "adapter" / "README.md").is_file()  # the upload's folder, ready for `trl-grpo-ext push`
