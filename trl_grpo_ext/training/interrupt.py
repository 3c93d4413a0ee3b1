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
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import sys

from transformers import TrainerCallback

from .. import _trl_compat

EXIT_INTERRUPTED = 130


class GracefulInterrupt(TrainerCallback):
    """Context manager + `TrainerCallback` turning SIGINT / SIGTERM into "save a checkpoint, then stop".

    Args:
        trainer (`transformers.Trainer`): the trainer to stop; the callback adds itself to it.
        signals (`tuple[int, ...]`, defaults to ``(SIGINT, SIGTERM)``): signals handled.

    Attributes:
        stopped (`bool`): training was stopped by a signal.
        checkpoint (`str | None`): the checkpoint saved on the way out.
    """

    def __init__(self, trainer, signals=(signal.SIGINT, signal.SIGTERM)):
        self.trainer = trainer
        self.signals = signals
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
        if self.requested:  # second signal: leave now, never leave a half-written checkpoint behind
            if self._saving_dir and os.path.isdir(self._saving_dir):
                shutil.rmtree(self._saving_dir, ignore_errors=True)
            print("\nSecond interrupt: exiting now. The last complete checkpoint is intact.", file=sys.stderr, flush=True)
            os._exit(EXIT_INTERRUPTED)
        self.requested = True
        print(
            f"\n{signal.Signals(signum).name} received: saving a checkpoint after this optimizer step, then stopping "
            "(send it again to exit at once).",
            file=sys.stderr,
            flush=True,
        )

    # -- callback ------------------------------------------------------------------------------------------------
    def on_step_end(self, args, state, control, **kwargs):
        checkpoint = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
        if self._any_rank_requested():  # every rank calls it every step: it is a collective
            left = micro_batches_to_generation_boundary(
                _trl_compat.micro_batches_done(self.trainer), args.steps_per_generation, getattr(args, "num_iterations", 1))
            if state.max_steps and state.global_step >= state.max_steps:
                pass  # the last step: the run ends normally and saves its final adapter
            elif left:
                self._announce_wait(state.global_step, left, args.gradient_accumulation_steps)
            else:
                self.stopped = True
                control.should_save = True  # the stop itself is set in on_save, after the checkpoint is written
        if control.should_save:  # this step's save (ours or a periodic one) writes here until on_save
            self._saving_dir = checkpoint
        return control

    def on_save(self, args, state, control, **kwargs):
        if self.stopped:
            # Set only now: the checkpoint stores the TrainerControl flags, and a stop flag saved in it would end a
            # resumed run after one step when `restore_callback_states_from_checkpoint=True`.
            control.should_training_stop = True
            self.checkpoint = self._saving_dir
        self._saving_dir = None
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
