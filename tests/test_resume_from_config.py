"""`resume_from_checkpoint` set in the config is honoured by a bare `trainer.train()` (trl#3179), and a new run
started from Python never overwrites a complete checkpoint.

transformers' `Trainer.train` ignores `TrainingArguments.resume_from_checkpoint` (only scripts read it), so before the
fix a config with `resume_from_checkpoint=True` started again from step 0 and overwrote the old checkpoints. The task
is tests/resume_epochs_common.py's: 4 prompts, 2 per step, 2 epochs = 4 optimizer steps, a checkpoint every step.
"""

import shutil

import pytest
import torch
from resume_epochs_common import RecordingReward, step_log, trainer


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread: CPU kernels then give bit-identical results for identical inputs."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_resume_from_checkpoint_in_the_config_is_honoured_and_a_new_run_is_refused(tmp_path):
    reward = RecordingReward()
    reference = trainer(tmp_path / "uninterrupted", reward, total_epochs=2)
    assert reference.train().metrics["resumed_from_step"] is None  # a fresh run (the key clears all_results.json's)
    assert reference.state.global_step == 4

    run = tmp_path / "run"  # a run stopped after step 2: its output_dir holds checkpoint-2 only
    run.mkdir()
    shutil.copytree(tmp_path / "uninterrupted" / "checkpoint-2", run / "checkpoint-2")
    resumed_reward = RecordingReward()
    resumed = trainer(run, resumed_reward, total_epochs=2, resume_from_checkpoint=True)
    output = resumed.train()  # no argument: the config says resume
    assert resumed.state.global_step == 4
    assert output.metrics["resumed_from_step"] == 2  # its train_runtime / train_loss cover steps 3 and 4 alone
    # the reward was called for steps 2 and 3 only, on the uninterrupted run's prompts, with its rewards
    assert [c[0] for c in resumed_reward.calls] == [2, 3]
    assert resumed_reward.calls == [c for c in reward.calls if c[0] >= 2]
    assert step_log(resumed) == step_log(reference)

    # a new run in the same output_dir (config unset, or train(resume_from_checkpoint=False) over a config that says
    # resume) starts over, as trl.GRPOTrainer does (a TRL script run twice), with a warning naming the finished run
    # and how to keep it
    for config_value, call_value in ((None, None), (True, False)):
        fresh_reward = RecordingReward()
        fresh = trainer(run, fresh_reward, total_epochs=2, resume_from_checkpoint=config_value)
        with pytest.warns(UserWarning, match=r"already holds a finished run \(checkpoint-4: step 4 of 4\); this new "
                                             r"run overwrites it, as trl\.GRPOTrainer does\. To keep it: another "
                                             r"output_dir \(with model_name_or_path="):
            fresh.train(resume_from_checkpoint=call_value)
        assert fresh.state.global_step == 4 and [c[0] for c in fresh_reward.calls] == [0, 1, 2, 3]  # from step 1


def test_overwrite_output_dir_lets_a_new_run_start_over(tmp_path, monkeypatch):
    from transformers.trainer_utils import TrainOutput
    from trl import GRPOTrainer

    (tmp_path / "checkpoint-3").mkdir()
    (tmp_path / "checkpoint-3" / "trainer_state.json").write_text("{}")
    monkeypatch.setattr(GRPOTrainer, "train", lambda self, resume_from_checkpoint=None, **kw: TrainOutput(
        0, 0.0, {"run": "new run", "checkpoint": resume_from_checkpoint}))
    fresh = trainer(tmp_path, RecordingReward(), total_epochs=2)
    assert fresh.train(overwrite_output_dir=True).metrics == {"run": "new run", "checkpoint": None,
                                                              "resumed_from_step": None}
    with pytest.warns(UserWarning, match=r"already holds a run \(checkpoint-3\); this new run overwrites it"):
        assert fresh.train().metrics["run"] == "new run"
