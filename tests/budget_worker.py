"""Worker of tests/test_zero_variance_multiproc.py: rollout_budget adaptive with zero_variance_signal on 2 processes.

Run by `torchrun --standalone --nproc_per_node 2 tests/budget_worker.py OUT_DIR` (CPU, gloo). 8 prompts, 4 a step
(2 on each process), G 4: the "b" prompts get reward 1 (solved), the "a" prompts the completion's number of distinct
characters / 8. Writes OUT_DIR/rank{RANK}.json with every step's group sizes (gathered), this process's own, the
pass-rate history and the zero_variance/* logs.
"""

import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from factories import count_char_mix, end_worker, tiny_trainer  # noqa: E402

from trl_grpo_ext.zero_variance.report import GENERATION_SECONDS_KEY  # noqa: E402

G = 4


def reward(completions, target, **kwargs):
    texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
    return [1.0 if t == "b" else len(set(text)) / 8 for text, t in zip(texts, target)]


def main(out_dir: str) -> None:
    rank = int(os.environ["RANK"])
    trainer = tiny_trainer(
        os.path.join(out_dir, "run"), reward, count_char_mix(8), prompts_per_step=4, num_generations=G,
        micro_batch_size=4, total_training_steps=3, max_completion_length=8, learning_rate=1e-3,
        zero_variance_filter="mask", rollout_budget="adaptive", zero_variance_signal="entropy", seed=0,
    )
    steps = []
    generate = trainer.rollout.generate

    def record(inputs, marks):
        output, sizes = generate(inputs, marks)
        steps.append({"sizes": sizes, "local_rows": len(output["completion_ids"])})
        return output, sizes

    trainer.rollout.generate = record
    trainer.train()
    history = [{k: v for k, v in entry.items() if (k.startswith("zero_variance/") and k != GENERATION_SECONDS_KEY)
                or k in ("step", "reward")} for entry in trainer.state.log_history if "loss" in entry]
    result = {"rank": rank, "world_size": trainer.accelerator.num_processes, "steps": steps, "history": history,
              "pass_rates": trainer.zero_variance.pass_rates.state_dict(), "global_step": trainer.state.global_step}
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    end_worker(trainer)


if __name__ == "__main__":
    main(sys.argv[1])
