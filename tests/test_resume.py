"""Interrupt a real CPU run of the recipe with SIGINT, resume it, and compare with an uninterrupted run.

Every run is the QLoRA recipe on the embedded tiny model in a subprocess (4-bit NF4 + LoRA, CPU), 12 optimizer steps
of 2 prompts x 4 completions in 2 micro-batches of 4 (gradient accumulation 2), a checkpoint every 4 steps, and two
policy updates per generation batch (num_iterations 2: TRL generates before optimizer steps 1, 3, 5, ...), so an
interrupt inside a generation batch must wait for its end for the resume to be exact. The runs are shared by the
tests of this module (about 15 s each, mostly start-up).
"""

import contextlib
import json
import os
import queue
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from trl_grpo_ext.training import interrupt

# about a minute of subprocess runs: `make test-slow` (kept out of `make test` to hold it near 10 minutes)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
CPU_CONFIG = str(ROOT / "recipes/accelerate_configs/cpu.yaml")
RECIPE = "recipes/grpo_qlora.py"
TOTAL_STEPS = 12
RUN_ARGS = [
    "--config", "recipes/configs/tiny_cpu.yaml", "--total_training_steps", str(TOTAL_STEPS),
    "--save_strategy", "steps", "--save_steps", "4", "--num_generations", "4", "--micro_batch_size", "4",
    "--max_completion_length", "8", "--num_iterations", "2", "--plot", "false",
]
# One torch thread: on a shared 2-core machine more threads oversubscribe the cores (10x slower steps).
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
CHECKPOINT_FILES = ("adapter_model.safetensors", "adapter_config.json", "optimizer.pt", "scheduler.pt",
                    "rng_state.pth", "trainer_state.json", "run_plan.json")
STEP_LOG = "step "  # the console's one line per optimizer step (logging_steps: 1): "step 4/12  reward ..."
EXIT_INTERRUPTED = 130


def accelerate_launch(args: list[str], timeout: int = 240) -> subprocess.CompletedProcess:
    """``accelerate launch --config_file cpu.yaml ARGS`` (ARGS start with the script)."""
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", CPU_CONFIG, *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=timeout)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Run:
    """A recipe process whose merged stdout/stderr is read by a thread, so the test can wait for a line with a deadline."""

    def __init__(self, command: list[str], new_session: bool = False):
        # a terminal's processes take SIGINT; a shell's background job would ignore it (and pass that on to the
        # launcher), so a process-group run restores the default
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                                        env=ENV, start_new_session=new_session,
                                        preexec_fn=_default_sigint if new_session else None)
        self.lines: list[str] = []
        self._queue: queue.Queue = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.process.stdout:
            self._queue.put(line)
        self._queue.put(None)

    def wait_for_steps(self, steps: int, timeout: float = 180) -> None:
        """Block until ``steps`` step-log lines were printed; fail (and kill the process) after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while sum(line.startswith(STEP_LOG) for line in self.lines) < steps:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.kill()
                pytest.fail(f"no step {steps} within {timeout} s:\n" + "".join(self.lines[-30:]))
            if line is None:
                pytest.fail(f"the run ended before step {steps}:\n" + "".join(self.lines[-30:]))
            self.lines.append(line)

    def wait_for_text(self, text: str, timeout: float = 60) -> None:
        """Block until a line containing ``text`` was printed; fail (and kill the process) after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while not any(text in line for line in self.lines):
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.kill()
                pytest.fail(f"no {text!r} within {timeout} s:\n" + "".join(self.lines[-30:]))
            if line is None:
                pytest.fail(f"the run ended before {text!r}:\n" + "".join(self.lines[-30:]))
            self.lines.append(line)

    def finish(self, timeout: float = 120) -> str:
        """Read the output until the writers close it (every process of the run has exited); return all of it."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.kill()
                pytest.fail(f"the run did not finish within {timeout} s:\n" + "".join(self.lines[-30:]))
            if line is None:
                return "".join(self.lines)
            self.lines.append(line)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()


def step_history(output_dir: Path) -> list[dict]:
    """The per-step entries (those with a loss) of ``trainer_state.json``'s log_history."""
    state = json.loads((output_dir / "trainer_state.json").read_text())
    return [entry for entry in state["log_history"] if "loss" in entry]


