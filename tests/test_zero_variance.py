"""Tests for trl_grpo_ext.zero_variance's pure tensor functions (groups, merge, resample source).

Expected values are worked out by hand in the comments; nothing is copied from the code's own output.
"""

import math

import pytest
import torch

from trl_grpo_ext.zero_variance import ResampleSource, fill_zero_variance_groups, masked_loss_scale, weighted_total

NAN = float("nan")
PAD = 99  # pad token id used by the hand-built batches


# --- weighted_total -------------------------------------------------------------------------------------------------
def test_weighted_total_skips_missing_functions_and_keeps_unscorable_rows_nan():
    rewards_per_func = torch.tensor([[1.0, 2.0], [NAN, 3.0], [NAN, NAN], [0.5, NAN], [0.0, 0.0]])
    weights = torch.tensor([2.0, 0.5])
    total = weighted_total(rewards_per_func, weights)
    # 2·1 + 0.5·2 = 3; 0.5·3 = 1.5 (first missing); all missing -> NaN; 2·0.5 = 1 (second missing); 0
    assert total[[0, 1, 3, 4]].tolist() == [3.0, 1.5, 1.0, 0.0]
    assert math.isnan(total[2].item())
    assert total.shape == (5,)


def test_weighted_total_negative_weight():
    # a penalty function with weight -1: 1·1 + (-1)·0.25 = 0.75
    total = weighted_total(torch.tensor([[1.0, 0.25]]), torch.tensor([1.0, -1.0]))
    assert total.tolist() == [0.75]


# --- masked_loss_scale ----------------------------------------------------------------------------------------------
# 16 rows, 4 kept. Row-normalised losses (a mean over rows, or Dr. GRPO's constant B × L_max per row) count the 12
# masked rows in their denominator: × 16/4 = 4 turns the mean over 16 rows into the mean over the 4 kept ones.
# Token-normalised losses divide by kept tokens already (num_items_in_batch recomputed, or bnpo's own mask sum): × 1.
@pytest.mark.parametrize(
    ("loss_type", "expected"),
    [
        ("grpo", 4.0),
        ("sapo", 4.0),
        ("dr_grpo", 4.0),
        ("luspo", 4.0),
        ("dapo", 1.0),
        ("bnpo", 1.0),
        ("cispo", 1.0),
        ("vespo", 1.0),
    ],
)
def test_masked_loss_scale_per_loss_type(loss_type, expected):
    assert masked_loss_scale(loss_type, 16, 4) == expected


@pytest.mark.parametrize(("num_rows", "kept_rows", "expected"), [(8, 8, 1.0), (8, 6, 8 / 6), (32, 1, 32.0)])
def test_masked_loss_scale_row_counts(num_rows, kept_rows, expected):
    assert masked_loss_scale("grpo", num_rows, kept_rows) == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo", "bnpo"])
def test_masked_loss_scale_nothing_kept_is_one(loss_type):
    # the loss is already 0 then (every row masked) and the optimizer step is skipped; no division by zero
    assert masked_loss_scale(loss_type, 16, 0) == 1.0


def test_masked_loss_scale_covers_every_trl_loss_type():
    # TRL 1.16's `loss_type` help lists the supported values; each must be either rescaled or token-normalised.
    from trl import GRPOConfig

    help_text = GRPOConfig.__dataclass_fields__["loss_type"].metadata["help"]
    for loss_type in ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo"):
        assert f"'{loss_type}'" in help_text
        masked_loss_scale(loss_type, 4, 2)  # must not raise


def test_masked_loss_scale_unknown_loss_type():
    with pytest.raises(ValueError, match="loss_type='gspo_v2'"):
        masked_loss_scale("gspo_v2", 4, 2)


# --- fill_zero_variance_groups --------------------------------------------------------------------------------------------
# G = 2. The batch holds 3 groups (rows 0-1, 2-3, 4-5); groups 0 and 2 have zero variance. The candidate holds 2 groups;
# its group 0 has zero variance, group 1 (rows 2-3) informative. So batch group 0 takes candidate group 1, batch group 2
# keeps zero variance (no donor left), and one group is filled.
def _batch():
    return {
        # prompts left-padded to width 3
        "prompt_ids": torch.tensor([[PAD, 1, 2], [PAD, 1, 2], [3, 4, 5], [3, 4, 5], [PAD, PAD, 6], [PAD, PAD, 6]]),
        "prompt_mask": torch.tensor([[0, 1, 1], [0, 1, 1], [1, 1, 1], [1, 1, 1], [0, 0, 1], [0, 0, 1]]),
        # completions right-padded to width 2
        "completion_ids": torch.tensor([[10, PAD], [11, 12], [13, 14], [15, PAD], [16, 17], [18, PAD]]),
        "completion_mask": torch.tensor([[1, 0], [1, 1], [1, 1], [1, 0], [1, 1], [1, 0]]),
        "old_per_token_logps": torch.tensor(
            [[-1.0, 0.0], [-1.1, -1.2], [-1.3, -1.4], [-1.5, 0.0], [-1.6, -1.7], [-1.8, 0.0]]
        ),
        "advantages": torch.tensor([0.0, 0.0, 0.5, -0.5, 0.0, 0.0]),
        "zero_variance_rewards": torch.tensor([1.0, 1.0, 2.0, 0.0, 3.0, 3.0]),
        "num_items_in_batch": torch.tensor(9),
    }


