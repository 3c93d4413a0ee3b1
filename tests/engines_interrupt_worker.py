"""Worker of tests/test_engines_multiproc.py's SIGINT test: the run of tests/engines_worker.py (3 optimizer steps,
step 2 all-uniform) inside the recipe's `interrupt.GracefulInterrupt`, without periodic checkpoints.

    worker OUT_DIR MODE            the run to interrupt: after optimizer step 1 each rank writes OUT_DIR/paused{RANK}
                                   and waits (at most 120 s) until its handler has seen the SIGINT the test sends to
                                   the launcher (which forwards it to every worker), so the signal lands at a known
                                   step; the handler then saves the checkpoint and stops the run
    worker OUT_DIR MODE CHECKPOINT a second launch resuming from CHECKPOINT to the end

Each rank writes OUT_DIR/rank{RANK}.json: whether the run was stopped, the checkpoint it saved, the final global step,
the per-step learning rates and the skipped updates; rank 0 saves the adapter of a finished run in OUT_DIR/adapter.
"""

import json
import os
import sys
import time

from engines_worker import build_trainer
from transformers import TrainerCallback

from trl_grpo_ext.training.interrupt import GracefulInterrupt


class PauseForTheSignal(TrainerCallback):
    """After optimizer step 1: mark it on disk, then wait for the interrupt's handler (runs before GracefulInterrupt's
    own `on_step_end`, which then stops at this step)."""

    def __init__(self, out_dir: str):
        self.out_dir, self.interrupt = out_dir, None

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 1:
            with open(os.path.join(self.out_dir, f"paused{os.environ['RANK']}"), "w") as f:
                f.write("1")
            deadline = time.monotonic() + 120
            while not self.interrupt.requested and time.monotonic() < deadline:
                time.sleep(0.05)


def main(out_dir: str, mode: str, checkpoint: str | None = None) -> None:
    os.makedirs(out_dir, exist_ok=True)
    trainer = build_trainer(os.path.join(out_dir, "run"), mode, 3)  # save_strategy "no": the interrupt's save only
    pause = PauseForTheSignal(out_dir)
    if checkpoint is None:
        trainer.add_callback(pause)  # before GracefulInterrupt's callback
    with GracefulInterrupt(trainer) as interrupt:
        pause.interrupt = interrupt
        trainer.train(resume_from_checkpoint=checkpoint)
    if not interrupt.stopped:
        trainer.save_model(os.path.join(out_dir, "adapter"))
    result = {"stopped": interrupt.stopped, "checkpoint": interrupt.checkpoint, "global_step": trainer.state.global_step,
              "lr": [e["learning_rate"] for e in trainer.state.log_history if "learning_rate" in e],
              "skipped_updates": trainer.zero_variance.skipped_updates}
    with open(os.path.join(out_dir, f"rank{os.environ['RANK']}.json"), "w") as f:
        json.dump(result, f)
    trainer.end()


if __name__ == "__main__":
    main(*sys.argv[1:4])
