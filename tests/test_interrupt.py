"""`GracefulInterrupt` without a training run: signal handling, where the stop falls, what a second signal deletes.

The real runs (SIGINT to the recipe, resume, second SIGINT) are in tests/test_resume.py.
"""

import os
import signal
from types import SimpleNamespace

import pytest
from transformers import TrainerControl, TrainerState

from trl_grpo_ext.training import interrupt
from trl_grpo_ext.training.interrupt import EXIT_INTERRUPTED, GracefulInterrupt, micro_batches_to_generation_boundary


class FakeTrainer:
    """What `GracefulInterrupt` reads from a trainer: callbacks, one process, TRL's micro-batch counter `_step`."""

    def __init__(self):
        self.callbacks = []
        self.accelerator = SimpleNamespace(num_processes=1, is_main_process=True)
        self._step = 0

    def add_callback(self, callback):
        self.callbacks.append(callback)

    def remove_callback(self, callback):
        self.callbacks.remove(callback)


def training_args(tmp_path, gradient_accumulation_steps=2, steps_per_generation=2, num_iterations=1):
    return SimpleNamespace(output_dir=str(tmp_path), gradient_accumulation_steps=gradient_accumulation_steps,
                           steps_per_generation=steps_per_generation, num_iterations=num_iterations)


@pytest.mark.parametrize(
    ("done", "steps_per_generation", "num_iterations", "left"),
    [
        (None, 2, 2, 0),  # not a GRPO trainer: nothing buffered
        (4, 2, 1, 0),  # one generation per optimizer step (GA 2): always a boundary
        (10, 2, 2, 2),  # μ=2, GA=2: a generation every 4 micro-batches; 10 done -> 2 left
        (12, 2, 2, 0),
        (2, 3, 1, 1),  # steps_per_generation 3, GA 2: generations at micro-batches 0, 3, 6
        (4, 3, 1, 2),
        (6, 3, 1, 0),
        (9, 1, 4, 3),  # GA 1, μ=4: generations at 0, 4, 8, 12
    ],
)
def test_micro_batches_to_generation_boundary(done, steps_per_generation, num_iterations, left):
    assert micro_batches_to_generation_boundary(done, steps_per_generation, num_iterations) == left


def test_stop_waits_for_the_end_of_the_generation_batch(tmp_path, capsys):
    trainer = FakeTrainer()
    callback = GracefulInterrupt(trainer)
    args = training_args(tmp_path, num_iterations=2)  # one generation serves optimizer steps 5-6
    callback.requested = True

    trainer._step = 10  # after optimizer step 5 (GA 2)
    control = callback.on_step_end(args, TrainerState(global_step=5), TrainerControl())
    assert not control.should_training_stop and not control.should_save and not callback.stopped
    assert "stopping after 1 more optimizer step(s)" in capsys.readouterr().err

    trainer._step = 12
    control = callback.on_step_end(args, TrainerState(global_step=6), TrainerControl())
    assert control.should_save and callback.stopped
    # the checkpoint stores TrainerControl's flags: the stop flag is set after it is written, never saved in it
    assert not control.should_training_stop
    control = callback.on_save(args, TrainerState(global_step=6), control)
    assert control.should_training_stop
    assert callback.checkpoint == os.path.join(str(tmp_path), "checkpoint-6")


def test_a_signal_during_the_last_step_lets_the_run_finish_normally(tmp_path):
    callback = GracefulInterrupt(FakeTrainer())
    callback.requested = True
    control = callback.on_step_end(training_args(tmp_path), TrainerState(global_step=12, max_steps=12),
                                   TrainerControl())
    assert not callback.stopped and not control.should_save  # transformers' own end-of-training save follows


def test_periodic_save_is_tracked_but_is_not_the_interrupt_checkpoint(tmp_path):
    callback = GracefulInterrupt(FakeTrainer())
    args = training_args(tmp_path)
    control = TrainerControl(should_save=True)  # set by DefaultFlowCallback at save_steps, before this callback
    callback.on_step_end(args, TrainerState(global_step=4), control)
    assert callback._saving_dir == os.path.join(str(tmp_path), "checkpoint-4")  # deleted by a second signal
    callback.on_save(args, TrainerState(global_step=4), control)
    assert callback._saving_dir is None and callback.checkpoint is None and not callback.stopped


