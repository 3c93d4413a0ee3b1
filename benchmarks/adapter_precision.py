"""float32 vs bfloat16 trainable adapters on a 4-bit model: seconds per step, peak memory, lost-update fraction.

Each run is a short GRPO training (NF4 4-bit base + LoRA on q/k/v/o/gate/up/down, learning rate 1e-5) in its own
subprocess, so its peak memory is its own. Three runs: float32 adapters, bfloat16 adapters (TRL's behaviour), and
float32 adapters with the lost-update measurement off (its cost is the difference to the first run).

    python benchmarks/adapter_precision.py                  # CPU: the embedded tiny model (+ trainable lm_head)
    python benchmarks/adapter_precision.py --device cuda    # GPU: a ~0.5B Qwen2.5-0.5B-shaped model, random init
    # CPU smoke test of the GPU model's code path, shrunk:
    python benchmarks/adapter_precision.py --model qwen2.5-0.5b-shaped --layers 1 --vocab-size 512 \
        --max-completion-length 8 --steps 2 --rounds 1

Measured per run:
- s/step: median (and minimum) of TRL's `step_time` metric (wall clock) over the optimizer steps after the first
  (the first one warms up). On a CPU shared with other work the wall clock is noisy, so on CPU the table also gives
  the process's CPU seconds per step (`time.process_time`): the compute the step cost, nearly independent of other
  processes. CPU runs use one torch thread, so that no thread spin-waits for another one that was descheduled.
- peak memory: CPU, the process's peak resident set size (`resource.getrusage(...).ru_maxrss`, which includes the
  Python/torch runtime, ~0.5 GB) and how much training raised it above the resident size before training;
  CUDA, `torch.cuda.max_memory_allocated()` during training (weights included). tracemalloc is not used: it does not
  see torch's C++ allocations.
- adapter state: bytes of the trainable weights + their gradients + Adam's two moments, counted from the tensors.
- lost-update fraction: `adapter/lost_update_frac` (see `docs/adapter_precision.md`), measured at every step.
- tracker ms/step: wall time spent inside the measurement's optimizer hooks (CUDA synchronised around it).

The GPU model is built locally from a config (hidden 896, intermediate 4864, 24 layers, 14 heads / 2 KV heads, vocab
151,936, tied embeddings; ~494M parameters) with the embedded tokenizer, which only uses the first ids: nothing is
downloaded. Its random output is not text, so runs on it use a token-id reward (fraction of even token ids) that
still gives groups a non-zero reward spread, hence non-zero advantages and gradients.
"""

from __future__ import annotations

import argparse
import json
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
from transformers import TrainerCallback  # noqa: E402

LEARNING_RATE = 1e-5
#: The runs compared: (label, adapter_dtype, lost_update_steps).
RUNS = [("float32", "float32", 1), ("bfloat16", "bfloat16", 1), ("float32, tracker off", "float32", 0)]
#: Qwen2.5-0.5B's shape (https://huggingface.co/Qwen/Qwen2.5-0.5B/blob/main/config.json).
QWEN25_05B_SHAPE = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                        num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True,
                        max_position_embeddings=2048, rope_theta=1000000.0, rms_norm_eps=1e-6)
#: Per model: steps, prompts_per_step, num_generations, micro_batch_size, max_completion_length, LoRA r (the recipes').
SETTINGS = {
    "tiny": dict(steps=12, prompts_per_step=2, num_generations=8, micro_batch_size=16, max_completion_length=24, r=8),
    "qwen2.5-0.5b-shaped": dict(steps=6, prompts_per_step=4, num_generations=8, micro_batch_size=16,
                                max_completion_length=64, r=16),
}


