"""What does the plugin cost per step? Plain `trl.GRPOTrainer` against `GRPOExtTrainer`, same model, data, config, seed.

    python benchmarks/overhead.py                              # CPU, full-precision tiny model, 1 torch thread
    python benchmarks/overhead.py --model 4bit                 # NF4 + LoRA r=8 (the recipe's setting)
    python benchmarks/overhead.py --device cuda                # on a GPU (peak memory from the CUDA allocator)
    python benchmarks/overhead.py --profile                    # ms per step inside each of our overrides

Arms: ``trl`` (plain TRL), ``ext`` (ours, every feature off: TRL's fields only) and ``ext+mask`` (ours with
``zero_variance_filter="mask"``). Each block builds a fresh trainer per arm from the same initial weights and seed and
runs ``--steps-per-block`` optimizer steps; the arms run alternately in one process, in the order trl, ext, ext+mask,
then reversed (ABCCBA...), so slow drift of the machine's load cancels. A step's time is measured from
``on_step_begin`` to ``on_step_end`` (generation, rewards, advantages, loss, backward, optimizer step); the first step of
each block and a whole warm-up block are discarded. Printed per arm: median seconds per optimizer step, and against
``trl``: the ratio of the medians and the median of the per-block ratios (each block of an arm against the ``trl`` block
next to it).

Peak memory: on CUDA, ``torch.cuda.max_memory_allocated`` over each block (reset before it), in the same process. On
CPU the process's peak resident set size cannot be split between arms living in one process, so each arm also runs
``--memory-steps`` steps alone in a fresh child process (``--memory-runs`` children per arm, alternating); printed:
the peak resident set size during ``train()`` (sampled every millisecond from ``/proc/self/statm``) and its growth
over the size just before ``train()``, medians over the children.

The load average of the machine is printed with each measurement: numbers taken while other work loads the CPUs are
not a measurement of the plugin.
"""

from __future__ import annotations

import argparse
import contextlib
import io
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
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from transformers import TrainerCallback  # noqa: E402

ARMS = ("trl", "ext", "ext+mask")


def at_least_two_targets(completions, target, **kwargs) -> list[float]:
    """1.0 if a completion holds its target character at least twice, else 0.0.

    A binary reward, so that some groups of G completions are uniform and the mask filter has groups to drop.
    """
    from trl_grpo_ext.rewards.text import completion_texts

    return [float(text.count(t) >= 2) for text, t in zip(completion_texts(completions), target)]


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--model", default="fp32", choices=["fp32", "4bit"],
                        help="fp32: the tiny model in full precision, every weight trained; 4bit: NF4 + LoRA r=8")
    parser.add_argument("--blocks", type=int, default=8, help="measured blocks per arm (after one warm-up block)")
    parser.add_argument("--steps-per-block", type=int, default=8, help="optimizer steps per block")
    parser.add_argument("--reward", default="binary", choices=["binary", "char_fraction"],
                        help="binary: at_least_two_targets (some uniform groups); char_fraction: continuous")
    parser.add_argument("--threads", type=int, default=1, help="torch threads on CPU (1: least noise on a busy machine)")
    parser.add_argument("--memory-runs", type=int, default=2, help="CPU: child processes per arm for peak memory")
    parser.add_argument("--memory-steps", type=int, default=20, help="CPU: optimizer steps of each memory child")
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated subset of {', '.join(ARMS)}")
    parser.add_argument("--profile", action="store_true",
                        help="instead: time each GRPOExtTrainer override without its super() call (ms per step)")
    parser.add_argument("--memory-child", choices=ARMS, help=argparse.SUPPRESS)
    parser.add_argument("--json", help="also write the results to this JSON file")
    return parser.parse_args(argv)


# -- one trainer -----------------------------------------------------------------------------------------------------
def build_trainer(arm: str, args: argparse.Namespace, steps: int, output_dir: str):
    """A fresh trainer of ``arm`` for ``steps`` optimizer steps: 2 prompts x 8 completions of <= 24 tokens per step."""
    import torch
    from transformers import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from trl_grpo_ext import GRPOExtConfig, GRPOExtTrainer
    from trl_grpo_ext.models.embedded import tiny
    from trl_grpo_ext.rewards.builtin import CharFraction

    model_dir = tiny.ensure_tiny_model()
    reward = CharFraction() if args.reward == "char_fraction" else at_least_two_targets
    common = dict(
        output_dir=output_dir, per_device_train_batch_size=16, gradient_accumulation_steps=1, num_generations=8,
        max_completion_length=24, max_steps=steps, learning_rate=1e-3, lr_scheduler_type="constant", beta=0.0,
        temperature=1.0, logging_steps=1, save_strategy="no", report_to="none", seed=0, disable_tqdm=True,
        use_cpu=args.device == "cpu", bf16=False,
    )
    kwargs = {}
    if args.model == "4bit":
        from peft import LoraConfig
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=torch.float32)
        kwargs["peft_config"] = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, task_type="CAUSAL_LM",
                                           target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
        common["model_init_kwargs"] = {"dtype": "float32"}
    if args.device == "cuda":
        common["model_init_kwargs"] = {**common.get("model_init_kwargs", {}), "device_map": "cuda"}
    if arm == "trl":
        config, trainer_class = GRPOConfig(**common), GRPOTrainer
    else:
        # adapter_dtype="bfloat16" is TRL's own behaviour on a quantized model: every feature of ours off
        extra = {"zero_variance_filter": "mask"} if arm == "ext+mask" else {}
        config, trainer_class = GRPOExtConfig(**common, adapter_dtype="bfloat16", **extra), GRPOExtTrainer
    trainer = trainer_class(
        model=str(model_dir), reward_funcs=[reward], args=config,
        train_dataset=tiny.count_char_dataset(512), processing_class=tiny.load_tokenizer(model_dir), **kwargs)
    trainer.remove_callback(PrinterCallback)
    return trainer