def _candidate():
    return {
        # prompts left-padded to width 4 (one longer than the batch's)
        "prompt_ids": torch.tensor([[7, 7, 7, 7], [7, 7, 7, 7], [PAD, 8, 8, 8], [PAD, 8, 8, 8]]),
        "prompt_mask": torch.tensor([[1, 1, 1, 1], [1, 1, 1, 1], [0, 1, 1, 1], [0, 1, 1, 1]]),
        # completions right-padded to width 3 (one longer than the batch's)
        "completion_ids": torch.tensor([[20, PAD, PAD], [21, PAD, PAD], [22, 23, 24], [25, PAD, PAD]]),
        "completion_mask": torch.tensor([[1, 0, 0], [1, 0, 0], [1, 1, 1], [1, 0, 0]]),
        "old_per_token_logps": torch.tensor(
            [[-2.0, 0.0, 0.0], [-2.1, 0.0, 0.0], [-2.2, -2.3, -2.4], [-2.5, 0.0, 0.0]]
        ),
        "advantages": torch.tensor([0.0, 0.0, 0.7, -0.7]),
        "zero_variance_rewards": torch.tensor([0.0, 0.0, 1.0, 0.0]),
        "num_items_in_batch": torch.tensor(6),
    }


BATCH_ZERO_VARIANCE = torch.tensor([True, True, False, False, True, True])
CANDIDATE_ZERO_VARIANCE = torch.tensor([True, True, False, False])


def test_fill_moves_informative_groups_and_repads():
    batch, candidate = _batch(), _candidate()
    merged, merged_zero_variance, filled = fill_zero_variance_groups(batch, BATCH_ZERO_VARIANCE, candidate, CANDIDATE_ZERO_VARIANCE, 2, PAD)
    assert filled == 1
    assert merged_zero_variance.tolist() == [False, False, False, False, True, True]
    # prompts: width 4; batch rows gain one pad on the LEFT, rows 0-1 are the candidate's rows 2-3
    assert merged["prompt_ids"].tolist() == [
        [PAD, 8, 8, 8],
        [PAD, 8, 8, 8],
        [PAD, 3, 4, 5],
        [PAD, 3, 4, 5],
        [PAD, PAD, PAD, 6],
        [PAD, PAD, PAD, 6],
    ]
    assert merged["prompt_mask"].tolist() == [
        [0, 1, 1, 1],
        [0, 1, 1, 1],
        [0, 1, 1, 1],
        [0, 1, 1, 1],
        [0, 0, 0, 1],
        [0, 0, 0, 1],
    ]
    # completions: width 3; batch rows gain one pad on the RIGHT (pad id for ids, 0 for masks and log-probs)
    assert merged["completion_ids"].tolist() == [
        [22, 23, 24],
        [25, PAD, PAD],
        [13, 14, PAD],
        [15, PAD, PAD],
        [16, 17, PAD],
        [18, PAD, PAD],
    ]
    assert merged["completion_mask"].tolist() == [[1, 1, 1], [1, 0, 0], [1, 1, 0], [1, 0, 0], [1, 1, 0], [1, 0, 0]]
    expected_logps = [[-2.2, -2.3, -2.4], [-2.5, 0, 0], [-1.3, -1.4, 0], [-1.5, 0, 0], [-1.6, -1.7, 0], [-1.8, 0, 0]]
    torch.testing.assert_close(merged["old_per_token_logps"], torch.tensor(expected_logps), rtol=0, atol=0)
    # per-row keys follow their rows; the scalar is the batch's (the trainer recomputes it from the kept tokens)
    assert merged["advantages"].tolist() == pytest.approx([0.7, -0.7, 0.5, -0.5, 0.0, 0.0])
    assert merged["zero_variance_rewards"].tolist() == [1.0, 0.0, 2.0, 0.0, 3.0, 3.0]
    assert merged["num_items_in_batch"].item() == 9


def test_fill_does_not_modify_its_inputs():
    batch, candidate = _batch(), _candidate()
    fill_zero_variance_groups(batch, BATCH_ZERO_VARIANCE, candidate, CANDIDATE_ZERO_VARIANCE, 2, PAD)
    for original, after in ((_batch(), batch), (_candidate(), candidate)):
        for key in original:
            assert torch.equal(original[key], after[key]), key
    assert BATCH_ZERO_VARIANCE.tolist() == [True, True, False, False, True, True]