# -- parent: build the model (cuda), run every configuration in a subprocess, print the table ---------------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--model", choices=sorted(SETTINGS), default=None,
                        help="tiny (default on cpu) or qwen2.5-0.5b-shaped (default on cuda)")
    parser.add_argument("--layers", type=int, default=None, help="override num_hidden_layers of the built model")
    parser.add_argument("--vocab-size", type=int, default=None, help="override vocab_size of the built model")
    parser.add_argument("--max-completion-length", type=int, default=None, help="override tokens per completion")
    parser.add_argument("--steps", type=int, default=None, help="optimizer steps per run (cpu 12, cuda 6)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="times each run is repeated, interleaved (cpu 3, cuda 1); medians are reported")
    parser.add_argument("--timeout", type=float, default=None, help="seconds per subprocess (cpu 300, cuda 100)")
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds for the whole benchmark (cpu none, cuda 220): runs left over are reported "
                             "as FAILED, the others still printed")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(json.loads(args.worker))
        return
    model = args.model or ("tiny" if args.device == "cpu" else "qwen2.5-0.5b-shaped")
    settings = dict(SETTINGS[model])
    settings["steps"] = args.steps or settings["steps"]
    settings["max_completion_length"] = args.max_completion_length or settings["max_completion_length"]
    rounds = args.rounds or (3 if args.device == "cpu" else 1)
    timeout = args.timeout or (300 if args.device == "cpu" else 100)
    budget = args.budget or (None if args.device == "cpu" else 220)
    start = time.perf_counter()
    deadline = None if budget is None else start + budget
    print(f"load average at start: {os.getloadavg()[0]:.1f} ({os.cpu_count()} CPUs)", flush=True)
    with tempfile.TemporaryDirectory(prefix="adapter_precision_") as tmp:
        if model != "tiny":
            model_dir = str(Path(tmp) / model)
            shape = dict(QWEN25_05B_SHAPE, num_hidden_layers=args.layers or QWEN25_05B_SHAPE["num_hidden_layers"],
                         vocab_size=args.vocab_size or QWEN25_05B_SHAPE["vocab_size"])
            print(f"building a random Qwen2.5-0.5B-shaped model in {model_dir} ...", flush=True)
            built = _subprocess({"build": model_dir, "device": args.device, "shape": shape}, timeout, deadline)
            if built is None:
                sys.exit("building the model failed")
            model_name = (f"Qwen2.5-0.5B-shaped, {built['parameters'] / 1e6:.0f}M parameters "
                          f"({shape['num_hidden_layers']} layers, vocab {shape['vocab_size']}), random init")
        else:
            from trl_grpo_ext.models.embedded import tiny

            model_dir, model_name = str(tiny.ensure_tiny_model()), "embedded tiny-qwen2 (+ trainable lm_head copy)"
        results: dict[str, list[dict]] = {label: [] for label, _, _ in RUNS}
        for round_index in range(rounds):
            for label, adapter_dtype, lost_update_steps in RUNS:
                spec = dict(settings, device=args.device, model=model, model_dir=model_dir, adapter_dtype=adapter_dtype,
                            lost_update_steps=lost_update_steps, output_dir=str(Path(tmp) / f"run{round_index}"))
                print(f"round {round_index + 1}/{rounds}: {label} ...", flush=True)
                result = _subprocess(spec, timeout, deadline)
                if result is not None:
                    results[label].append(result)
    _print_table(args.device, model_name, settings, rounds, results)
    print(f"total wall time {time.perf_counter() - start:.0f} s; load average at the end: {os.getloadavg()[0]:.1f}",
          flush=True)


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


def _print_table(device: str, model_name: str, settings: dict, rounds: int, results: dict[str, list[dict]]) -> None:
    s = settings
    print(f"\n== adapter precision, device {device}: {model_name}, NF4 + LoRA r={s['r']}, lr {LEARNING_RATE:g}, "
          f"{s['prompts_per_step']} prompts x {s['num_generations']} completions x {s['max_completion_length']} "
          f"tokens per step, {s['steps']} steps x {rounds} round(s) ==")
    memory = "peak RSS MiB (+training)" if device == "cpu" else "max_memory_allocated GiB"
    header = ["run", "s/step median (min)", *(["CPU s/step"] if device == "cpu" else []), memory,
              "adapter state MiB", "lost-update frac mean / last", "tracker ms/step"]
    rows = [header]
    for label, runs in results.items():
        if not runs:
            rows.append([label, "FAILED"] + [""] * (len(header) - 2))
            continue
        step = statistics.median(r["s_per_step"] for r in runs)
        if device == "cpu":
            peak = f"{statistics.median(r['peak_rss_mib'] for r in runs):.0f} " \
                   f"(+{statistics.median(r['rss_growth_mib'] for r in runs):.0f})"
        else:
            peak = f"{statistics.median(r['max_memory_allocated_gib'] for r in runs):.3f}"
        fractions = runs[0]["lost_update_fractions"]
        lost = f"{statistics.mean(fractions):.4f} / {fractions[-1]:.4f}" if fractions else "not measured"
        tracker = statistics.median(r["tracker_ms_per_step"] for r in runs)
        cpu_time = [f"{statistics.median(r['cpu_s_per_step'] for r in runs):.3f}"] if device == "cpu" else []
        low = min(r["min_s_per_step"] for r in runs)
        rows.append([label, f"{step:.3f} ({low:.3f})", *cpu_time, peak, f"{runs[0]['adapter_state_mib']:.2f}", lost,
                     f"{tracker:.2f}" if runs[0]["lost_update_steps"] else "off"])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)))
    key = "cpu_s_per_step" if device == "cpu" else "s_per_step"
    cost = {label: statistics.median(r[key] for r in runs) for label, runs in results.items() if runs}
    what = "CPU s/step" if device == "cpu" else "s/step"
    if "float32" in cost and "bfloat16" in cost:
        print(f"{what} bfloat16 / float32 = {cost['bfloat16'] / cost['float32']:.2f}")
    if "float32" in cost and "float32, tracker off" in cost:
        off = cost["float32, tracker off"]
        print(f"lost-update measurement every step, end to end: {cost['float32'] - off:+.3f} {what} "
              f"({100 * (cost['float32'] / off - 1):+.1f}%, noise included); inside its hooks: "
              f"{statistics.median(r['tracker_ms_per_step'] for r in results['float32']):.2f} ms/step")


