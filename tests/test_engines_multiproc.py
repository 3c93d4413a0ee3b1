"""Every zero-variance mode on every engine, 2 CPU processes, LoRA on the float32 tiny model (and mask on its 4-bit
NF4 version): DDP (torchrun, gloo), DeepSpeed ZeRO-2 and ZeRO-3 (`accelerate launch` with
recipes/accelerate_configs/zero{2,3}_cpu.yaml) and FSDP2 (`accelerate launch` with fsdp2_cpu.yaml, gloo).

The worker (tests/engines_worker.py) trains 3 optimizer steps; step 2 is all-uniform. Each (engine, mode) runs once
per test session; the tests compare each engine with DDP (rewards, advantages, kept rows, learning rates and the saved
adapter), the advantages with the GRPO formula worked out from the recorded rewards, and the optimizer's values across
the all-uniform step; a real SIGINT through the launcher, then a resume, against the uninterrupted run.

FSDP2 on a CPU needs a test-only patch (tests/fsdp_cpu.py): accelerate 1.15 takes its FSDP branch only for GPU-like
devices, so a user's CPU run is refused (tests/test_engines.py); the patch applies that branch's assignments to the
CPU processes, and everything after it (torch `fully_shard` on a "cpu" device mesh, gloo collectives, the full state
dict gathered for saving) is accelerate's and torch's own code. `make test-dist` runs this module (`slow`,
`multiproc`) after installing the deepspeed extra; the default `make test` deselects it.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import time
from importlib.metadata import version

import pytest
from factories import ROOT, run_worker_on_2_processes, run_worker_under_accelerate, worker_launch
from packaging.version import Version

pytestmark = [pytest.mark.slow, pytest.mark.multiproc]

#: zero_variance_filter modes; a new mode is one entry (and one in KEEPS_UNIFORM_ROWS if it keeps them in the loss).
MODES = ("off", "mask", "resample", "skip")
#: modes that keep zero-variance rows in the loss, and so update on an all-uniform step
KEEPS_UNIFORM_ROWS = {"off"}
#: engine -> CPU twin accelerate config (None: torchrun, DDP)
ENGINES = {"ddp": None, "zero2": "zero2_cpu.yaml", "zero3": "zero3_cpu.yaml", "fsdp2": "fsdp2_cpu.yaml"}
#: engine -> the accelerator's distributed type
DISTRIBUTED_TYPES = {"ddp": "MULTI_CPU", "zero2": "DEEPSPEED", "zero3": "DEEPSPEED", "fsdp2": "FSDP"}
#: (mode, base) pairs run on every engine: every mode on the float32 base, and mask on a 4-bit NF4 base (float32
#: compute and adapters), which bitsandbytes runs on a CPU under each of these engines
RUNS = [(mode, "float32") for mode in MODES] + [("mask", "nf4")]
G, LEARNING_RATE, STEPS = 4, 1e-2, 3

_runs: dict[tuple[str, str, str], dict] = {}


def run(engine: str, mode: str, tmp_path_factory, base: str = "float32") -> dict:
    """The worker's results of (engine, mode, base), run once per session: {"ranks": [rank0, rank1], "adapter": path}."""
    if (engine, mode, base) not in _runs:
        out = tmp_path_factory.mktemp(f"{engine}-{mode}-{base}")
        config, args = ENGINES[engine], ("engines_worker.py", str(out), mode, str(STEPS), base)
        if config is None:
            result = run_worker_on_2_processes(*args, timeout=300)
        else:
            result = run_worker_under_accelerate(config, *args, timeout=300)
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
        ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
        _runs[engine, mode, base] = {"ranks": ranks, "adapter": out / "adapter" / "adapter_model.safetensors"}
    return _runs[engine, mode, base]


def grpo_advantages(rewards: list[float]) -> list[float]:
    """(r − group mean) / (group std + 1e-4), unbiased std, per group of G (TRL's default scaling), by hand."""
    out = []
    for start in range(0, len(rewards), G):
        group = rewards[start:start + G]
        mean = sum(group) / G
        std = math.sqrt(sum((r - mean) ** 2 for r in group) / (G - 1))
        out += [(r - mean) / (std + 1e-4) for r in group]
    return out


