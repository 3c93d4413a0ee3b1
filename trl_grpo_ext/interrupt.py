"""Stop a run on SIGINT / SIGTERM with a checkpoint to resume from, and exit at once on a second signal.

First signal: training finishes the optimizer step in progress, saves a full checkpoint (adapter, optimizer,
scheduler, RNG state, trainer state, the plan) and stops; the recipe prints the resume command and exits with 130.
Second signal: the process exits at once; a checkpoint being written at that moment is deleted, so the newest
checkpoint on disk is always a complete one. With several processes the stop decision is reduced across ranks at
every optimizer step (one scalar all-reduce), so every rank stops at the same step.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import sys

from transformers import TrainerCallback

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
        if self._any_rank_requested():
            self.stopped = True
            control.should_save = True
            control.should_training_stop = True
            self._saving_dir = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
        return control

    def on_save(self, args, state, control, **kwargs):
        if self.stopped:
            self.checkpoint, self._saving_dir = self._saving_dir, None
        return control

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
