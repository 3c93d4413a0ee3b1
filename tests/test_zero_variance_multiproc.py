"""Resample mode with 2 processes on CPU (torchrun, gloo): the run finishes, bounded, and every rank decides alike.

`accelerate launch --cpu --num_processes 2` silently starts one process, so the test uses `torchrun`, which sets
RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT (`GRPOExtConfig` reads WORLD_SIZE; accelerate picks the gloo backend
for `use_cpu=True`). The worker is tests/zero_variance_worker.py.
"""

import json

import pytest
from factories import run_worker_on_2_processes


@pytest.mark.multiproc
def test_two_processes_resample_with_identical_decisions(tmp_path):
    result = run_worker_on_2_processes("zero_variance_worker.py", str(tmp_path), timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["world_size"] for r in ranks] == [2, 2]

    # identical decisions: same logged zero-variance metrics, same global kept rows, same number of rounds
    assert ranks[0]["history"] == ranks[1]["history"]
    first, second = (r["batches"] for r in ranks)
    assert len(first) == len(second) == 3
    for a, b in zip(first, second):
        assert a["kept"] == b["kept"]
        assert len(a["drawn"]) == len(b["drawn"])
        for share_a, share_b in zip(a["drawn"], b["drawn"]):  # each round: as many prompts on each rank (1 or 2,
            # sized from the zero-variance fraction estimate; at most a share of the generation batch), disjoint shares
            assert 1 <= len(share_a) == len(share_b) <= 2 and not set(share_a) & set(share_b)

    history = ranks[0]["history"]
    assert [entry["step"] for entry in history] == [1, 2, 3]
    # steps 1 and 3: informative groups exist, so every step is filled; the kept rows are exactly the rows whose
    # prompt (on whichever rank holds it) does not ask for the zero-variance target "b"
    for step in (0, 2):
        assert history[step]["zero_variance/frac_uniform_after"] == 0
        held = first[step]["local_zero_variance_target"] + second[step]["local_zero_variance_target"]
        assert first[step]["kept"] == [int(not target) for target in held] == [1] * 16
    assert sum(history[s]["zero_variance/frac_uniform_before"] for s in (0, 2)) > 0  # resampling was needed
    # step 2: constant reward, nothing to find: both rounds spent, every group short, the update skipped on all ranks
    assert history[1]["zero_variance/resample_rounds"] == 2
    assert history[1]["zero_variance/shortfall_groups"] == 4
    assert history[1]["zero_variance/no_update"] == 1.0
    assert first[1]["kept"] == [0] * 16


@pytest.mark.multiproc
def test_two_processes_skip_with_identical_history_and_dropped_rows(tmp_path):
    result = run_worker_on_2_processes("skip_worker.py", str(tmp_path), timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["world_size"] for r in ranks] == [2, 2]
    assert ranks[0]["streaks"] == ranks[1]["streaks"] and len(ranks[0]["streaks"]) == 8  # one history, every prompt
    assert ranks[0]["history"] == ranks[1]["history"]
    assert [r["global_step"] for r in ranks] == [6, 6] == [r["total_steps"] for r in ranks]  # plan == real
    shares = [h["zero_variance/frac_uniform_before"] for h in ranks[0]["history"]]
    assert sum(shares[:2]) / 2 == 0.5 and shares[2:] == [0.0] * 4  # epoch 0: 4 of 8 prompts uniform; then skipped
    # 2 micro-batches per rank per step: 12 each; with the "b" groups of epoch 0 masked, ranks kept different counts
    assert len(ranks[0]["kept_per_micro_batch"]) == len(ranks[1]["kept_per_micro_batch"]) == 12
    dropped = [h["zero_variance/completions_dropped"] for h in ranks[0]["history"]]
    assert dropped[2:] == [0.0] * 4 and sum(dropped[:2]) > 0


@pytest.mark.multiproc
def test_two_processes_split_the_rollout_budget_alike(tmp_path):
    result = run_worker_on_2_processes("budget_worker.py", str(tmp_path), timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["world_size"] for r in ranks] == [2, 2] and [r["global_step"] for r in ranks] == [3, 3]
    # every decision that outlives a step was taken on gathered values: the same on both processes
    assert ranks[0]["pass_rates"] == ranks[1]["pass_rates"] and ranks[0]["history"] == ranks[1]["history"]
    for step_0, step_1 in zip(ranks[0]["steps"], ranks[1]["steps"]):
        assert step_0["sizes"] == step_1["sizes"]  # the gathered group sizes, in process order
        sizes = step_0["sizes"]
        # 4 prompts, 2 a process; each process splits its own 2 × 4 = 8 completions (at least 2 each)
        assert len(sizes) == 4 and sum(sizes[:2]) == sum(sizes[2:]) == 8 and min(sizes) >= 2
        assert step_0["local_rows"] == step_1["local_rows"] == 8  # the plan's batch shape on every process
    # the history saw every completion: 3 steps × 16
    assert ranks[0]["pass_rates"]["total"][1] == 48