def test_signals_install_and_restore_handlers_and_second_signal_removes_the_partial_checkpoint(tmp_path, monkeypatch,
                                                                                             capsys):
    def fake_exit(code):
        raise SystemExit(code)

    monkeypatch.setattr(interrupt.os, "_exit", fake_exit)
    complete = tmp_path / "checkpoint-4"
    complete.mkdir()
    (complete / "trainer_state.json").write_text("{}")
    partial = tmp_path / "checkpoint-6"
    partial.mkdir()
    (partial / "adapter_model.safetensors").write_bytes(b"half")
    previous = signal.getsignal(signal.SIGINT)
    trainer = FakeTrainer()
    with pytest.raises(SystemExit) as exited:
        with GracefulInterrupt(trainer) as callback:
            assert callback in trainer.callbacks
            signal.raise_signal(signal.SIGINT)
            assert callback.requested and not callback.stopped
            assert "SIGINT received" in capsys.readouterr().err
            callback._saving_dir = str(partial)  # the stop's checkpoint is being written
            signal.raise_signal(signal.SIGINT)
    assert exited.value.code == EXIT_INTERRUPTED
    assert not partial.exists() and (complete / "trainer_state.json").is_file()
    assert signal.getsignal(signal.SIGINT) is previous and callback not in trainer.callbacks
    assert "Second interrupt: exiting now" in capsys.readouterr().err


def test_sigterm_is_handled_like_sigint(tmp_path):
    with GracefulInterrupt(FakeTrainer()) as callback:
        signal.raise_signal(signal.SIGTERM)
        assert callback.requested


@pytest.mark.parametrize(("environ", "version", "grace"), [
    ({"ACCELERATE_USE_CPU": "True"}, "1.16.0", 5.0),  # accelerate launch (one process) of 1.16: SIGKILL 5 s later
    ({"ACCELERATE_USE_CPU": "False"}, "1.17.2", 5.0),
    ({"ACCELERATE_USE_CPU": "True"}, "1.15.0", None),  # 1.15's launcher waits for the script
    ({"ACCELERATE_USE_CPU": "True", "TORCHELASTIC_RUN_ID": "x"}, "1.16.0", None),  # torchrun's agent: its own timeout
    ({}, "1.16.0", None),  # python recipes/grpo_qlora.py: no launcher
])
def test_launcher_grace_is_accelerate_1_16_s_simple_launcher_only(environ, version, grace):
    assert interrupt.launcher_grace(environ, version) == grace


def test_under_a_deadline_the_launcher_s_sigterm_is_the_same_interrupt_and_the_step_in_progress_stops(tmp_path,
                                                                                                    capsys):
    """Ctrl-C under accelerate 1.16: SIGINT, then the launcher's SIGTERM; the stop is the end of this step even inside
    a generation batch (no time to wait for its end), and the save starts because it fits."""
    trainer = FakeTrainer()
    with GracefulInterrupt(trainer, grace=60.0) as callback:
        signal.raise_signal(signal.SIGINT)
        signal.raise_signal(signal.SIGTERM)  # the launcher's: not a second interrupt (that would exit the test)
        assert callback.requested and callback.deadline is not None
        assert "accelerate launch stops this process in 60 s" in capsys.readouterr().err
        trainer._step = 10  # after optimizer step 5, inside the generation batch of steps 5-6 (num_iterations 2)
        control = callback.on_step_end(training_args(tmp_path, num_iterations=2), TrainerState(global_step=5),
                                       TrainerControl())
        assert control.should_save and callback.stopped
        callback.on_save(training_args(tmp_path), TrainerState(global_step=5), control)
        assert callback.checkpoint == os.path.join(str(tmp_path), "checkpoint-5")


def test_a_sigint_to_the_script_alone_starts_no_deadline(tmp_path):
    """Under the launcher, `kill -INT <script>`: the launcher kills nothing, so the stop waits as without one."""
    with GracefulInterrupt(FakeTrainer(), grace=60.0) as callback:
        signal.raise_signal(signal.SIGINT)
        assert callback.requested and callback.deadline is None


