"""Worker of tests/test_zero_variance_multiproc.py: zero_variance_filter skip (and its dropped rows) on 2 processes.

Run by `torchrun --standalone --nproc_per_node 2 tests/skip_worker.py OUT_DIR` (CPU, gloo). 8 prompts, 4 of them ask
for target "b" and get a constant reward (uniform groups); 3 epochs of 2 steps. Writes OUT_DIR/rank{RANK}.json with
the prompt history, the rows each micro-batch's loss saw, the epoch's skipped share and the zero_variance/* logs.
"""

import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from factories import count_char_mix, end_worker, record_loss_batches, tiny_trainer  # noqa: E402

from trl_grpo_ext.zero_variance.report import GENERATION_SECONDS_KEY  # noqa: E402

G = 4


def reward(completions, target, **kwargs):
    return [1.0 if t == "b" else float(i % G) for i, t in enumerate(target)]


def main(out_dir: str) -> None:
    rank = int(os.environ["RANK"])
    trainer = tiny_trainer(
        os.path.join(out_dir, "run"), reward, count_char_mix(8), prompts_per_step=4, num_generations=G,
        micro_batch_size=4,  # 16 completions per step over 2 processes: gradient_accumulation_steps = 2
        total_epochs=3, max_completion_length=8, learning_rate=1e-3, zero_variance_filter="skip",
        skip_exploration_probability=0.001, seed=0,
    )
    rows = record_loss_batches(trainer, lambda t, inputs: int(inputs["zero_variance_keep"].sum()))
    trainer.train()
    history = [{k: v for k, v in entry.items()  # every decision and count; not a process's own clock
                if (k.startswith("zero_variance/") and k != GENERATION_SECONDS_KEY) or k == "step"}
               for entry in trainer.state.log_history if "loss" in entry]
    result = {"rank": rank, "world_size": trainer.accelerator.num_processes, "history": history,
              "kept_per_micro_batch": rows, "streaks": sorted(trainer.zero_variance.history.streaks.items()),
              "global_step": trainer.state.global_step, "total_steps": trainer.plan.total_steps}
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    end_worker(trainer)


if __name__ == "__main__":
    main(sys.argv[1])