@pytest.mark.parametrize(("mode", "base"), RUNS)
@pytest.mark.parametrize("engine", list(ENGINES))
def test_engine_runs_the_plan_with_grpo_advantages(engine, mode, base, tmp_path_factory):
    ranks = run(engine, mode, tmp_path_factory, base)["ranks"]
    for rank, result in enumerate(ranks):
        assert (result["engine"], result["world_size"]) == (f"DistributedType.{DISTRIBUTED_TYPES[engine]}", 2)
        assert (result["sharded_params"] > 0) == (engine == "fsdp2")  # fully_shard made DTensors of the parameters
        # plan == real: the run stops where the plan said, for the reason it gave
        assert result["plan"] == {"total_steps": STEPS, "stop_reason": "step_limit"}
        assert result["global_step"] == STEPS
        # linear decay from 1e-2 to 0 over 3 steps, read after each step: 2/3, 1/3, 0 of it (the skipped step counts)
        assert [s["lr"] for s in result["steps"]] == pytest.approx([LEARNING_RATE * 2 / 3, LEARNING_RATE / 3, 0.0])
        assert len(result["batches"]) == STEPS
        for batch in result["batches"]:
            rewards = batch["rewards"]
            assert len(rewards) == 4 * G and len(batch["advantages"]) == 2 * G  # 4 prompts, 8 rows per process
            uniform_groups = sum(len(set(rewards[i:i + G])) == 1 for i in range(0, len(rewards), G))
            assert batch["kept"] == (4 * G if mode in KEEPS_UNIFORM_ROWS else 4 * G - G * uniform_groups)
            local = grpo_advantages(rewards)[rank * 2 * G:(rank + 1) * 2 * G]
            assert batch["advantages"] == pytest.approx(local, abs=1e-5)
        assert all(r == 1.0 for r in result["batches"][1]["rewards"])  # step 2: all uniform
    # every process saw the same gathered rewards and kept-row counts
    assert [(b["rewards"], b["kept"]) for b in ranks[0]["batches"]] == [(b["rewards"], b["kept"]) for b in ranks[1]["batches"]]


@pytest.mark.parametrize(("mode", "base"), RUNS)
@pytest.mark.parametrize("engine", [e for e in ENGINES if e != "ddp"])
def test_engine_equals_ddp(engine, mode, base, tmp_path_factory):
    from safetensors.torch import load_file

    ours, ddp = run(engine, mode, tmp_path_factory, base), run("ddp", mode, tmp_path_factory, base)
    for rank in (0, 1):
        assert ours["ranks"][rank]["batches"] == ddp["ranks"][rank]["batches"]  # rewards, advantages, kept rows
        assert [s["lr"] for s in ours["ranks"][rank]["steps"]] == [s["lr"] for s in ddp["ranks"][rank]["steps"]]
        assert ours["ranks"][rank]["skipped_updates"] == ddp["ranks"][rank]["skipped_updates"]
    # each engine shards the optimizer's values (float32 parameters and AdamW's moments) over the 2 processes: each
    # holds about half of DDP's (measured: 24,577 values per process under ZeRO-2/3, 24,604 under FSDP2, of 49,180)
    held, whole = [len(r["steps"][0]["optimizer"]) for r in ours["ranks"]], len(ddp["ranks"][0]["steps"][0]["optimizer"])
    assert max(held) < 0.6 * whole, (held, whole)
    adapter, reference = load_file(ours["adapter"]), load_file(ddp["adapter"])
    assert sorted(adapter) == sorted(reference) and len(reference) > 0
    moved = 0.0
    for name, tensor in reference.items():
        assert adapter[name].dtype == tensor.dtype
        assert adapter[name].allclose(tensor, rtol=0, atol=1e-4), name  # float tolerance: reduction order
        moved = max(moved, tensor.abs().max().item())
    assert moved > 1e-3  # the adapter trained (lora_B starts at 0), so equality is not that of two zero tensors


@pytest.mark.parametrize(("mode", "base"), RUNS)
@pytest.mark.parametrize("engine", list(ENGINES))
def test_all_uniform_step_leaves_the_optimizer_untouched(engine, mode, base, tmp_path_factory):
    for result in run(engine, mode, tmp_path_factory, base)["ranks"]:
        after = [s["optimizer"] for s in result["steps"]]  # parameters and optimizer state after steps 1, 2, 3
        assert after[2] != after[1]  # step 3 has informative groups: an update
        if mode not in KEEPS_UNIFORM_ROWS:
            assert after[1] == after[0]  # bit-identical: step 2 kept no row, its update was skipped
            assert result["skipped_updates"] == 1
        else:
            assert after[1] != after[0]  # off: AdamW still moves the weights on zero advantages (momentum)
            assert result["skipped_updates"] == 0


@pytest.mark.parametrize("engine", list(ENGINES))
def test_resume_from_the_checkpoint_an_interrupt_leaves_gives_the_uninterrupted_adapter(engine, tmp_path):
    """checkpoint-1 (after step 1, before the all-uniform step 2) resumed under the same engine: steps 2 and 3 again,
    with resample's state (its prompt cursor and fraction estimate) restored from the checkpoint."""
    from safetensors.torch import load_file

    config = ENGINES[engine]
    args = ("engines_resume_worker.py", str(tmp_path), "resample")
    result = (run_worker_on_2_processes(*args, timeout=300) if config is None
              else run_worker_under_accelerate(config, *args, timeout=300))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert "no optimizer.pt" not in result.stderr + result.stdout  # DeepSpeed's checkpoint holds its optimizer
    for rank in (0, 1):
        runs = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert runs["resumed"] == runs["uninterrupted"]  # global step 3, the same learning rates, one skipped update
        assert runs["resumed"]["global_step"] == STEPS and runs["resumed"]["skipped_updates"] == 1
    final = load_file(tmp_path / "uninterrupted" / "adapter" / "adapter_model.safetensors")
    resumed = load_file(tmp_path / "resumed" / "adapter" / "adapter_model.safetensors")
    at_checkpoint = load_file(tmp_path / "uninterrupted" / "checkpoint-1" / "adapter_model.safetensors")
    assert sorted(final) == sorted(resumed)
    for name, tensor in final.items():
        assert resumed[name].equal(tensor), name  # bit-identical
    assert any(not at_checkpoint[name].equal(tensor) for name, tensor in final.items())  # step 3 trained after it