def test_under_a_deadline_a_save_that_does_not_fit_is_not_started(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(interrupt.os, "_exit", lambda code: (_ for _ in ()).throw(SystemExit(code)))
    callback = GracefulInterrupt(FakeTrainer(), grace=60.0)
    callback.requested, callback.deadline = True, interrupt.time.monotonic() + 3.0
    callback.longest_save = 2.5  # 2.5 s of save, 3 s left, 0.75 s kept to exit: no
    with pytest.raises(SystemExit) as exited:
        callback.on_step_end(training_args(tmp_path), TrainerState(global_step=7), TrainerControl())
    assert exited.value.code == EXIT_INTERRUPTED and not (tmp_path / "checkpoint-7").exists()
    assert "its save (up to 2.5 s so far) does not fit in accelerate launch's 60 s" in capsys.readouterr().err


def test_the_watchdog_deletes_a_save_still_running_at_the_deadline_and_never_a_complete_checkpoint(tmp_path,
                                                                                                   monkeypatch):
    exits = []
    monkeypatch.setattr(interrupt.os, "_exit", exits.append)
    complete = tmp_path / "checkpoint-4"
    complete.mkdir()
    (complete / "trainer_state.json").write_text("{}")
    partial = tmp_path / "checkpoint-6"
    partial.mkdir()
    (partial / "adapter_model.safetensors").write_bytes(b"half")
    callback = GracefulInterrupt(FakeTrainer(), grace=60.0)
    callback._saving_dir = str(partial)
    callback.deadline = interrupt.time.monotonic() + interrupt.KILL_MARGIN_S + 0.2  # 0.2 s before the watchdog acts
    callback._watch()
    assert exits == [EXIT_INTERRUPTED]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-4"]
    assert (complete / "trainer_state.json").is_file()


EXIT_SCRIPT = """
import atexit, sys, threading, time
from trl_grpo_ext.training.interrupt import exit_run
atexit.register(lambda: open(sys.argv[1], "a").write("atexit ran"))
threading.Thread(target=lambda: (time.sleep(0.5), open(sys.argv[1], "a").write("thread ended, "))).start()
print("written before the exit", end="")  # no newline: left in the buffer until a flush
exit_run(3)
print("never printed")
"""


@pytest.mark.parametrize("world_size", [None, "1", "2"])
def test_exit_run_returns_the_status_after_the_atexit_handlers_and_a_flush(tmp_path, world_size):
    """The recipe's exit: the status given, a running non-daemon thread waited for, the atexit handlers run and stdout
    flushed, with or without WORLD_SIZE (with WORLD_SIZE 2 through os._exit, which skips the interpreter's teardown)."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "WORLD_SIZE"}
    if world_size is not None:
        env["WORLD_SIZE"] = world_size
    marker = tmp_path / "atexit.txt"
    result = subprocess.run([sys.executable, "-c", EXIT_SCRIPT, str(marker)], capture_output=True, text=True,
                            env=env, timeout=60)
    assert result.returncode == 3, result.stderr
    assert result.stdout == "written before the exit"
    assert marker.read_text() == "thread ended, atexit ran"  # the non-daemon thread joined first, as a normal exit does


def test_exit_run_with_several_processes_skips_the_interpreter_teardown(tmp_path):
    """What distinguishes the WORLD_SIZE > 1 path: an object finalised only at interpreter teardown is not."""
    import subprocess
    import sys

    script = EXIT_SCRIPT.replace("exit_run(3)", "class Late:\n    def __del__(self):\n        print(' finalised', end='')\n"
                                 "late = Late()\nexit_run(3)")
    outputs = {}
    for world_size in ("1", "2"):
        result = subprocess.run([sys.executable, "-c", script, str(tmp_path / f"m{world_size}")], capture_output=True,
                                text=True, env={**os.environ, "WORLD_SIZE": world_size}, timeout=60)
        outputs[world_size] = (result.returncode, result.stdout)
    assert outputs == {"1": (3, "written before the exit finalised"), "2": (3, "written before the exit")}
