"""Resume with 2 processes (torchrun, CPU, gloo) in resample mode from a checkpoint in the middle of epoch 2.

The worker (tests/resume_epochs_worker.py) runs the task of tests/resume_epochs_common.py uninterrupted for 2 epochs
(4 steps), then resumes from its checkpoint-3; about 25 s on 2 cores, mostly process start-up.
"""

import json

import pytest
import torch
from factories import run_worker_on_2_processes
from safetensors.torch import load_file


@pytest.mark.multiproc
def test_two_processes_resume_mid_epoch_in_resample_mode(tmp_path):
    result = run_worker_on_2_processes("resume_epochs_worker.py", str(tmp_path), "resample", timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    for rank in (0, 1):
        runs = json.loads((tmp_path / f"rank{rank}.json").read_text())
        reference, resumed = runs["uninterrupted"], runs["resumed"]
        assert reference["world_size"] == resumed["world_size"] == 2
        assert [s["step"] for s in reference["steps"]] == [1, 2, 3, 4]
        extra_rounds = [c for c in reference["calls"] if c[0] == 3][1:]
        assert extra_rounds, "step 4 should resample (odd prompt ids are uniform), else this test checks less"
        # this rank's reward calls from step 4 on (resample rounds included): same prompts, same rewards
        assert [c for c in resumed["calls"]] == [c for c in reference["calls"] if c[0] >= 3], f"rank {rank}"
        assert resumed["steps"] == reference["steps"], f"rank {rank}"
    adapters = [load_file(str(tmp_path / run / "checkpoint-4" / "adapter_model.safetensors"))
                for run in ("uninterrupted", "resumed")]
    assert adapters[0].keys() == adapters[1].keys()
    assert all(torch.equal(adapters[0][k], adapters[1][k]) for k in adapters[0])
