"""`engine_step.EngineStepGuard`: the zero-variance guard when the engine calls the optimizer's step inside backward
(DeepSpeed), on one process with plain tensors. The 2-process runs are in tests/test_engines_multiproc.py."""

import torch

from trl_grpo_ext.training.engine_step import EngineStepGuard
from trl_grpo_ext.zero_variance import ZeroVarianceFilter


def _micro_batch(filter_, kept_rows: int, rows: int = 4) -> None:
    """One micro-batch's loss, as the trainer computes it: scale_loss counts its kept rows."""
    keep = torch.tensor([1.0] * kept_rows + [0.0] * (rows - kept_rows))
    filter_.scale_loss(torch.tensor(1.0), {"zero_variance_keep": keep, "zero_variance_loss_scale": torch.tensor(1.0)})


def test_each_step_is_decided_by_its_own_window_and_skipped_as_a_whole():
    zero_variance = ZeroVarianceFilter("mask", 4, torch.ones(1))
    calls, steps_done = [], [0]
    guard = EngineStepGuard(zero_variance, lambda: steps_done[0])
    step = guard.wrap(lambda: calls.append(steps_done[0]))
    # DeepSpeed's order: the micro-batches' losses, then (inside the last backward) one call per parameter group
    for kept_per_micro_batch in ([0, 0], [0, 3], [0, 0], [2, 0]):
        for kept in kept_per_micro_batch:
            _micro_batch(zero_variance, kept)
        for _group in range(3):
            step()
        steps_done[0] += 1
    assert calls == [1, 1, 1, 3, 3, 3]  # steps 2 and 4 ran (all their groups); 1 and 3 kept nothing: skipped whole
    assert zero_variance.skipped_updates == 2
    assert zero_variance.own_metrics["zero_variance/no_update"] == [1.0, 0.0, 1.0, 0.0]  # once per optimizer step
    assert "zero_variance/skipped_updates" not in zero_variance.own_metrics  # a running count TRL would average


def test_the_plain_guard_in_that_order_skips_the_wrong_step():
    """Why EngineStepGuard exists: with the window closed after the engine stepped (training_step's end_window),
    the plain guard applies each step's decision to the next one."""
    zero_variance = ZeroVarianceFilter("mask", 4, torch.ones(1))
    calls = []
    step = zero_variance.guard_step(lambda: calls.append(len(calls)))
    ran = []
    for kept in (0, 3, 3):  # step 1 kept nothing
        _micro_batch(zero_variance, kept)
        before = len(calls)
        step()
        ran.append(len(calls) > before)
        zero_variance.end_window()  # after training_step returned: too late for this step
    assert ran == [True, False, True]  # step 1 (nothing kept) updated, step 2 (rows kept) was skipped
