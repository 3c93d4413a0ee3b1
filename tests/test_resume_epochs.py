"""Resume from every checkpoint of a 3-epoch run, in every zero-variance mode: the same history as without a stop.

One process, in this test process (about 6 s per mode on 2 cores). The 2-process check is in
tests/test_resume_epochs_multiproc.py. The task and the recording reward are in tests/resume_epochs_common.py: 4
prompts, 2 per step, so a checkpoint every step covers both epoch boundaries (checkpoints 2 and 4) and the middle of
every epoch (1, 3, 5).
"""

from pathlib import Path

import pytest
import torch
from resume_epochs_common import G, RecordingReward, step_log, trainer, trl_prompt_order
from safetensors.torch import load_file

from trl_grpo_ext.training.sampling import EpochRepeatSampler

TOTAL_STEPS = 6  # 3 epochs × 2 steps


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread: CPU kernels then give bit-identical results for identical inputs."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _prompt_ids(calls, from_step: int = 0, stride: int = G) -> list[tuple[int, list[int]]]:
    """(optimizer step, prompt ids of the call, one per group of ``stride`` rows) of every reward call from
    ``from_step`` on."""
    return [(step, ids[::stride]) for step, ids, _ in calls if step >= from_step]


def _adapter(run_dir: Path) -> dict:
    return load_file(str(run_dir / f"checkpoint-{TOTAL_STEPS}" / "adapter_model.safetensors"))


MODES = {"off": {}, "mask": {}, "resample": {},
         # the new options for hard prompts: the rollout budget's first round has G / 2 = 2 rows per prompt
         "mask+budget+signal": {"rollout_budget": "adaptive", "zero_variance_signal": "entropy"},
         "off+signal": {"zero_variance_signal": "entropy"}}


@pytest.mark.parametrize("mode", list(MODES))
def test_resume_from_every_checkpoint_of_every_epoch(tmp_path, mode):
    reward = RecordingReward()
    settings = dict(MODES[mode], zero_variance_filter=mode.split("+")[0])
    reference = trainer(tmp_path / "uninterrupted", reward, **settings)
    reference.train()
    assert reference.state.global_step == TOTAL_STEPS
    # the uninterrupted run walks TRL's own order, a new permutation each epoch (worked out in trl_prompt_order); the
    # first reward call of a step scores the sampler's prompts (resample's extra rounds come after it)
    first_calls = {}
    for step, ids in _prompt_ids(reward.calls, stride=G // 2 if "budget" in mode else G):
        first_calls.setdefault(step, ids)
    assert list(first_calls.values()) == trl_prompt_order(3)
    expected_adapter = _adapter(tmp_path / "uninterrupted")
    assert any("lora_B" in name and bool(t.abs().sum()) for name, t in expected_adapter.items())  # it trained

    for checkpoint in range(1, TOTAL_STEPS):
        resumed_reward = RecordingReward()
        out = tmp_path / f"resumed-{checkpoint}"
        resumed = trainer(out, resumed_reward, **settings)
        resumed.train(resume_from_checkpoint=str(tmp_path / "uninterrupted" / f"checkpoint-{checkpoint}"))
        where = f"{mode}, resumed from checkpoint-{checkpoint}"
        # every reward call after the checkpoint (the resample rounds too): same step, prompts and rewards
        assert resumed_reward.calls == [c for c in reward.calls if c[0] >= checkpoint], where
        assert step_log(resumed) == step_log(reference), where  # the logged reward, loss, grad norm of every step
        adapter = _adapter(out)
        assert adapter.keys() == expected_adapter.keys()
        assert all(torch.equal(adapter[k], expected_adapter[k]) for k in adapter), where
        if mode == "resample":  # the running uniform-fraction estimate that sizes the rounds was restored too
            assert (resumed.zero_variance.fraction_estimate.state_dict()
                    == reference.zero_variance.fraction_estimate.state_dict()), where
        if "budget" in mode:  # the pass-rate history that splits the completions was restored too
            assert resumed.zero_variance.pass_rates.state_dict() == reference.zero_variance.pass_rates.state_dict()


def test_sampler_order_is_a_function_of_seed_and_epoch():
    """Epoch e of a fresh sampler after set_epoch(e) equals epoch e of one sampler iterated from the start (TRL's
    order), and without set_epoch each iteration is the next epoch."""
    data = list(range(7))
    settings = dict(mini_repeat_count=2, batch_size=3, repeat_count=2, seed=5)
    walked = EpochRepeatSampler(data, **settings)
    epochs = [list(walked) for _ in range(3)]
    generator = torch.Generator().manual_seed(5)
    for epoch in range(3):
        order = torch.randperm(7, generator=generator).tolist()
        chunks = [order[0:3], order[3:6]]  # the partial chunk [order[6]] is dropped
        assert epochs[epoch] == [i for chunk in chunks for _ in range(2) for i in chunk for _ in range(2)]
        fresh = EpochRepeatSampler(data, **settings)
        fresh.set_epoch(epoch)
        assert list(fresh) == epochs[epoch]
    assert epochs[0] != epochs[1]


def test_sampler_refuses_shuffle_without_seed():
    with pytest.raises(ValueError, match="needs a seed"):
        EpochRepeatSampler(list(range(4)), mini_repeat_count=2, seed=None)
