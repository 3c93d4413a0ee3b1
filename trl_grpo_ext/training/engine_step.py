"""The zero-variance filter's guarded optimizer step under DeepSpeed, where the engine owns the step.

Under DDP transformers calls ``optimizer.step()`` after the last micro-batch of an accumulation window has run its
``training_step``; the trainer closes the window there (`ZeroVarianceFilter.end_window`: did any process keep a row?)
and `ZeroVarianceFilter.guard_step` skips the step that follows. Under DeepSpeed accelerate's ``backward`` calls
``engine.step()`` itself, inside the last micro-batch's ``training_step``: the step runs *before* the window would be
closed, so the plain guard would apply each window's decision to the next step (measured: the all-uniform steps 1 and 2
of a run were skipped as steps 2 and 3). DeepSpeed's ZeRO optimizers also call the wrapped torch optimizer's ``step``
once per parameter group (ZeRO-1/2) or sub-group (ZeRO-3).

`EngineStepGuard` closes the window at the first call of the torch optimizer's ``step`` in each optimizer step (the
kept-row count is complete then: every micro-batch's loss, which counts its kept rows, ran before its backward) and
applies the decision to every call of that optimizer step. Everything else stays the engine's: gradient clipping, the
copy of the (unchanged) float32 partitions to the model's parameters, ``zero_grad`` and the learning-rate scheduler,
which steps as it does under DDP (docs/zero_variance.md). Weights and optimizer state stay bit-identical on a skipped
step (tests/test_engines_multiproc.py).
"""

from __future__ import annotations

from collections.abc import Callable


class EngineStepGuard:
    """`ZeroVarianceFilter.guard_step` for an engine that calls the optimizer's ``step`` inside ``backward``.

    Args:
        zero_variance (`ZeroVarianceFilter`): the run's filter (its ``end_window``, ``guard_step`` and
            ``skip_next_step``).
        step_count (`callable`): () -> the number of optimizer steps completed so far (the trainer's
            ``state.global_step``); constant during one optimizer step, the same on every process.
    """

    def __init__(self, zero_variance, step_count: Callable[[], int]):
        self.zero_variance, self.step_count = zero_variance, step_count
        self._closed_at: int | None = None  # step_count() of the optimizer step whose window was closed
        self._skipping = False

    def wrap(self, step: Callable) -> Callable:
        """``step`` (the torch optimizer's), run or skipped as a whole for each optimizer step."""
        guarded = self.zero_variance.guard_step(step)  # counts and logs the skip once per optimizer step

        def engine_guarded_step(*args, **kwargs):
            count = self.step_count()
            if count != self._closed_at:  # first call of this optimizer step, on every process: close the window
                self._closed_at = count
                self.zero_variance.end_window()  # a collective reduce
                self._skipping = self.zero_variance.skip_next_step
                return guarded(*args, **kwargs)
            return None if self._skipping else step(*args, **kwargs)

        return engine_guarded_step
