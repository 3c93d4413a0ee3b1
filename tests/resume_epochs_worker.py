"""Worker of tests/test_resume_epochs_multiproc.py: an uninterrupted run, then a resume from its checkpoint-3.

Run by `torchrun --standalone --nproc_per_node 2 tests/resume_epochs_worker.py OUT_DIR MODE` (CPU, gloo). The task
of tests/resume_epochs_common.py over 2 epochs (4 optimizer steps, a checkpoint every step): checkpoint-3 lies in the
middle of the second epoch. Writes OUT_DIR/rank{RANK}.json with this rank's reward calls (step, prompt ids,
rewards) and the logged step values of both runs.
"""

import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from factories import end_worker  # noqa: E402
from resume_epochs_common import RecordingReward, step_log, trainer  # noqa: E402

SETTINGS = dict(total_epochs=2, micro_batch_size=4)  # 2 prompts × G 4 = 8 completions per step over 2 processes


def main(out_dir: str, mode: str) -> None:
    rank = int(os.environ["RANK"])
    result = {}
    for name, checkpoint in (("uninterrupted", None), ("resumed", os.path.join(out_dir, "uninterrupted", "checkpoint-3"))):
        reward = RecordingReward()
        run = trainer(os.path.join(out_dir, name), reward, zero_variance_filter=mode, **SETTINGS)
        run.train(resume_from_checkpoint=checkpoint)
        result[name] = {"calls": reward.calls, "steps": step_log(run), "world_size": run.accelerator.num_processes}
        last = run
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    end_worker(last)  # destroy the process group and leave without the interpreter's teardown


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
