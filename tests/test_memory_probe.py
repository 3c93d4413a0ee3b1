"""`training.memory_probe`: the longest-first probe turns a late out-of-memory into a failure before step 1."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from trl_grpo_ext.training.memory_probe import is_out_of_memory, probe_enabled

TESTS = Path(__file__).resolve().parent


@pytest.mark.parametrize(("mode", "device", "expected"), [
    ("auto", "cuda", True), ("auto", "cpu", False), ("on", "cpu", True), ("on", "cuda", True),
    ("off", "cuda", False), ("off", "cpu", False)])
def test_probe_is_on_by_default_for_gpu_runs_only(mode, device, expected):
    assert probe_enabled(mode, device) is expected


def test_out_of_memory_errors_are_told_from_other_errors():
    import torch

    assert is_out_of_memory(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert is_out_of_memory(MemoryError())
    assert is_out_of_memory(RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 536870912"))
    assert not is_out_of_memory(RuntimeError("expected m1 and m2 to have the same dtype"))
    assert not is_out_of_memory(ValueError("out of memory"))


def test_memory_probe_config_field_refuses_an_unknown_mode(tmp_path):
    from factories import tiny_config

    with pytest.raises(ValueError, match="memory_probe"):
        tiny_config(tmp_path, memory_probe="always")


def _run(tmp_path, probe: str) -> tuple[int, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(TESTS.parent),
                                                          os.environ.get("PYTHONPATH", "")]), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(TESTS / "memory_probe_worker.py"), str(tmp_path / probe), probe, "256"],
                          capture_output=True, text=True, env=env, timeout=300)
    lines = [line for line in done.stdout.splitlines() if line.startswith(("STEPS", "ERROR"))]
    return done.returncode, "\n".join(lines) or done.stdout[-2000:] + done.stderr[-2000:]


def test_the_probe_fails_a_run_whose_longest_prompt_comes_late_before_step_1(tmp_path):
    # 256 MiB of address space above what the built trainer holds: the short steps fit; the step that draws the
    # 265-token prompt needs TRL's 4,096 × 32,768 float32 tile (512 MiB) for its 16 × 280 scored positions
    code, out = _run(tmp_path, "off")
    assert code == 3, out
    assert "STEPS 3" in out  # without the probe: three steps trained, then the late prompt fails step 4
    assert "can't allocate memory" in out
    code, out = _run(tmp_path, "on")
    assert code == 3, out
    assert "STEPS 0" in out  # with it: before step 1, with the forecast and the fix
    assert ("MemoryProbeError: memory probe: out of memory before step 1, in the forward + backward of the longest "
            "prompt (row 4, 265 tokens) + 16 completion tokens (address-space limit") in out
    # no adapter, checkpointed (TRL's default), B·S = 16 × 281 = 4,496 tokens: 2 layers × 4,496 × 64 × 4 B of layer
    # inputs + 4,496 × 4,368 B for the recomputed layer + 16 × 281² B of mask = 23,203,856 B; the head's tile
    # 4,096 × 32,768 × 4 B + 4,096 × 56 × 29 B of temporaries + 4,480 × 64 × 8 B = 545,816,576 B -> 542.66 MiB
    assert "forecast, training phase 542.66 MiB" in out
    # (gradient checkpointing is TRL's default, on already: not advised)
    assert "Fix: max_prompt_length below 265 (the recipe drops longer prompts), micro_batch_size below 16, or " \
           "max_completion_length below 16." in out
