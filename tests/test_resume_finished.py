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