def test_fill_two_donors_fill_two_holes_in_order():
    # both candidate groups informative: batch group 0 <- candidate group 0, batch group 2 <- candidate group 1
    merged, merged_zero_variance, filled = fill_zero_variance_groups(
        _batch(), BATCH_ZERO_VARIANCE, _candidate(), torch.zeros(4, dtype=torch.bool), 2, PAD
    )
    assert filled == 2
    assert not merged_zero_variance.any()
    assert merged["completion_ids"][:, 0].tolist() == [20, 21, 13, 15, 22, 25]


def test_fill_without_donor_returns_batch_unchanged():
    merged, merged_zero_variance, filled = fill_zero_variance_groups(
        _batch(), BATCH_ZERO_VARIANCE, _candidate(), torch.ones(4, dtype=torch.bool), 2, PAD
    )
    assert filled == 0
    assert merged_zero_variance.tolist() == BATCH_ZERO_VARIANCE.tolist()
    for key, value in _batch().items():
        assert torch.equal(merged[key], value), key


def test_fill_keeps_none_values():
    batch, candidate = _batch(), _candidate()
    batch["ref_per_token_logps"] = None
    candidate["ref_per_token_logps"] = None
    merged, _, filled = fill_zero_variance_groups(batch, BATCH_ZERO_VARIANCE, candidate, CANDIDATE_ZERO_VARIANCE, 2, PAD)
    assert filled == 1 and merged["ref_per_token_logps"] is None


@pytest.mark.parametrize("key", ["importance_sampling_ratio", "pixel_values", "num_images"])
def test_fill_refuses_keys_it_cannot_repad(key):
    batch, candidate = _batch(), _candidate()
    batch[key] = torch.ones(6)
    candidate[key] = torch.ones(4)
    with pytest.raises(ValueError, match=rf"'{key}'.*zero_variance_filter: mask"):
        fill_zero_variance_groups(batch, BATCH_ZERO_VARIANCE, candidate, CANDIDATE_ZERO_VARIANCE, 2, PAD)


# --- ResampleSource -------------------------------------------------------------------------------------------------
def test_resample_source_is_reproducible_and_seeded():
    a, b, c = ResampleSource(50, seed=7), ResampleSource(50, seed=7), ResampleSource(50, seed=8)
    draws_a = [a.draw(6, 0, 1) for _ in range(4)]
    draws_b = [b.draw(6, 0, 1) for _ in range(4)]
    draws_c = [c.draw(6, 0, 1) for _ in range(4)]
    assert draws_a == draws_b
    assert draws_a != draws_c


def test_resample_source_differs_from_the_main_sampler_order():
    # TRL's RepeatSampler walks torch.randperm(N) from a generator seeded with the run's seed; the extra prompts
    # must not replay the prompts the main sampler is about to serve.
    main_order = torch.randperm(50, generator=torch.Generator().manual_seed(7)).tolist()
    assert ResampleSource(50, seed=7).draw(50, 0, 1) != main_order


def test_resample_source_rank_shares_are_disjoint_and_cover_the_round():
    # Every process owns a source with the same seed and calls draw once per round: process r takes the r-th
    # contiguous share of the round, so together they draw exactly what one process would draw.
    single = ResampleSource(40, seed=3)
    ranks = [ResampleSource(40, seed=3) for _ in range(4)]
    for _ in range(3):  # three rounds of 8 prompts across 4 processes
        shares = [source.draw(8, rank, 4) for rank, source in enumerate(ranks)]
        assert all(len(share) == 2 for share in shares)
        flat = [i for share in shares for i in share]
        assert len(set(flat)) == 8  # disjoint
        assert flat == single.draw(8, 0, 1)  # in rank order, the single-process round
    assert {source.cursor for source in ranks} == {24} and single.cursor == 24


def test_resample_source_wraps_to_a_new_permutation():
    source = ResampleSource(5, seed=0)
    drawn = [i for _ in range(5) for i in source.draw(4, 0, 1)]  # 20 prompts = 4 passes over 5
    passes = [drawn[k : k + 5] for k in range(0, 20, 5)]
    for p in passes:  # every pass is a permutation of the dataset: nothing repeated before everything was drawn
        assert sorted(p) == [0, 1, 2, 3, 4]
    assert len({tuple(p) for p in passes}) > 1  # a new permutation per pass, not the same order replayed


@pytest.mark.parametrize("size", [0, -3, None])
def test_resample_source_needs_a_sized_dataset(size):
    with pytest.raises(ValueError, match="dataset_size"):
        ResampleSource(size, seed=0)
