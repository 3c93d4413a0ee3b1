"""Stop a run on SIGINT / SIGTERM with a checkpoint to resume from, and exit at once on a second signal.

First signal: training finishes the optimizer step in progress, saves a full checkpoint (adapter, optimizer,
scheduler, RNG state, trainer state, the plan) and stops; the recipe prints the resume command and exits with 130.
When one generation batch serves several optimizer steps (``num_iterations`` > 1, or ``steps_per_generation`` >
``gradient_accumulation_steps``), the stop waits for the optimizer step that uses the batch up: TRL does not save its
buffered completions, so a resume from inside a generation batch would generate again and shift every later generation
by the steps left over (see docs/resume.md). Second signal: the process exits at once; a checkpoint being written at
that moment (the stop's own, or a periodic one) is deleted, so the newest checkpoint on disk is always a complete one.
With several processes the stop decision is reduced across ranks at every optimizer step (one scalar all-reduce), so
every rank stops at the same step.

Under accelerate >= 1.16's launcher (``accelerate launch`` of one process) its SIGTERM starts a deadline: that
launcher answers Ctrl-C (and a SIGTERM of its own) by sending SIGTERM to the script and SIGKILL `LAUNCHER_GRACE_S`
later. Its SIGTERM after the terminal's SIGINT is the same interrupt, not a second one (a SIGINT sent to the script
alone starts no deadline: the launcher kills nothing then); the stop then comes at the end of the step in
progress (inside a generation batch too), its checkpoint is written only if the longest save seen so far fits before
the deadline, and a watchdog thread deletes a checkpoint still being written and exits just before the SIGKILL is due.
The newest complete checkpoint is never touched, and no partial one is left behind.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import sys
import threading
import time

from transformers import TrainerCallback

from .. import _trl_compat

EXIT_INTERRUPTED = 130
#: accelerate >= 1.16's launcher: seconds from its SIGTERM to its SIGKILL (``accelerate/commands/launch.py``,
#: ``_terminate_process_tree``: ``psutil.wait_procs(processes, timeout=5)``, then ``kill()``).
LAUNCHER_GRACE_S = 5.0
#: What the watchdog keeps of that grace to delete a checkpoint still being written and exit [seconds].
KILL_MARGIN_S = 0.75


def launcher_grace(environ=None, accelerate_version: str | None = None) -> float | None:
    """Seconds between the first signal and the launcher's SIGKILL: `LAUNCHER_GRACE_S` under accelerate >= 1.16's
    simple launcher (``accelerate launch`` of one process: it sets ``ACCELERATE_USE_CPU``; torchrun's agent sets
    ``TORCHELASTIC_RUN_ID`` and has its own ``--shutdown_timeout``), else None (no deadline: accelerate < 1.16 waits
    for the script, and a script run with ``python`` has no launcher)."""
    environ = os.environ if environ is None else environ
    if "ACCELERATE_USE_CPU" not in environ or "TORCHELASTIC_RUN_ID" in environ:
        return None
    if accelerate_version is None:
        from importlib.metadata import version

        accelerate_version = version("accelerate")
    major_minor = tuple(int(part) for part in accelerate_version.split(".")[:2] if part.isdigit())
    return LAUNCHER_GRACE_S if major_minor >= (1, 16) else None


class GracefulInterrupt(TrainerCallback):
    """Context manager + `TrainerCallback` turning SIGINT / SIGTERM into "save a checkpoint, then stop".

    Args:
        trainer (`transformers.Trainer`): the trainer to stop; the callback adds itself to it.
        signals (`tuple[int, ...]`, defaults to ``(SIGINT, SIGTERM)``): signals handled.
        grace (`float`, *optional*): seconds from a SIGTERM to the launcher's SIGKILL; defaults to `launcher_grace()`
            (5 under accelerate >= 1.16's launcher, else none: no deadline).

    Attributes:
        stopped (`bool`): training was stopped by a signal.
        checkpoint (`str | None`): the checkpoint saved on the way out.
        deadline (`float | None`): `time.monotonic()` of the launcher's SIGKILL, once its SIGTERM came.
        longest_save (`float`): the longest checkpoint save of the run so far [seconds].
    """

    def __init__(self, trainer, signals=(signal.SIGINT, signal.SIGTERM), grace: float | None = None):
        self.trainer = trainer
        self.signals = signals
        self.grace = launcher_grace() if grace is None else grace  # seconds to the launcher's SIGKILL, or None
        self.deadline: float | None = None  # time.monotonic() by which the process must be gone
        self.longest_save = 0.0  # the longest checkpoint save of this run so far [seconds]
        self._save_started: float | None = None
        self.requested = False
        self.stopped = False
        self.checkpoint: str | None = None
        self._saving_dir: str | None = None
        self._waiting_announced = False
        self._previous = {}

    # -- context manager -----------------------------------------------------------------------------------------
    def __enter__(self):
        for sig in self.signals:
            self._previous[sig] = signal.signal(sig, self._handle)
        self.trainer.add_callback(self)
        return self

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self.trainer.remove_callback(self)
        return False

    def _handle(self, signum, frame):
        launcher_kill = bool(self.grace) and signum == signal.SIGTERM and self.deadline is None
        if self.requested and not launcher_kill:  # second signal: leave now, never leave a half-written checkpoint
            self._exit_now("\nSecond interrupt: exiting now. The last complete checkpoint is intact.")
        if launcher_kill:  # accelerate >= 1.16's SIGTERM (after the terminal's SIGINT, or alone): SIGKILL follows
            self.deadline = time.monotonic() + self.grace
            threading.Thread(target=self._watch, name="interrupt-deadline", daemon=True).start()
            print(f"\n{'' if self.requested else 'SIGTERM received: '}accelerate launch stops this process in "
                  f"{self.grace:g} s; saving a checkpoint after this optimizer step if its save fits in that time, then "
                  "stopping.", file=sys.stderr, flush=True)
            self.requested = True
            return
        self.requested = True
        print(
            f"\n{signal.Signals(signum).name} received: saving a checkpoint after this optimizer step, then stopping "
            "(send it again to exit at once).",
            file=sys.stderr,
            flush=True,
        )

    def _exit_now(self, message: str) -> None:
        """Delete a checkpoint being written (never the complete ones), say ``message`` and end the process (130)."""
        saving = self._saving_dir
        if saving and os.path.isdir(saving):
            moved = f"{saving}.partial"  # out of the way of `last` at once; the writer's next file fails
            try:
                os.replace(saving, moved)
            except OSError:
                moved = saving
            shutil.rmtree(moved, ignore_errors=True)
        print(message, file=sys.stderr, flush=True)
        os._exit(EXIT_INTERRUPTED)

    def _watch(self) -> None:
        """Until the deadline less `KILL_MARGIN_S`: then exit before the launcher's SIGKILL can cut a save short."""
        while not self.checkpoint:
            left = self.deadline - KILL_MARGIN_S - time.monotonic()
            if left <= 0:
                what = "deleted the checkpoint it was writing; " if self._saving_dir else ""
                self._exit_now(f"The step in progress and its save did not fit in accelerate launch's {self.grace:g} s: "
                               f"{what}exiting before its SIGKILL. The last complete checkpoint is intact; resume with "
                               "--resume_from_checkpoint last.")
                return
            time.sleep(min(left, 0.05))

    # -- callback ------------------------------------------------------------------------------------------------
    def on_step_end(self, args, state, control, **kwargs):
        checkpoint = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
        if self._any_rank_requested():  # every rank calls it every step: it is a collective
            left = micro_batches_to_generation_boundary(
                _trl_compat.micro_batches_done(self.trainer), args.steps_per_generation, getattr(args, "num_iterations", 1))
            if state.max_steps and state.global_step >= state.max_steps and self.deadline is None:
                pass  # the last step: the run ends normally and saves its final adapter
            elif left and self.deadline is None:  # (with a deadline, no time to wait: the resume regenerates it)
                self._announce_wait(state.global_step, left, args.gradient_accumulation_steps)
            elif self.deadline is not None and time.monotonic() + self.longest_save > self.deadline - KILL_MARGIN_S:
                self._exit_now(f"Optimizer step {state.global_step} ended, but its save (up to {self.longest_save:.1f} "
                               f"s so far) does not fit in accelerate launch's {self.grace:g} s: exiting without it. "
                               "The last complete checkpoint is intact; resume with --resume_from_checkpoint last.")
            else:
                self.stopped = True
                control.should_save = True  # the stop itself is set in on_save, after the checkpoint is written
        if control.should_save:  # this step's save (ours or a periodic one) writes here until on_save
            self._saving_dir, self._save_started = checkpoint, time.monotonic()
        return control

    def on_save(self, args, state, control, **kwargs):
        if self._save_started is not None:
            self.longest_save = max(self.longest_save, time.monotonic() - self._save_started)
        if self.stopped:
            # Set only now: the checkpoint stores the TrainerControl flags, and a stop flag saved in it would end a
            # resumed run after one step when `restore_callback_states_from_checkpoint=True`.
            control.should_training_stop = True
            self.checkpoint = self._saving_dir
        self._saving_dir = self._save_started = None
        return control

    def _announce_wait(self, global_step: int, micro_batches_left: int, gradient_accumulation_steps: int) -> None:
        if self._waiting_announced or not self.trainer.accelerator.is_main_process:
            return
        self._waiting_announced = True
        steps = -(-micro_batches_left // gradient_accumulation_steps)
        print(
            f"Optimizer step {global_step} is inside a generation batch; stopping after {steps} more optimizer "
            f"step(s), when it is used up, so that the resumed run continues exactly.",
            file=sys.stderr,
            flush=True,
        )

    def _any_rank_requested(self) -> bool:
        accelerator = getattr(self.trainer, "accelerator", None)
        if accelerator is None or accelerator.num_processes == 1:
            return self.requested
        import torch

        flag = torch.tensor([1.0 if self.requested else 0.0], device=accelerator.device)
        return bool(accelerator.reduce(flag, reduction="sum").item() > 0)

    def report(self, argv: list[str] | None = None) -> int:
        """Print where the checkpoint is and the command that resumes; return the exit code (130)."""
        argv = list(sys.argv if argv is None else argv)
        if "--resume_from_checkpoint" in argv:
            i = argv.index("--resume_from_checkpoint")
            del argv[i : i + 2]
        command = shlex.join(["accelerate", "launch", *argv, "--resume_from_checkpoint", str(self.checkpoint)])
        if self.trainer.accelerator.is_main_process:
            print(
                f"Training interrupted at optimizer step {self.trainer.state.global_step} of "
                f"{self.trainer.plan.total_steps}; checkpoint saved to {self.checkpoint}.\n"
                f"Resume with (add your accelerate options before the script):\n  {command}",
                flush=True,
            )
        return EXIT_INTERRUPTED


def micro_batches_to_generation_boundary(micro_batches_done: int | None, steps_per_generation: int,
                                         num_iterations: int) -> int:
    """Micro-batches left before TRL generates again: 0 when a resume from here would regenerate nothing too early.

    TRL (`GRPOTrainer._prepare_inputs`) generates one batch every ``steps_per_generation × num_iterations``
    micro-batches, counted from the start of the process (`_trl_compat.micro_batches_done`), and keeps it in memory
    only.

    Args:
        micro_batches_done (`int | None`): `_trl_compat.micro_batches_done` at the end of an optimizer step; `None`
            (not a GRPO trainer) means there is no buffered batch.
        steps_per_generation (`int`): TRL's field [micro-batches per generation batch].
        num_iterations (`int`): TRL's field (μ) [policy updates per generation batch].

    Returns:
        `int` >= 0 [micro-batches].

    Example: ``num_iterations=2``, ``steps_per_generation = gradient_accumulation_steps = 2``: one generation per
    two optimizer steps (4 micro-batches); after optimizer step 5 (10 micro-batches) 2 are left, after step 6 none.
    """
    if micro_batches_done is None:
        return 0
    cycle = steps_per_generation * num_iterations
    return (-micro_batches_done) % cycle


def exit_run(code: int, environ=None) -> None:
    """End the recipe's process with exit status ``code`` (`SystemExit`); in a run of several processes
    (``WORLD_SIZE`` > 1), as a normal exit ends (the non-daemon threads joined, the ``atexit`` handlers run:
    trackers, logging) and after a flush, but without the interpreter's teardown (`os._exit`).

    That teardown can abort after a gloo run whose results are all written ("terminate called without an active
    exception", SIGABRT: gloo's worker threads still hold work objects when the interpreter is finalised,
    pytorch/pytorch#179291), and torchrun then reports the run as failed: seen in 1 of 13 two-process runs of
    tests/test_multiprocess.py on 2026-12-03, after `trainer.end()` had destroyed the process group.

    Args:
        code (`int`): the exit status. environ (`Mapping`, *optional*): default ``os.environ``.
    """
    import atexit
    import threading

    environ = os.environ if environ is None else environ
    if environ.get("WORLD_SIZE", "1") in ("", "1"):
        sys.exit(code)
    for thread in threading.enumerate():  # what a normal exit does first: wait for the non-daemon threads
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()  # then the atexit handlers, while the interpreter is whole
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
