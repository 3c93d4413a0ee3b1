"""Worker of tests/test_zero_variance_multiproc.py: 3 resample-mode steps, each rank's decisions written to JSON.

Run by `torchrun --standalone --nproc_per_node 2 tests/zero_variance_worker.py OUT_DIR` (CPU, gloo). Half the
prompts ask for target "b" and get a constant reward (zero-variance groups), the others get the completion's position in
its group; at optimizer step 2 every reward is constant, so that step ends with a shortfall and a skipped update.
Writes OUT_DIR/rank{RANK}.json with, per generation batch: the global kept-row mask, this rank's drawn dataset
indices per resample round, and which of this rank's final rows ask for target "b"; plus the zero_variance/* entries
of the log history.
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


def reward(completions, target, trainer_state, **kwargs):
    if trainer_state.global_step == 1:
        return [1.0] * len(completions)
    return [1.0 if t == "b" else float(i % G) for i, t in enumerate(target)]


def main(out_dir: str) -> None:
    rank = int(os.environ["RANK"])
    # the tiny model is built by the test before launching, so the ranks only read it
    trainer = tiny_trainer(
        os.path.join(out_dir, "run"), reward, count_char_mix(32), prompts_per_step=4, num_generations=G,
        micro_batch_size=8,  # 16 completions per step over 2 processes: gradient_accumulation_steps = 1
        total_training_steps=3, max_completion_length=8, learning_rate=1e-3, zero_variance_filter="resample",
        max_resample_rounds=2, seed=0,
    )
    batches = []
    draw, mask_rows = trainer.zero_variance.source.draw, trainer.zero_variance.mask

    def recording_draw(prompts_per_round, process_index, num_processes):
        indices = draw(prompts_per_round, process_index, num_processes)
        batches[-1]["drawn"].append(indices)
        return indices

    def recording_mask(output, kept, local):
        texts = trainer.processing_class.batch_decode(output["prompt_ids"], skip_special_tokens=True)
        batches[-1]["local_zero_variance_target"] = ["write b b" in text for text in texts]
        batches[-1]["kept"] = kept.int().tolist()
        return mask_rows(output, kept, local)

    generate = trainer._generate_and_score_completions

    def recording_generate(inputs):
        batches.append({"drawn": []})
        return generate(inputs)

    trainer.zero_variance.source.draw = recording_draw
    trainer.zero_variance.mask = recording_mask
    trainer._generate_and_score_completions = recording_generate
    trainer.train()
    history = [
        {k: v for k, v in entry.items() if (k.startswith("zero_variance/") and k != GENERATION_SECONDS_KEY)
         or k == "step"}  # every decision and count; not a process's own clock
        for entry in trainer.state.log_history
        if "loss" in entry
    ]
    result = {"rank": rank, "world_size": trainer.accelerator.num_processes, "batches": batches, "history": history}
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    end_worker(trainer)  # destroy the process group and leave without the interpreter's teardown


if __name__ == "__main__":
    main(sys.argv[1])
