"""Resuming a checkpoint that already holds the plan's last step is refused before anything is generated (found
while rerunning trl#3179 for issue 22): transformers 5.24, resumed at global_step == max_steps, trains one more step
and saves checkpoint-<max_steps + 1>, past the plan. The task is tests/resume_epochs_common.py's: 4 prompts, 2 per
step, 2 epochs = 4 optimizer steps, a checkpoint every step."""

import pytest
from resume_epochs_common import RecordingReward, trainer

from trl_grpo_ext.plan import QuantityError


def test_a_finished_run_is_not_resumed_past_its_plan(tmp_path):
    done = trainer(tmp_path / "run", RecordingReward(), total_epochs=2)
    done.train()
    assert done.state.global_step == 4
    for config_value, call_value in ((True, None), (None, True), (None, str(tmp_path / "run" / "checkpoint-4"))):
        reward = RecordingReward()
        again = trainer(tmp_path / "run", reward, total_epochs=2, resume_from_checkpoint=config_value)
        with pytest.raises(QuantityError, match=r"checkpoint-4 already holds step 4 of the plan's 4: the run is "
                                                r"complete, and resuming it would train a step past its plan"):
            again.train(resume_from_checkpoint=call_value)
        assert reward.calls == []
    assert not (tmp_path / "run" / "checkpoint-5").exists()


def test_an_unfinished_checkpoint_still_resumes(tmp_path):
    """checkpoint-3 of 4: one step left, trained (the reward is called for step 3 only)."""
    import shutil

    trainer(tmp_path / "full", RecordingReward(), total_epochs=2).train()
    (tmp_path / "run").mkdir()
    shutil.copytree(tmp_path / "full" / "checkpoint-3", tmp_path / "run" / "checkpoint-3")
    reward = RecordingReward()
    resumed = trainer(tmp_path / "run", reward, total_epochs=2, resume_from_checkpoint=True)
    resumed.train()
    assert resumed.state.global_step == 4 and [c[0] for c in reward.calls] == [3]


RECIPE_ARGS = ["recipes/grpo_qlora.py", "--config", "recipes/configs/tiny_cpu.yaml", "--total_training_steps", "4",
               "--save_strategy", "steps", "--save_steps", "2", "--num_generations", "4", "--micro_batch_size", "4",
               "--max_completion_length", "8", "--plot", "false"]


@pytest.mark.slow  # three recipe runs of about 10 s: `make test-slow`
def test_the_recipe_resuming_a_complete_run_writes_what_its_end_left_out_and_exits_0(tmp_path):
    """A kill after the last checkpoint (here: the end's outputs deleted) and a retry loop's `--resume_from_checkpoint
    last`: exit 0, the adapter written from checkpoint-4 (its tensors), no step trained; once more: exit 0, one line."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from safetensors.torch import load_file

    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "run"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}

    def recipe(*extra):
        return subprocess.run([sys.executable, *RECIPE_ARGS, "--output_dir", str(out), *extra], capture_output=True,
                              text=True, cwd=root, env=env, timeout=300)

    assert recipe().returncode == 0
    for name in ("README.md", "adapter_model.safetensors", "eval_results.json"):
        (out / name).unlink()
    finished = recipe("--resume_from_checkpoint", "last")
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert f"The run in {out} is complete ({out}/checkpoint-4 holds step 4 of 4): wrote the outputs its end left " \
           "out" in finished.stdout
    assert "step 1/4" not in finished.stdout and not (out / "checkpoint-5").exists()
    saved, last = load_file(str(out / "adapter_model.safetensors")), load_file(str(out / "checkpoint-4" /
                                                                                    "adapter_model.safetensors"))
    assert saved.keys() == last.keys() and all(torch_equal(saved[k], last[k]) for k in saved)
    assert (out / "README.md").is_file() and (out / "eval_results.json").is_file()
    again = recipe("--resume_from_checkpoint", "last")
    assert again.returncode == 0, again.stderr[-3000:]
    assert [line for line in again.stdout.splitlines() if not line.startswith("host memory:")] == [
        f"The run in {out} is complete ({out}/checkpoint-4 holds step 4 of 4): nothing to resume, nothing trained; "
        f"its outputs are in {out}."]


def torch_equal(a, b) -> bool:
    import torch

    return torch.equal(a, b)
