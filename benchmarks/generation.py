"""Generation back ends for a 4-bit QLoRA GRPO policy: tokens/s, s per optimizer step, peak memory, against default.

Three arms, same model, data, seed and quantities, each a short GRPO training (NF4 base with double quantization +
LoRA r 16 on q/k/v/o/gate/up/down, float32 adapter, bf16 compute on a GPU) in its own subprocess, so that its peak
memory is its own:

- default: TRL's `model.generate` with transformers' default (dynamic) KV cache;
- continuous batching: `use_transformers_continuous_batching: true`, its paged KV cache sized to one generation
  batch (`transformers_continuous_batching_config.num_blocks`, see `_cb_config`) instead of TRL's default of half
  the free GPU memory;
- static cache: `cache_implementation: static` (TRL generates with `disable_compile=True`, so no torch.compile).

    python benchmarks/generation.py --device cuda          # one GPU: Qwen2.5-1.5B-shaped, G 8, 256 tokens
    python benchmarks/generation.py --device cpu --smoke   # CPU smoke test of the same code path, shrunk

The GPU model has Qwen2.5-1.5B's shape (hidden 1536, intermediate 8960, 28 layers, 12 heads / 2 KV heads, vocab
151,936, tied embeddings; about 1.54B parameters), random weights, built locally from the config: nothing is
downloaded. The prompts are the embedded `count-char` task's, tokenized with the embedded character tokenizer (its
ids are the model's first ids). Completions have a fixed length: the end-of-sequence token is suppressed
(`generation_kwargs: {suppress_tokens: [eos]}`, the same logits processor in every arm), so every completion is
`max_completion_length` tokens and the reported `mean completion length` shows it. The reward is a token-id reward
(fraction of even ids), which gives groups a non-zero spread, hence non-zero advantages and a real backward pass.

Measured per arm (the first optimizer step is a warm-up and is not counted):
- generated tokens/s: completion tokens returned by TRL's `_generate_single_turn` / wall time inside it (CUDA
  synchronised around it), summed over the timed steps;
- s/step: median of TRL's `step_time` metric (generation, rewards, loss, backward, optimizer step);
- peak memory: `torch.cuda.max_memory_allocated()` (and `max_memory_reserved()`) from just before `train()`, the
  weights included; on a CPU, the process's peak resident set size.
Ratios are against the default arm. The acceptance targets of issue 16 are printed next to them: the best arm at
least 2 × default's tokens/s, and a peak of at most 5 GB (Unsloth's published figure for Qwen2.5-1.5B GRPO).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from qwen_shaped import LORA_TARGETS, build_qwen2_shaped, even_token_ids  # noqa: E402 (benchmarks/)

#: Qwen2.5-1.5B's shape (https://huggingface.co/Qwen/Qwen2.5-1.5B/blob/main/config.json).
QWEN25_15B_SHAPE = dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                        num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True,
                        max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6)
#: The shrunk shape of `--smoke`.
SMOKE_SHAPE = dict(QWEN25_15B_SHAPE, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, vocab_size=512)
#: The arms: label -> GRPOExtConfig overrides (continuous batching's cache is added by `_cb_config`).
ARMS = {
    "default": {},
    "continuous batching": {"use_transformers_continuous_batching": True},
    "static cache": {"cache_implementation": "static"},
}
#: Quantities: G 8, 256 tokens, 8 prompts per step (64 completions, the 1.5B recipe's), micro-batches of 8.
GPU_SETTINGS = dict(num_generations=8, max_completion_length=256, prompts_per_step=8, micro_batch_size=8, steps=3,
                    lora_r=16, gradient_checkpointing=True)
SMOKE_SETTINGS = dict(num_generations=8, max_completion_length=16, prompts_per_step=2, micro_batch_size=16, steps=2,
                      lora_r=8, gradient_checkpointing=False)
PEAK_TARGET_GB = 5.0
SPEEDUP_TARGET = 2.0


# -- parent: build the model, run each arm in a subprocess, print the table ---------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    parser.add_argument("--smoke", action="store_true", help="a 2-layer model of the same family, 16 tokens, 2 steps")
    parser.add_argument("--steps", type=int, default=None, help="optimizer steps per arm, the first one not timed")
    parser.add_argument("--max-completion-length", type=int, default=None, help="tokens per completion")
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated subset of {list(ARMS)}")
    parser.add_argument("--timeout", type=float, default=None, help="seconds per subprocess (gpu 200, cpu 300)")
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds for the whole benchmark (gpu 540): arms left over are reported as FAILED")
    parser.add_argument("--cb-config", default="{}",
                        help="JSON merged into the continuous-batching arm's transformers_continuous_batching_config, "
                             "e.g. '{\"use_cuda_graph\": false}'")
    parser.add_argument("--json", default=None, help="also write the results to this file")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(json.loads(args.worker))
        return
    settings = dict(SMOKE_SETTINGS if args.smoke else GPU_SETTINGS)
    settings["steps"] = args.steps or settings["steps"]
    settings["max_completion_length"] = args.max_completion_length or settings["max_completion_length"]
    shape = SMOKE_SHAPE if args.smoke else QWEN25_15B_SHAPE
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = sorted(set(arms) - set(ARMS))
    if unknown:
        sys.exit(f"--arms: unknown {unknown}; choose from {list(ARMS)}")
    cuda = args.device == "cuda"
    timeout = args.timeout or (200 if cuda else 300)
    budget = args.budget or (540 if cuda else None)
    start = time.perf_counter()
    deadline = None if budget is None else start + budget
    print(f"load average at start: {os.getloadavg()[0]:.1f} ({os.cpu_count()} CPUs)", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench_generation_") as tmp:
        model_dir = str(Path(tmp) / "model")
        print(f"building a random {'smoke' if args.smoke else 'Qwen2.5-1.5B'}-shaped model in {model_dir} ...",
              flush=True)
        built = _subprocess({"build": model_dir, "device": args.device, "shape": shape}, timeout, deadline)
        if built is None:
            sys.exit("building the model failed")
        results = {}
        for arm in arms:
            spec = dict(settings, arm=arm, device=args.device, model_dir=model_dir, output_dir=str(Path(tmp) / "run"),
                        cb_config=json.loads(args.cb_config))
            print(f"{arm} ...", flush=True)
            results[arm] = _subprocess(spec, timeout, deadline)
    if any(r is not None and "cb_config" in r for r in results.values()):
        print(f"continuous batching config: {results['continuous batching']['cb_config']}")
    model_name = (f"{'smoke (2 layers, hidden 64, vocab 512)' if args.smoke else 'Qwen2.5-1.5B-shaped'}, "
                  f"{built['parameters'] / 1e6:.1f}M parameters, random weights")
    _print_table(args.device, model_name, settings, results)
    if args.json:
        Path(args.json).write_text(json.dumps({"device": args.device, "model": model_name, "settings": settings,
                                               "results": results, "versions": built["versions"]}, indent=1))
    print(f"total wall time {time.perf_counter() - start:.0f} s; load average at the end: {os.getloadavg()[0]:.1f}",
          flush=True)
    if any(r is None for r in results.values()):
        sys.exit(1)


def _subprocess(spec: dict, timeout: float, deadline: float | None) -> dict | None:
    if deadline is not None:
        timeout = min(timeout, deadline - time.perf_counter())
        if timeout < 10:
            print("  FAILED: skipped, the --budget is spent", flush=True)
            return None
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(spec)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        print(f"  FAILED: timed out after {timeout:.0f} s", flush=True)
        return None
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        print(f"  FAILED (exit code {done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}", flush=True)
        return None
    return json.loads(lines[-1][len("RESULT "):])


def _print_table(device: str, model_name: str, s: dict, results: dict[str, dict | None]) -> None:
    cuda = device == "cuda"
    print(f"\n== generation, device {device}: {model_name}; NF4 + LoRA r {s['lora_r']}; {s['prompts_per_step']} prompts "
          f"x G {s['num_generations']} = {s['prompts_per_step'] * s['num_generations']} completions of "
          f"{s['max_completion_length']} tokens per step; {s['steps']} steps per arm, the first not timed ==")
    memory = "peak allocated GB (reserved)" if cuda else "peak RSS GB"
    header = ["arm", "tokens/s", "x default", "s/step", "x default", memory, "x default", "mean completion length"]
    rows = [header]
    base = results.get("default")
    for arm, r in results.items():
        if r is None:
            rows.append([arm, "FAILED"] + [""] * (len(header) - 2))
            continue
        peak = r["peak_gb"]
        ratios = {key: f"{r[key] / base[key]:.2f}" if base else "n/a" for key in ("tokens_per_s", "s_per_step", "peak_gb")}
        rows.append([arm, f"{r['tokens_per_s']:.0f}", ratios["tokens_per_s"], f"{r['s_per_step']:.2f}",
                     ratios["s_per_step"], f"{peak:.2f}" + (f" ({r['reserved_gb']:.2f})" if cuda else ""),
                     ratios["peak_gb"], f"{r['mean_completion_length']:.1f}"])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)))
    done = {arm: r for arm, r in results.items() if r is not None}
    if base and done:
        best = max(done, key=lambda arm: done[arm]["tokens_per_s"])
        speedup = done[best]["tokens_per_s"] / base["tokens_per_s"]
        target = (f" (target >= {SPEEDUP_TARGET:.0f} x: {'met' if speedup >= SPEEDUP_TARGET else 'MISSED'})"
                  if cuda else " (CPU smoke figures: the targets apply to the GPU run)")
        print(f"best arm: {best}, {speedup:.2f} x default's tokens/s{target}")
        if cuda:
            for arm, r in done.items():
                print(f"peak memory {arm}: {r['peak_gb']:.2f} GB (target <= {PEAK_TARGET_GB:.0f} GB: "
                      f"{'met' if r['peak_gb'] <= PEAK_TARGET_GB else 'MISSED'})")


# -- worker: build the model, or train one arm ---------------------------------------------------------------------------
def _worker(spec: dict) -> None:
    if "build" in spec:
        print("RESULT " + json.dumps(_build(spec["build"], spec["device"], spec["shape"])), flush=True)
        return
    import resource

    import torch

    cuda = spec["device"] == "cuda"
    if not cuda:
        torch.set_num_threads(1)
    trainer = _make_trainer(spec)
    timed = {"seconds": 0.0, "tokens": 0, "calls": 0}
    original = trainer._generate_single_turn

    def timed_generation(*args, **kwargs):
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        completion_ids, logprobs = original(*args, **kwargs)
        if cuda:
            torch.cuda.synchronize()
        timed["calls"] += 1
        if trainer.state.global_step >= 1:  # step 1 (global_step 0 while it runs) is the warm-up
            timed["seconds"] += time.perf_counter() - start
            timed["tokens"] += sum(len(ids) for ids in completion_ids)
        return completion_ids, logprobs

    trainer._generate_single_turn = timed_generation
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    trainer.train()
    history = trainer.state.log_history
    step_times = [e["step_time"] for e in history if "step_time" in e]
    lengths = [e["completions/mean_length"] for e in history if "completions/mean_length" in e]
    result = dict(
        tokens_per_s=timed["tokens"] / timed["seconds"] if timed["seconds"] else float("nan"),
        generation_s=timed["seconds"],
        s_per_step=statistics.median(step_times[1:] or step_times),
        mean_completion_length=statistics.mean(lengths[1:] or lengths),
        generation_calls=timed["calls"],
        trainable_dtypes=sorted({str(p.dtype) for p in trainer.model.parameters() if p.requires_grad}),
    )
    if trainer.args.use_transformers_continuous_batching:
        result["cb_config"] = trainer.args.transformers_continuous_batching_config
    if cuda:
        result.update(peak_gb=torch.cuda.max_memory_allocated() / 1e9, reserved_gb=torch.cuda.max_memory_reserved() / 1e9)
    else:
        result["peak_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9  # KiB on Linux
    print("RESULT " + json.dumps(result), flush=True)


def _cb_config(spec: dict, tokenizer, dataset) -> dict:
    """A paged KV cache that holds one generation batch: completions × ceil((longest prompt + new tokens) / page)
    blocks of `page_size` tokens, plus one block per completion of headroom."""
    page_size = 64 if spec["device"] == "cpu" else 256
    longest = max(len(tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True)) for row in dataset)
    completions = spec["prompts_per_step"] * spec["num_generations"]
    blocks = completions * (math.ceil((longest + spec["max_completion_length"]) / page_size) + 1)
    return {"num_blocks": blocks, "page_size": page_size, "max_batch_tokens": max(512, completions * 8)}


def _make_trainer(spec: dict):
    import torch
    from peft import LoraConfig
    from transformers import BitsAndBytesConfig

    from trl_grpo_ext import GRPOExtConfig, GRPOExtTrainer
    from trl_grpo_ext.models.embedded import tiny

    cuda = spec["device"] == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    tokenizer = tiny.load_tokenizer(spec["model_dir"])
    dataset = tiny.count_char_dataset(64)
    arm = dict(ARMS[spec["arm"]])
    if arm.get("use_transformers_continuous_batching"):
        arm["transformers_continuous_batching_config"] = {**_cb_config(spec, tokenizer, dataset),
                                                          **spec.get("cb_config", {})}
    args = GRPOExtConfig(
        output_dir=spec["output_dir"], use_cpu=not cuda, bf16=cuda, prompts_per_step=spec["prompts_per_step"],
        num_generations=spec["num_generations"], micro_batch_size=spec["micro_batch_size"],
        total_training_steps=spec["steps"], max_completion_length=spec["max_completion_length"], learning_rate=1e-5,
        beta=0.0, temperature=1.0, report_to=[], save_strategy="no", logging_steps=1, disable_tqdm=True,
        adapter_dtype="float32", gradient_checkpointing=spec["gradient_checkpointing"],
        generation_kwargs={"suppress_tokens": [tokenizer.eos_token_id]},  # fixed completion length
        model_init_kwargs={"dtype": dtype}, seed=0, **arm,
    )
    bnb = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                             bnb_4bit_compute_dtype=dtype)
    peft = LoraConfig(r=spec["lora_r"], lora_alpha=2 * spec["lora_r"], target_modules=LORA_TARGETS,
                      task_type="CAUSAL_LM")
    return GRPOExtTrainer(spec["model_dir"], reward_funcs=[even_token_ids], args=args, train_dataset=dataset,
                          processing_class=tokenizer, quantization_config=bnb, peft_config=peft)


def _build(directory: str, device: str, shape: dict) -> dict:
    import bitsandbytes
    import peft
    import torch
    import transformers
    import trl

    model = build_qwen2_shaped(directory, device, shape)
    versions = {"torch": torch.__version__, "transformers": transformers.__version__, "trl": trl.__version__,
                "peft": peft.__version__, "bitsandbytes": bitsandbytes.__version__}
    if torch.cuda.is_available():
        versions["gpu"] = torch.cuda.get_device_name(0)
    print("versions " + json.dumps(versions), flush=True)
    return {"parameters": sum(p.numel() for p in model.parameters()), "versions": versions}


if __name__ == "__main__":
    main()
