"""`model_name_or_path` may be an earlier run's adapter (its output_dir or a checkpoint-N): training continues it.

Its base loads as configured (4-bit NF4 here, recipes/configs/tiny_cpu.yaml), the adapter is loaded trainable
(`PeftModel.from_pretrained(..., is_trainable=True)`), the run says "continued from", and the card's base is the
original base. Before this, TRL failed on the folder with `ValueError: Unrecognized model ... model_type`.
"""

import json
import os
import subprocess
import sys

import pytest
import torch
from factories import ROOT
from safetensors.torch import load_file
from test_recipe import launch

SHORT = ["--config", "recipes/configs/tiny_cpu.yaml", "--total_training_steps", "2", "--eval_strategy", "no",
         "--final_eval", "none"]


def _adapter(folder):
    return load_file(str(folder / "adapter_model.safetensors"))


def _ok(result):
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


@pytest.fixture(scope="module")
def earlier(tmp_path_factory):
    """A 2-step run of the tiny QLoRA recipe with a checkpoint after each step."""
    out = tmp_path_factory.mktemp("continue") / "earlier"
    _ok(launch([*SHORT, "--output_dir", str(out), "--save_strategy", "steps", "--save_steps", "1"]))
    return out


def test_an_adapter_folder_is_continued_not_replaced(earlier, tmp_path):
    out = tmp_path / "continued"
    # learning rate 1e-30 (0 is refused): an Adam step of about 1e-30 is lost in float32 against weights of 1e-3 or
    # more, so a continued adapter comes out exactly as it went in (a new one would start from lora_B = 0)
    result = _ok(launch([*SHORT, "--model_name_or_path", str(earlier), "--output_dir", str(out),
                         "--learning_rate", "1e-30", "--lora_r", "16"]))
    assert f"model: continued from the adapter in {earlier} (base: embedded:tiny-qwen2)" in result.stdout
    assert "warning: the adapter keeps its own LoRA settings; not used: lora_r: 16 in the config, 8 in the adapter" \
        in result.stderr
    before, after = _adapter(earlier), _adapter(out)
    assert before.keys() == after.keys() and any("lora_B" in k and before[k].abs().sum() > 0 for k in before)
    assert all(torch.equal(before[k], after[k]) for k in before)  # bit for bit, float32 (not rounded to bf16)
    assert all(v.dtype == torch.float32 for v in after.values())
    assert json.loads((out / "adapter_config.json").read_text())["r"] == 8  # the adapter's own settings
    source = json.loads((out / "run_config.json").read_text())["model_source"]
    assert source == {"name": str(earlier), "kind": "adapter", "base": "embedded:tiny-qwen2", "base_is_local": False,
                      "adapter": str(earlier)}
    card = (out / "README.md").read_text()
    assert f"for `embedded:tiny-qwen2` (not on the Hub), continued from the adapter in `{earlier}`, trained" in card
    assert "base_model:" not in card.split("---")[1]


def test_a_checkpoint_is_continued_and_trains_on(earlier, tmp_path):
    checkpoint = earlier / "checkpoint-1"
    out = tmp_path / "from-checkpoint"
    _ok(launch([*SHORT, "--model_name_or_path", str(checkpoint), "--output_dir", str(out)]))
    before, after = _adapter(checkpoint), _adapter(out)
    assert before.keys() == after.keys()
    lora = [k for k in before if "lora_" in k]
    assert sum(not torch.equal(before[k], after[k]) for k in lora) == len(lora)  # every LoRA tensor trained on
    state = json.loads((out / "trainer_state.json").read_text())
    assert state["global_step"] == 2  # a new run of 2 steps (not a resume of the earlier one)


def test_plan_says_continued_from(earlier):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-m", "trl_grpo_ext.cli.main", "plan", "--config", "recipes/configs/tiny_cpu.yaml",
                             "--model_name_or_path", str(earlier)], capture_output=True, text=True, cwd=ROOT, env=env)
    assert result.returncode == 0, result.stderr
    assert f"note: model: continued from the adapter in {earlier} (base: embedded:tiny-qwen2)" in result.stderr


def test_what_cannot_be_continued_is_refused_before_loading(earlier, tmp_path):
    empty = tmp_path / "not-a-model"
    empty.mkdir()
    (empty / "notes.txt").write_text("x")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    for extra, message in (
        (["--model_name_or_path", str(empty)], f"model_name_or_path='{empty}' is a folder with neither config.json"),
        (["--model_name_or_path", str(earlier), "--use_peft", "false"],
         "is an adapter of an earlier run, which this run would continue, but use_peft is false. Fix: set use_peft: "
         "true"),
        (["--model_name_or_path", str(earlier), "--output_dir", str(earlier)],
         "is the adapter folder being continued"),
    ):
        result = subprocess.run([sys.executable, str(ROOT / "recipes/grpo_qlora.py"), *SHORT, "--output_dir",
                                 str(tmp_path / "out"), *extra], capture_output=True, text=True, cwd=ROOT, env=env)
        assert result.returncode == 2, result.stderr[-2000:]
        assert message in result.stderr and "Traceback" not in result.stderr