class StepTimer(TrainerCallback):
    """Callback: seconds per optimizer step (``on_step_begin`` -> ``on_step_end``) and the logged reward per step."""

    def __init__(self):
        super().__init__()
        self.seconds: list[float] = []
        self.rewards: list[float] = []
        self.uniform: list[float] = []  # zero_variance/frac_uniform_before, logged with the filter on
        self._start = 0.0

    def on_step_begin(self, args, state, control, **kwargs):
        self._sync()
        self._start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self._sync()
        self.seconds.append(time.perf_counter() - self._start)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "reward" in logs:
            self.rewards.append(logs["reward"])
        if logs and "zero_variance/frac_uniform_before" in logs:
            self.uniform.append(logs["zero_variance/frac_uniform_before"])

    @staticmethod
    def _sync():
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()


def run_block(arm: str, args: argparse.Namespace, steps: int, workdir: str) -> dict:
    """Build ``arm``'s trainer and train ``steps`` steps; returns step seconds, rewards and (CUDA) peak memory."""
    import torch

    trainer = build_trainer(arm, args, steps, os.path.join(workdir, arm))
    timer = StepTimer()
    trainer.add_callback(timer)
    if args.device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    with contextlib.redirect_stdout(io.StringIO()):  # the plan table and train metrics of each block
        trainer.train()
    peak = torch.cuda.max_memory_allocated() / 2**20 if args.device == "cuda" else None
    del trainer
    return {"seconds": timer.seconds, "rewards": timer.rewards, "uniform": timer.uniform, "peak_mib": peak}


# -- CPU peak memory in child processes -----------------------------------------------------------------------------
def memory_child(args: argparse.Namespace) -> None:
    """Run one arm alone; print ``{"peak_rss_mib", "train_growth_mib"}`` as JSON on the last line.

    The resident set size is sampled every millisecond by a thread while ``train()`` runs: the peak during training,
    and its growth over the size just before it (the libraries, the model and the data are loaded by then).
    """
    import threading

    samples: list[float] = []
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            samples.append(_rss_mib())
            time.sleep(0.001)

    with tempfile.TemporaryDirectory() as workdir:
        trainer = build_trainer(args.memory_child, args, args.memory_steps, workdir)
        before = _rss_mib()
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        with contextlib.redirect_stdout(io.StringIO()):
            trainer.train()
        stop.set()
        sampler.join()
    peak = max(samples)
    print(json.dumps({"peak_rss_mib": peak, "train_growth_mib": peak - before}))


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def measure_cpu_memory(args: argparse.Namespace, arms: list[str]) -> dict:
    results = {arm: [] for arm in arms}
    for run in range(args.memory_runs):
        for arm in arms if run % 2 == 0 else arms[::-1]:
            command = [sys.executable, __file__, "--memory-child", arm, "--model", args.model, "--threads",
                       str(args.threads), "--memory-steps", str(args.memory_steps), "--reward", args.reward, "--device", args.device]
            done = subprocess.run(command, capture_output=True, text=True, check=True)
            results[arm].append(json.loads(done.stdout.strip().splitlines()[-1]))
    return {arm: {key: statistics.median(r[key] for r in runs) for key in runs[0]} for arm, runs in results.items()}


# -- where our time goes ---------------------------------------------------------------------------------------------
OVERRIDES = ("_generate_and_score_completions", "_calculate_rewards", "training_step", "_compute_loss")