# -- worker: one run ---------------------------------------------------------------------------------------------------
def _worker(spec: dict) -> None:
    if "build" in spec:
        parameters = sum(p.numel() for p in build_qwen2_shaped(spec["build"], spec["device"], spec["shape"]).parameters())
        print("RESULT " + json.dumps({"parameters": parameters}), flush=True)
        return
    import resource

    import torch

    cuda = spec["device"] == "cuda"
    if not cuda:
        torch.set_num_threads(1)
    trainer = _make_trainer(spec)
    spent = [0.0]
    tracker = trainer.lost_updates
    tracker._pre, tracker._post = _timed(tracker._pre, spent, cuda), _timed(tracker._post, spent, cuda)  # pre-attach
    cpu_times = _StepCpuTime()
    trainer.add_callback(cpu_times)
    rss_before = _current_rss_mib()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    trainer.train()
    step_times = [e["step_time"] for e in trainer.state.log_history if "step_time" in e]
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    state_bytes = 2 * sum(p.numel() * p.element_size() for p in params)  # weights + gradients
    state_bytes += sum(t.numel() * t.element_size() for s in trainer.optimizer.state.values()
                       for t in s.values() if torch.is_tensor(t) and t.dim() > 0)  # Adam exp_avg, exp_avg_sq
    result = dict(
        s_per_step=statistics.median(step_times[1:] or step_times),
        min_s_per_step=min(step_times[1:] or step_times),
        cpu_s_per_step=statistics.median(cpu_times.seconds[1:] or cpu_times.seconds),
        lost_update_fractions=tracker.history,
        lost_update_steps=spec["lost_update_steps"],
        tracker_ms_per_step=1000 * spent[0] / max(1, trainer.state.global_step),
        adapter_state_mib=state_bytes / 2**20,
        trainable_dtypes=sorted({str(p.dtype) for p in params}),
    )
    if cuda:
        result["max_memory_allocated_gib"] = torch.cuda.max_memory_allocated() / 2**30
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
        result.update(peak_rss_mib=peak, rss_growth_mib=max(0.0, peak - rss_before))
    print("RESULT " + json.dumps(result), flush=True)


def _make_trainer(spec: dict):
    import torch
    from peft import LoraConfig
    from transformers import BitsAndBytesConfig

    from trl_grpo_ext import GRPOExtConfig, GRPOExtTrainer
    from trl_grpo_ext.models.embedded import tiny

    cuda, tiny_model = spec["device"] == "cuda", spec["model"] == "tiny"
    dtype = torch.bfloat16 if cuda else torch.float32
    reward = {} if tiny_model else {"reward_funcs": [even_token_ids]}
    args = GRPOExtConfig(
        output_dir=spec["output_dir"], use_cpu=not cuda, bf16=cuda, prompts_per_step=spec["prompts_per_step"],
        num_generations=spec["num_generations"], micro_batch_size=spec["micro_batch_size"],
        total_training_steps=spec["steps"], max_completion_length=spec["max_completion_length"],
        learning_rate=LEARNING_RATE, report_to=[], save_strategy="no", logging_steps=1, disable_tqdm=True,
        rewards=["char_fraction"] if tiny_model else None, adapter_dtype=spec["adapter_dtype"],
        lost_update_steps=spec["lost_update_steps"], model_init_kwargs={"dtype": dtype}, seed=0,
    )
    bnb = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                             bnb_4bit_compute_dtype=dtype)
    peft = LoraConfig(r=spec["r"], lora_alpha=2 * spec["r"], target_modules=LORA_TARGETS, task_type="CAUSAL_LM",
                      modules_to_save=["lm_head"] if tiny_model else None)  # the tiny random model needs it
    return GRPOExtTrainer(spec["model_dir"], args=args, train_dataset=tiny.count_char_dataset(64),
                          processing_class=tiny.load_tokenizer(spec["model_dir"]), quantization_config=bnb,
                          peft_config=peft, **reward)


class _StepCpuTime(TrainerCallback):
    """CPU seconds of this process (all threads) per optimizer step, generation included."""

    def __init__(self):
        self.seconds: list[float] = []
        self._start = 0.0

    def on_step_begin(self, args, state, control, **kwargs):
        self._start = time.process_time()

    def on_step_end(self, args, state, control, **kwargs):
        self.seconds.append(time.process_time() - self._start)


def _timed(function, spent: list[float], cuda: bool):
    import torch

    def wrapper(*args, **kwargs):
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        result = function(*args, **kwargs)
        if cuda:
            torch.cuda.synchronize()
        spent[0] += time.perf_counter() - start
        return result

    return wrapper


def _current_rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


if __name__ == "__main__":
    main()
