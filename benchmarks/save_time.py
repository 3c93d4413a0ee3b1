"""How long a full checkpoint save takes (what a Ctrl-C writes): the tiny model's QLoRA adapter, and SmolLM2-135M's
LoRA r 16 on every linear layer (4.9M parameters: about 60 MB with its AdamW moments), each in float32.

accelerate >= 1.16's launcher sends SIGKILL 5 s after it forwards a Ctrl-C (docs/resume.md): a save must fit in what
is left of those 5 s after the step in progress ends. Each model trains ``--steps`` tiny steps (2 prompts x 2
completions of 8 tokens) with a checkpoint after every step; a callback times each save from the end of the optimizer
step to transformers' ``on_save`` (exactly what `GracefulInterrupt.longest_save` measures) and sums the checkpoint's
bytes.

    OMP_NUM_THREADS=1 taskset -c 1 nice python benchmarks/save_time.py            # both models, 4 saves each
    python benchmarks/save_time.py --model tiny --steps 6
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


def checkpoint_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def measure(model: str, steps: int, output_dir: Path) -> tuple[list[float], int]:
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import TrainerCallback

    from trl_grpo_ext import GRPOExtConfig, GRPOExtTrainer
    from trl_grpo_ext.models.embedded import tiny

    if model == "tiny":
        path = tiny.ensure_tiny_model()
        tokenizer = tiny.load_tokenizer(path)
        rows = tiny.count_char_rows(16, target="a")
        lora_r = 8
    else:
        from transformers import AutoTokenizer

        from trl_grpo_ext.models.embedded.smollm2 import ensure_smollm2

        path = ensure_smollm2()
        tokenizer = AutoTokenizer.from_pretrained(path)
        rows = [{"prompt": [{"role": "user", "content": f"What is {i} + {i + 1}?"}]} for i in range(16)]
        lora_r = 16
    peft = LoraConfig(r=lora_r, lora_alpha=2 * lora_r, task_type="CAUSAL_LM",
                      target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    config = GRPOExtConfig(output_dir=str(output_dir), use_cpu=True, bf16=False, report_to=[], logging_steps=1,
                           disable_tqdm=True, prompts_per_step=2, num_generations=2, micro_batch_size=4,
                           max_completion_length=8, total_training_steps=steps, save_strategy="steps", save_steps=1,
                           learning_rate=1e-4)

    class SaveClock(TrainerCallback):
        def __init__(self):
            self.seconds, self.started = [], None

        def on_step_end(self, args, state, control, **kwargs):
            self.started = time.perf_counter() if control.should_save else None

        def on_save(self, args, state, control, **kwargs):
            if self.started is not None:
                self.seconds.append(time.perf_counter() - self.started)

    clock = SaveClock()
    trainer = GRPOExtTrainer(str(path), reward_funcs=lambda completions, **kw: [float(len(str(c))) for c in completions],
                             args=config, train_dataset=Dataset.from_list(rows), processing_class=tokenizer,
                             peft_config=peft, callbacks=[clock])
    trainer.train()
    newest = max(output_dir.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    return clock.seconds, checkpoint_bytes(newest)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=("tiny", "smollm2", "both"), default="both")
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    for model in ("tiny", "smollm2") if args.model == "both" else (args.model,):
        with tempfile.TemporaryDirectory() as folder:
            seconds, size = measure(model, args.steps, Path(folder))
        print(f"{model}: checkpoint {size / 1e6:.1f} MB; save seconds "
              f"{', '.join(f'{s:.2f}' for s in seconds)} (max {max(seconds):.2f})", flush=True)


if __name__ == "__main__":
    main()
