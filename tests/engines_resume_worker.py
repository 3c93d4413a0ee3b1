"""Worker of tests/test_engines_multiproc.py's resume test: the run of tests/engines_worker.py with a checkpoint
after every step, then a second trainer that resumes from its checkpoint-1 (the state an interrupt leaves: the
checkpoint after the step in progress, `interrupt.GracefulInterrupt`) and trains steps 2 and 3 again.

    worker OUT_DIR MODE

Rank 0 saves both final adapters: OUT_DIR/uninterrupted/adapter and OUT_DIR/resumed/adapter; each rank writes
OUT_DIR/rank{RANK}.json with both runs' per-step learning rates and final global steps.
"""

import json
import os
import sys

from engines_worker import build_trainer


def main(out_dir: str, mode: str) -> None:
    result = {}
    for name, checkpoint in (("uninterrupted", None),
                             ("resumed", os.path.join(out_dir, "uninterrupted", "checkpoint-1"))):
        run_dir = os.path.join(out_dir, name)
        trainer = build_trainer(run_dir, mode, 3, save_strategy="steps", save_steps=1)
        trainer.train(resume_from_checkpoint=checkpoint)
        trainer.save_model(os.path.join(run_dir, "adapter"))
        result[name] = {"global_step": trainer.state.global_step,
                        "lr": [e["learning_rate"] for e in trainer.state.log_history if "learning_rate" in e],
                        "skipped_updates": trainer.zero_variance.skipped_updates}
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"rank{os.environ['RANK']}.json"), "w") as f:
        json.dump(result, f)
    trainer.end()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