@pytest.mark.parametrize("engine", list(ENGINES))
def test_sigint_through_the_launcher_then_resume_gives_the_uninterrupted_adapter(engine, tmp_path, tmp_path_factory):
    """A real SIGINT mid-run: the worker (tests/engines_interrupt_worker.py, resample, no periodic checkpoints) waits
    after optimizer step 1 until its handler has seen the signal, which the test sends to the launcher's process group
    (Ctrl-C in its terminal); torchrun's agent, the launcher of every engine here, forwards it to both workers, which
    save checkpoint-1 and stop. A second launch resumes from it; its adapter is the uninterrupted 3-step run's, bit for
    bit."""
    from safetensors.torch import load_file

    interrupted, resumed = tmp_path / "interrupted", tmp_path / "resumed"
    command, env = worker_launch(ENGINES[engine], "engines_interrupt_worker.py", str(interrupted), "resample")
    with open(tmp_path / "interrupted.log", "w") as log:
        process = subprocess.Popen(command, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        try:
            deadline = time.monotonic() + 240
            while not all((interrupted / f"paused{rank}").exists() for rank in (0, 1)):
                assert process.poll() is None and time.monotonic() < deadline, "no pause after step 1"
                time.sleep(0.2)
            os.killpg(process.pid, signal.SIGINT)
            returncode = process.wait(timeout=120)
        finally:
            if process.poll() is None:
                process.kill()
    output = (tmp_path / "interrupted.log").read_text()
    # torchrun's agent ends with a SignalException after its workers stopped: 1. accelerate >= 1.16's launcher, which
    # the other engines start through, catches the terminal's SIGINT itself and exits 130 (commands/launch.py)
    accelerate_130 = ENGINES[engine] is not None and Version(version("accelerate")) >= Version("1.16")
    assert returncode == (130 if accelerate_130 else 1), output[-4000:]
    assert output.count("SIGINT received: saving a checkpoint") == 2  # both workers, once each: no second signal
    checkpoint = interrupted / "run" / "checkpoint-1"
    for rank in (0, 1):
        stop = json.loads((interrupted / f"rank{rank}.json").read_text())
        assert (stop["stopped"], stop["checkpoint"], stop["global_step"]) == (True, str(checkpoint), 1)
    assert sorted(p.name for p in checkpoint.parent.glob("checkpoint-*")) == ["checkpoint-1"]  # the interrupt's save
    assert not (interrupted / "adapter").exists()

    command, env = worker_launch(ENGINES[engine], "engines_interrupt_worker.py", str(resumed), "resample",
                                 str(checkpoint))
    result = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert "no optimizer.pt" not in result.stderr + result.stdout  # each engine's optimizer state was found
    for rank in (0, 1):
        end = json.loads((resumed / f"rank{rank}.json").read_text())
        assert (end["stopped"], end["global_step"]) == (False, STEPS)
        # the learning rate logged at steps 1-3 (1 restored from the checkpoint): 1e-2 decaying linearly over 3 steps
        assert end["lr"] == pytest.approx([LEARNING_RATE, LEARNING_RATE * 2 / 3, LEARNING_RATE / 3])
        assert end["skipped_updates"] == 1  # the all-uniform step 2, after the resume
    reference = load_file(run(engine, "resample", tmp_path_factory)["adapter"])
    adapter = load_file(resumed / "adapter" / "adapter_model.safetensors")
    assert sorted(adapter) == sorted(reference)
    for name, tensor in reference.items():
        assert adapter[name].equal(tensor), name  # bit-identical, as the resume from a periodic checkpoint


@pytest.mark.parametrize("engine", [e for e in ENGINES if e not in ("ddp", "fsdp2")])  # FSDP: refused on a CPU
def test_the_recipe_runs_under_the_cpu_twin(engine, tmp_path):
    """The documented command: the recipe on the embedded default (NF4 + LoRA with lm_head in modules_to_save),
    shortened to 3 steps, under `accelerate launch --config_file zero{2,3}_cpu.yaml` (docs/scaling.md)."""
    out = tmp_path / "run"
    result = run_worker_under_accelerate(
        ENGINES[engine], "../recipes/grpo_qlora.py", "--config", "tiny_cpu", "--use_cpu", "false", "--ddp_backend",
        "gloo", "--micro_batch_size", "8", "--total_training_steps", "3", "--eval_strategy", "no", "--final_eval",
        "none", "--output_dir", str(out), timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == STEPS
    assert json.loads((out / "run_plan.json").read_text())["world_size"] == 2
    assert (out / "adapter_model.safetensors").is_file() and (out / "reward_plot.png").is_file()