def checkpoints(output_dir: Path) -> dict[int, Path]:
    return {int(p.name.split("-")[1]): p for p in output_dir.glob("checkpoint-*")}


def assert_checkpoint_loads(checkpoint: Path) -> None:
    """Every file a resume reads is present and parses: trainer state, plan, adapter weights, optimizer, RNG."""
    from safetensors.torch import load_file

    for name in CHECKPOINT_FILES:
        assert (checkpoint / name).is_file(), f"{checkpoint.name} lacks {name}"
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    assert state["global_step"] == int(checkpoint.name.split("-")[1])
    json.loads((checkpoint / "run_plan.json").read_text())
    assert any("lora_B" in k for k in load_file(str(checkpoint / "adapter_model.safetensors")))
    assert torch.load(checkpoint / "optimizer.pt", weights_only=True)["state"]
    torch.load(checkpoint / "rng_state.pth", weights_only=False)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    out = tmp_path_factory.mktemp("resume") / "uninterrupted"
    result = accelerate_launch([RECIPE, *RUN_ARGS, "--output_dir", str(out)])
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """The recipe run directly (one process needs no launcher), SIGINT once after step 5 is logged.

    The console prints a step's line while that step ends, so the signal arrives at the end of step 5 or during step
    6, inside the generation batch of steps 5-6: the stop waits for step 6.

    Returns ``(output_dir, exit code, output, step of the newest checkpoint)``.
    """
    out = tmp_path_factory.mktemp("resume") / "interrupted"
    run = Run([sys.executable, RECIPE, *RUN_ARGS, "--output_dir", str(out)])
    run.wait_for_steps(5)
    run.process.send_signal(signal.SIGINT)
    output = run.finish()
    stop_step = max(checkpoints(out), default=None)
    if stop_step is not None:  # a copy the resumed run's checkpoint rotation (save_total_limit) cannot delete
        shutil.copytree(out / f"checkpoint-{stop_step}", out.parent / "interrupted-checkpoint")
    return out, run.process.wait(timeout=30), output, stop_step


@pytest.fixture(scope="module")
def resumed(interrupted):
    """The resume command the interrupted run printed, run under ``accelerate launch`` with the CPU config."""
    out, _, output, _ = interrupted
    lines = output.splitlines()
    command = shlex.split(lines[lines.index("Resume with (add your accelerate options before the script):") + 1])
    assert command[:2] == ["accelerate", "launch"], command
    result = accelerate_launch(command[2:])
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return out, command


def test_sigint_saves_a_checkpoint_and_prints_the_resume_command(interrupted):
    out, returncode, output, stop_step = interrupted
    assert returncode == EXIT_INTERRUPTED, output[-3000:]
    assert "SIGINT received: saving a checkpoint after this optimizer step" in output
    assert 6 <= stop_step < TOTAL_STEPS  # signalled after step 5 was logged, stopped at the end of its batch
    assert stop_step % 2 == 0  # the end of a generation batch (2 optimizer steps each)
    assert f"Training interrupted at optimizer step {stop_step} of {TOTAL_STEPS}" in output
    assert f"--resume_from_checkpoint {out / f'checkpoint-{stop_step}'}" in output
    assert_checkpoint_loads(out / f"checkpoint-{stop_step}")
    state = json.loads((out / f"checkpoint-{stop_step}" / "trainer_state.json").read_text())
    assert state["stateful_callbacks"]["TrainerControl"]["args"]["should_training_stop"] is False
    assert not (out / "adapter_model.safetensors").exists()  # an interrupted run does not write its final adapter


def test_resume_command_reruns_the_original_arguments(interrupted, resumed):
    out, _, _, stop_step = interrupted
    _, command = resumed
    assert command[2:] == [RECIPE, *RUN_ARGS, "--output_dir", str(out),
                           "--resume_from_checkpoint", str(out / f"checkpoint-{stop_step}")]


def test_resumed_run_ends_like_the_uninterrupted_run(uninterrupted, resumed):
    out, _ = resumed
    expected_steps = list(range(1, TOTAL_STEPS + 1))
    for run in (uninterrupted, out):
        state = json.loads((run / "trainer_state.json").read_text())
        assert state["global_step"] == state["max_steps"] == TOTAL_STEPS
        assert [entry["step"] for entry in step_history(run)] == expected_steps  # no gap, no duplicate
        plan = json.loads((run / "run_plan.json").read_text())
        assert (plan["total_steps"], plan["stop_reason"]) == (TOTAL_STEPS, "step_limit")
    assert json.loads((out / "run_plan.json").read_text()) == json.loads((uninterrupted / "run_plan.json").read_text())
    assert max(checkpoints(out)) == max(checkpoints(uninterrupted)) == TOTAL_STEPS


