"""The memory forecast (`plan.memory`) against the memory a step's tensors take on this CPU, for the embedded tiny
model and SmolLM2-135M.

For each model the script builds the trainer on the float32 base with a LoRA adapter (CPU: no 4-bit), takes the
dataset's longest prompt, and measures, with `torch.profiler` (``profile_memory=True``: every CPU allocation and free),
the peak of the bytes allocated above the start of each phase of the longest-first probe (`training.memory_probe`):

- generation: one generation batch at full length (EOS suppressed until max_completion_length): the KV cache,
  the last-position logits and the prefill's transients;
- forward + backward of one micro-batch at prompt + max_completion_length tokens through TRL's log-probability path
  (its fused LM head): the activations, TRL's log-probability buffers and the adapter's gradients.

The forecast of each is printed beside it (the training phase plus the adapter gradients, which the forecast counts
with the adapter and which are allocated in the backward), with the ratio forecast / measured.

    python benchmarks/memory_forecast.py                     # tiny, SmolLM2 without and with gradient checkpointing:
                                                             # about 3 minutes on 2 cores
    OMP_NUM_THREADS=1 taskset -c 1 python benchmarks/memory_forecast.py --models tiny
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from trl_grpo_ext.plan.memory import forecast_memory, format_bytes  # noqa: E402
from trl_grpo_ext.training import memory_probe  # noqa: E402

#: name -> (model, micro_batch_size, prompts_per_step, num_generations, max_completion_length, dataset,
#: gradient_checkpointing)
SETUPS = {
    "tiny": ("embedded:tiny-qwen2", 16, 4, 4, 64, "count-char", False),
    "smollm2": ("embedded:smollm2-135m-instruct", 8, 1, 8, 64, "arithmetic", False),
    "smollm2-checkpointed": ("embedded:smollm2-135m-instruct", 8, 1, 8, 64, "arithmetic", True),
}


def allocated_peak(fn):
    """(result of ``fn()``, peak bytes allocated above the start while it ran): torch.profiler's CPU memory events."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = fn()
    events = sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"),
                    key=lambda e: e.start_ns())
    live = peak = 0
    for event in events:
        live += event.nbytes()
        peak = max(peak, live)
    return result, peak


def build_trainer(name: str, output_dir: str):
    from datasets import Dataset
    from peft import LoraConfig

    from trl_grpo_ext import GRPOExtConfig, GRPOExtTrainer
    from trl_grpo_ext.data.arithmetic import arithmetic_rows
    from trl_grpo_ext.data.load import gsm8k_to_prompt
    from trl_grpo_ext.models.embedded import tiny

    model_id, micro, prompts, g, length, task, checkpointing = SETUPS[name]
    if task == "count-char":
        rows = tiny.count_char_rows(32)
    else:
        rows = [gsm8k_to_prompt(row, "Solve the problem. End your reply with: The answer is N.")
                for row in arithmetic_rows("train", 64, seed=0)]
    path = tiny.resolve_model_path(model_id)
    if model_id.startswith("embedded:smollm2"):
        from trl_grpo_ext.models.embedded.smollm2 import ensure_smollm2

        path = str(ensure_smollm2())
    from transformers import AutoTokenizer

    tokenizer = tiny.load_tokenizer(path) if "tiny" in model_id else AutoTokenizer.from_pretrained(path)
    args = GRPOExtConfig(output_dir=output_dir, use_cpu=True, bf16=False, gradient_checkpointing=checkpointing,
                         prompts_per_step=prompts, num_generations=g, micro_batch_size=micro,
                         max_completion_length=length, total_training_steps=1, report_to="none", memory_probe="off",
                         save_strategy="no", logging_steps=1, disable_tqdm=True)
    lora = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, task_type="CAUSAL_LM",
                      target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    return GRPOExtTrainer(path, reward_funcs=lambda completions, **_: [0.0] * len(completions), args=args,
                          train_dataset=Dataset.from_list(rows), processing_class=tokenizer, peft_config=lora)


class _Measured(Exception):
    """Raised by the measuring callback once it has its figures: the run stops before step 1."""


def measure(name: str) -> dict:
    """The probe's two phases measured where the probe runs them: at ``on_train_begin`` of ``trainer.train()``
    (transformers enables gradient checkpointing in ``train``), then the run is stopped."""
    from transformers import TrainerCallback

    found: dict = {}

    class Measure(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            index, prompt = memory_probe.longest_prompt(trainer)
            shape, settings = memory_probe.run_settings(trainer, len(prompt))
            length = trainer.args.max_completion_length
            start = time.perf_counter()
            out, generation = allocated_peak(lambda: memory_probe.probe_generation(
                trainer, prompt, settings.generation_batch, length))
            _, training = allocated_peak(lambda: memory_probe.probe_training(
                trainer, out[:settings.micro_batch_size], length))
            grads = sum(p.numel() * p.element_size() for p in trainer.model.parameters() if p.requires_grad)
            found.update(model=name, params=shape.num_parameters, prompt_tokens=len(prompt), settings=settings,
                         generation=generation, training=training, grads=grads,
                         forecast=forecast_memory(shape, settings), seconds=time.perf_counter() - start)
            raise _Measured

    with tempfile.TemporaryDirectory() as tmp:
        trainer = build_trainer(name, tmp)
        trainer.add_callback(Measure())
        try:
            trainer.train()
        except _Measured:
            pass
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(SETUPS), choices=list(SETUPS))
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s)")
    print("| model | shape | phase | forecast | measured | forecast / measured |")
    print("|---|---|---|---|---|---|")
    for name in args.models:
        r = measure(name)
        s, f = r["settings"], r["forecast"]
        shape = (f"{r['params']:,} params; {s.generation_batch} × ({r['prompt_tokens']} + {s.max_completion_length})"
                 f" generated, micro-batch {s.micro_batch_size} × {s.sequence_length}")
        generation = f.phase_bytes("generation")
        training = f.phase_bytes("training") + r["grads"]
        for phase, fc, ms in (("generation", generation, r["generation"]),
                              ("forward + backward", training, r["training"])):
            print(f"| {name} | {shape} | {phase} | {format_bytes(fc)} | {format_bytes(ms)} | {fc / ms:.2f} |")
        for part in f.parts:
            print(f"    {part.name}: {format_bytes(part.bytes)} {part.formula}", file=sys.stderr)
        print(f"    adapter gradients: {format_bytes(r['grads'])}; probe took {r['seconds']:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