def profile_overrides(args: argparse.Namespace, arms: list[str]) -> dict:
    """Milliseconds per optimizer step spent in each override of `GRPOExtTrainer`, excluding its ``super()`` call.

    Both the override and TRL's method it calls are wrapped with a timer; the override's own cost is the difference
    of their totals (TRL's method calls back into our other overrides through ``self``, which is timed the same way).
    """
    from trl import GRPOTrainer

    from trl_grpo_ext import GRPOExtTrainer

    totals: dict[tuple[str, str], float] = {}

    def timed(cls, name):
        original = getattr(cls, name)

        def wrapper(*a, **k):
            start = time.perf_counter()
            try:
                return original(*a, **k)
            finally:
                key = (cls.__name__, name)
                totals[key] = totals.get(key, 0.0) + time.perf_counter() - start

        setattr(cls, name, wrapper)
        return original

    originals = {(cls, name): timed(cls, name) for cls in (GRPOTrainer, GRPOExtTrainer) for name in OVERRIDES}
    report = {}
    try:
        with tempfile.TemporaryDirectory() as workdir:
            for arm in [a for a in arms if a != "trl"]:
                run_block(arm, args, 2, workdir)  # warm-up
                totals.clear()
                steps = args.blocks * args.steps_per_block
                result = run_block(arm, args, steps, workdir)
                step_ms = 1000 * sum(result["seconds"]) / steps
                ours = {name: 1000 * (totals.get(("GRPOExtTrainer", name), 0.0) - totals.get(("GRPOTrainer", name), 0.0))
                        / steps for name in OVERRIDES}
                report[arm] = {"step_ms": step_ms, "own_ms_per_step": ours}
    finally:
        for (cls, name), original in originals.items():
            setattr(cls, name, original)
    print(f"\n| override (own code, super() excluded) | {' | '.join(report)} |")
    print("|---|" + "---|" * len(report))
    for name in OVERRIDES:
        print(f"| `{name}` ms/step | " + " | ".join(f"{r['own_ms_per_step'][name]:.3f}" for r in report.values()) + " |")
    print("| sum, share of the step | " + " | ".join(
        f"{sum(r['own_ms_per_step'].values()):.3f} of {r['step_ms']:.1f} "
        f"({sum(r['own_ms_per_step'].values()) / r['step_ms']:.2%})" for r in report.values()) + " |")
    return report


# -- report ----------------------------------------------------------------------------------------------------------
def load() -> str:
    return "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def quiet() -> None:
    """No weight-loading bars, no per-block stop messages: the table is the output."""
    import logging

    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    logging.getLogger("trl_grpo_ext").setLevel(logging.ERROR)


def main(argv=None) -> dict:
    args = parse_args(argv)
    import torch

    quiet()
    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    if args.memory_child:
        return memory_child(args)
    arms = [arm for arm in args.arms.split(",") if arm]
    if "trl" not in arms:
        raise SystemExit("--arms must include trl (the reference)")
    import trl

    print(f"trl {trl.__version__}, torch {torch.__version__}, device {args.device}, model {args.model}, "
          f"reward {args.reward}, "
          f"threads {torch.get_num_threads()}, {args.blocks} blocks x {args.steps_per_block} steps per arm")
    print(f"start: {load()}")
    if args.profile:
        report = profile_overrides(args, arms)
        print(f"end: {load()}")
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=2))
        return report
    seconds = {arm: [] for arm in arms}
    block_medians = {arm: [] for arm in arms}
    rewards = {arm: [] for arm in arms}
    peaks = {arm: [] for arm in arms}
    uniform = {arm: [] for arm in arms}
    with tempfile.TemporaryDirectory() as workdir:
        for block in range(args.blocks + 1):  # block 0 warms up every arm and is not counted
            for arm in arms if block % 2 == 0 else arms[::-1]:
                result = run_block(arm, args, args.steps_per_block, workdir)
                if block == 0:
                    continue
                kept = result["seconds"][1:]  # the first step of a block pays one-off costs
                seconds[arm] += kept
                block_medians[arm].append(statistics.median(kept))
                rewards[arm].append(result["rewards"])
                uniform[arm] += result["uniform"]
                if result["peak_mib"] is not None:
                    peaks[arm].append(result["peak_mib"])
    print(f"timing done: {load()}")
    memory = measure_cpu_memory(args, arms) if args.device == "cpu" else {
        arm: {"peak_cuda_mib": max(values)} for arm, values in peaks.items()}
    print(f"memory done: {load()}")

    reference = statistics.median(seconds["trl"])
    report = {"device": args.device, "model": args.model, "threads": torch.get_num_threads(), "arms": {}}
    memory_kind = "peak CUDA allocated MiB" if args.device == "cuda" else "peak RSS MiB"
    print(f"\n| arm | median s/step | ratio of medians | median per-block ratio | {memory_kind} | "
          "growth in train() MiB | same rewards as trl | uniform groups |")
    print("|---|---|---|---|---|---|---|---|")
    for arm in arms:
        median = statistics.median(seconds[arm])
        block_ratio = statistics.median(b / a for a, b in zip(block_medians["trl"], block_medians[arm]))
        mem = memory[arm]
        peak = mem.get("peak_cuda_mib", mem.get("peak_rss_mib"))
        growth = mem.get("train_growth_mib")
        same = rewards[arm] == rewards["trl"]
        frac_uniform = statistics.mean(uniform[arm]) if uniform[arm] else None
        report["arms"][arm] = {"median_s_per_step": median, "ratio": median / reference, "block_ratio": block_ratio,
                               "memory": mem, "same_rewards_as_trl": same, "steps_timed": len(seconds[arm]),
                               "frac_uniform_groups": frac_uniform}
        growth_text = f"{growth:.1f}" if growth is not None else "-"
        uniform_text = f"{frac_uniform:.1%}" if frac_uniform is not None else "-"
        print(f"| {arm} | {median:.4f} | {median / reference:.3f} | {block_ratio:.3f} | {peak:.1f} | {growth_text} | "
              f"{'yes' if same else 'no'} | {uniform_text} |")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