def test_resumed_adapter_has_the_uninterrupted_files_and_tensors(uninterrupted, resumed):
    from safetensors.torch import load_file

    out, _ = resumed
    names = {"adapter_model.safetensors", "adapter_config.json", "tokenizer.json", "trainer_state.json"}
    assert names <= {p.name for p in out.iterdir()}
    configs = [json.loads((run / "adapter_config.json").read_text()) for run in (out, uninterrupted)]
    for config in configs:  # peft writes target_modules from a set: its order varies between processes
        config["target_modules"] = sorted(config["target_modules"])
    assert configs[0] == configs[1]
    resumed_weights = load_file(str(out / "adapter_model.safetensors"))
    reference = load_file(str(uninterrupted / "adapter_model.safetensors"))
    assert {k: (v.shape, v.dtype) for k, v in resumed_weights.items()} == {
        k: (v.shape, v.dtype) for k, v in reference.items()}
    # one torch thread on a CPU, resumed at the end of a generation batch: the restored RNG state, optimizer and
    # sampler reproduce the uninterrupted run bit for bit
    assert all(torch.equal(resumed_weights[k], reference[k]) for k in reference)


def test_resumed_steps_repeat_the_uninterrupted_rewards_and_losses(uninterrupted, resumed):
    out, _ = resumed
    keys = ("reward", "loss", "grad_norm", "entropy", "num_tokens")  # reward: logged on generation steps only
    assert [[entry.get(k) for k in keys] for entry in step_history(out)] == [
        [entry.get(k) for k in keys] for entry in step_history(uninterrupted)]


def test_resumed_runs_card_says_its_runtime_and_loss_cover_the_resumed_steps(uninterrupted, interrupted, resumed):
    """transformers times and averages the loss over one train() call: the resumed run's figures are those of the
    steps after its checkpoint, and its card and train_results.json say from which step."""
    out, _, _, stop_step = interrupted
    results = json.loads((out / "train_results.json").read_text())
    assert results["resumed_from_step"] == stop_step
    assert results["train_steps_per_second"] * results["train_runtime"] == pytest.approx(TOTAL_STEPS - stop_step,
                                                                                         abs=0.5)
    card = (out / "README.md").read_text()
    assert f"| train_runtime (the steps after {stop_step} alone: the run resumed from checkpoint-{stop_step}) |" in card
    assert json.loads((uninterrupted / "train_results.json").read_text())["resumed_from_step"] is None
    assert "| train_runtime |" in (uninterrupted / "README.md").read_text()


def test_resume_with_a_different_quantity_is_refused(interrupted, tmp_path):
    out, _, _, _ = interrupted
    checkpoint = out.parent / "interrupted-checkpoint"
    result = accelerate_launch([RECIPE, *RUN_ARGS, "--prompts_per_step", "4", "--output_dir", str(tmp_path / "other"),
                                "--resume_from_checkpoint", str(checkpoint)])
    assert result.returncode != 0
    assert "cannot resume" in result.stderr
    assert "prompts_per_step: 2 in the checkpoint, 4 now" in result.stderr
    assert not (tmp_path / "other" / "trainer_state.json").exists()


def test_resume_with_another_learning_rate_or_rank_is_refused_before_the_model_loads(interrupted, tmp_path):
    # transformers restores the checkpoint's optimizer groups and scheduler: a new learning rate would be dropped
    # silently, and a new LoRA rank fail after the weights load
    out, _, _, _ = interrupted
    checkpoint = out.parent / "interrupted-checkpoint"
    assert json.loads((checkpoint / "resume_settings.json").read_text())["lora"]["lora_r"] == 8
    result = accelerate_launch([RECIPE, *RUN_ARGS, "--learning_rate", "1e-5", "--lora_r", "4", "--output_dir",
                                str(tmp_path / "other"), "--resume_from_checkpoint", str(checkpoint)])
    assert result.returncode != 0, result.stderr[-2000:]  # 2 from the recipe; accelerate launch exits 1
    assert "learning_rate: 0.002 in the checkpoint, 1e-05 now" in result.stderr
    assert "lora_r: 8 in the checkpoint, 4 now" in result.stderr
    assert "Loading" not in result.stderr and not (tmp_path / "other").exists()


def _accelerate_version() -> tuple[int, int]:
    from importlib.metadata import version

    return tuple(int(part) for part in version("accelerate").split(".")[:2])


def assert_only_complete_checkpoints(out: Path) -> dict[int, Path]:
    """Every ``checkpoint-*`` in ``out`` loads (no partial one, and no ``.partial`` left over); returns them."""
    saved = checkpoints(out)
    assert [p.name for p in out.iterdir() if p.name.endswith(".partial")] == []
    for checkpoint in saved.values():
        assert_checkpoint_loads(checkpoint)
    return saved


def test_one_ctrl_c_under_accelerate_launch_saves_the_current_step_and_prints_the_resume_command(tmp_path):
    """Ctrl-C once in a terminal: SIGINT to the whole process group (launcher and script). accelerate 1.16's launcher
    then sends SIGTERM to the script and SIGKILL 5 s later; 1.15's waits. Either way the script's stop checkpoint is
    complete (a tiny-model step and its save fit in the 5 s), it is the newest, and the resume command is printed."""
    out = tmp_path / "once"
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", CPU_CONFIG, RECIPE, *RUN_ARGS,
               "--total_training_steps", "60", "--max_completion_length", "24", "--output_dir", str(out)]
    run = Run(command, new_session=True)
    run.wait_for_steps(6)  # checkpoint-4 is saved before step 5 starts
    sent = time.monotonic()
    os.killpg(run.process.pid, signal.SIGINT)
    output = run.finish(timeout=60)
    elapsed = time.monotonic() - sent
    code = run.process.wait(timeout=30)
    saved = assert_only_complete_checkpoints(out)
    assert "Second interrupt" not in output and "Resume with" in output, output[-3000:]
    newest = max(saved)
    assert 6 <= newest < 60 and f"checkpoint saved to {out / f'checkpoint-{newest}'}" in output
    if _accelerate_version() >= (1, 16):
        # the launcher's 130; it returns once the script is gone: its resume lines come before the SIGKILL, its
        # interpreter teardown after them may not (5.4 s from the Ctrl-C to the launcher's exit once, under load)
        assert code == EXIT_INTERRUPTED and elapsed < 2 * interrupt.LAUNCHER_GRACE_S, (code, elapsed)
        assert "accelerate launch stops this process in 5 s" in output
    else:
        # 1.15's launcher dies of the SIGINT (-2, measured 2026-12-06) or reports the script's 130 as status 1; the
        # script goes on to its checkpoint either way (the output is read until the script closes it)
        assert code in (1, -signal.SIGINT), code


def test_second_sigint_exits_at_once_and_leaves_only_complete_checkpoints(tmp_path):
    """Ctrl-C twice in a terminal: SIGINT to the whole process group (launcher and script), twice. Under accelerate
    1.16 the launcher SIGKILLs the script at the second one, and the first one's stop (the end of the step in progress)
    may come before it: the checkpoints on disk must be complete either way."""
    out = tmp_path / "twice"
    # 24-token completions: a generation batch (2 steps) lasts long enough for the second Ctrl-C to land inside it
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", CPU_CONFIG, RECIPE, *RUN_ARGS,
               "--total_training_steps", "60", "--max_completion_length", "24", "--output_dir", str(out)]
    run = Run(command, new_session=True)
    run.wait_for_steps(6)  # checkpoint-4 is saved before step 5 starts
    os.killpg(run.process.pid, signal.SIGINT)
    run.wait_for_text("SIGINT received")  # the first one was taken: the run now finishes its generation batch
    sent = time.monotonic()
    with contextlib.suppress(ProcessLookupError):  # under 1.16 the group may be gone already
        os.killpg(run.process.pid, signal.SIGINT)
    output = run.finish(timeout=30)
    assert time.monotonic() - sent < 10, "the second SIGINT did not end the run at once"
    if _accelerate_version() < (1, 16):
        assert "Second interrupt: exiting now" in output
    assert "Adapter and tokenizer:" not in output
    saved = assert_only_complete_checkpoints(out)
    assert saved and max(saved) < 60
