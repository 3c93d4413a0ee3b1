"""Resample's batch surgery: zero-variance groups of a generation batch replaced by informative groups of another.

Both batches are local outputs of TRL's generation step (one process's rows, whole groups); tensor shapes of the
result equal the batch's except for re-padding, so every process keeps making the same collective calls.
Nothing here imports the trainer: the function takes and returns plain dicts of tensors.
"""

from __future__ import annotations

import torch

PROMPT_KEYS = ("prompt_ids", "prompt_mask")  # left-padded (B, P)
COMPLETION_KEYS = (  # right-padded (B, C)
    "completion_ids",
    "completion_mask",
    "old_per_token_logps",
    "ref_per_token_logps",
    "sampling_per_token_logps",
    "tool_mask",
)
#: Per-row figures the filter carries through `fill_zero_variance_groups` in resample mode and removes before training:
#: weighted totals (B,), rewards per function (B, F), completion lengths (B,) [tokens], truncated (B,) bool.
ROW_STAT_KEYS = (
    "zero_variance_rewards",
    "zero_variance_rewards_per_func",
    "zero_variance_completion_lengths",
    "zero_variance_truncated",
)
ROW_KEYS = ("advantages", *ROW_STAT_KEYS)  # (B, ...)
SCALAR_KEYS = ("num_items_in_batch",)


def fill_zero_variance_groups(
    batch: dict,
    zero_variance: torch.Tensor,
    candidate: dict,
    candidate_zero_variance: torch.Tensor,
    num_generations: int,
    pad_token_id: int,
) -> tuple[dict, torch.Tensor, int]:
    """Replace the zero-variance groups of ``batch`` by informative groups of ``candidate``, in order (one process).

    Both dicts are local outputs of TRL's `_generate_and_score_completions` holding whole groups (B % G == 0). The
    i-th zero-variance group of ``batch`` takes the i-th informative group of ``candidate`` until either runs out. Rows
    are re-padded to the longer of the two (prompts on the left, completions on the right).

    Args:
        batch, candidate (`dict`): keys from `PROMPT_KEYS`, `COMPLETION_KEYS`, `ROW_KEYS`, `SCALAR_KEYS`.
        zero_variance, candidate_zero_variance (`Tensor`): (B,) bool, True for every row of a zero-variance group.
        num_generations (`int`): G.
        pad_token_id (`int`): pad id for ``prompt_ids`` / ``completion_ids``.

    Returns:
        ``(merged, merged_zero_variance, groups_filled)``; ``merged`` is a new dict, inputs are not modified.

    Raises:
        ValueError: a key this function cannot re-pad (vLLM importance sampling ratios, images, ...): resampling
            does not support that configuration; use ``zero_variance_filter: mask``.
    """
    unknown = set(batch) - set(PROMPT_KEYS + COMPLETION_KEYS + ROW_KEYS + SCALAR_KEYS)
    if unknown:
        raise ValueError(
            f"zero_variance_filter='resample' cannot merge batches holding {sorted(unknown)} (vLLM importance "
            "sampling ratios, images or other multimodal inputs). Use zero_variance_filter: mask with this "
            "configuration."
        )
    g = num_generations
    holes = zero_variance.view(-1, g)[:, 0].nonzero().flatten().tolist()
    donors = (~candidate_zero_variance.view(-1, g)[:, 0]).nonzero().flatten().tolist()
    pairs = list(zip(holes, donors))
    if not pairs:
        return dict(batch), zero_variance.clone(), 0
    dst_rows = torch.cat([torch.arange(h * g, (h + 1) * g) for h, _ in pairs])
    src_rows = torch.cat([torch.arange(d * g, (d + 1) * g) for _, d in pairs])
    merged = {}
    for key, value in batch.items():
        if key in SCALAR_KEYS or value is None:
            merged[key] = value
            continue
        other = candidate[key]
        if key in PROMPT_KEYS or key in COMPLETION_KEYS:
            left = key in PROMPT_KEYS
            fill = pad_token_id if key.endswith("_ids") else 0
            width = max(value.shape[1], other.shape[1])
            value, other = _pad_to(value, width, fill, left), _pad_to(other, width, fill, left)
        value = value.clone()
        value[dst_rows.to(value.device)] = other[src_rows.to(other.device)]
        merged[key] = value
    merged_zero_variance = zero_variance.clone()
    merged_zero_variance[dst_rows] = False
    return merged, merged_zero_variance, len(pairs)


def _pad_to(tensor: torch.Tensor, width: int, value, left: bool) -> torch.Tensor:
    missing = width - tensor.shape[1]
    if missing == 0:
        return tensor
    pad = torch.full((tensor.shape[0], missing), value, dtype=tensor.dtype, device=tensor.device)
    return torch.cat([pad, tensor] if left else [tensor, pad], dim=1)


def concat_batches(first: dict, second: dict, order: torch.Tensor, pad_token_id: int) -> dict:
    """Two local generation outputs of one step (``rollout_budget: adaptive``'s two rounds) as one batch: rows of
    ``first`` then ``second``, re-padded to the longer prompt and completion, then taken in ``order``.

    Args:
        first, second (`dict`): TRL's local outputs (keys from `PROMPT_KEYS`, `COMPLETION_KEYS`, ``advantages``).
        order (`Tensor`): (B₁ + B₂,) int64, the merged row order (each prompt's completions together).
        pad_token_id (`int`): pad id for ``prompt_ids`` / ``completion_ids``.

    Returns:
        `dict`: the merged rows; ``num_items_in_batch`` is left for the caller to gather anew.

    Raises:
        ValueError: a key that cannot be merged (vLLM importance ratios, images): use ``rollout_budget: uniform``.
    """
    unknown = set(first) - set(PROMPT_KEYS + COMPLETION_KEYS + ("advantages",) + SCALAR_KEYS)
    if unknown:
        raise ValueError(f"rollout_budget='adaptive' cannot merge generation rounds holding {sorted(unknown)} (vLLM "
                         "importance sampling ratios, images or other multimodal inputs). Use rollout_budget: uniform.")
    merged = {}
    for key, value in first.items():
        if key in SCALAR_KEYS or value is None:
            continue
        other = second[key]
        if key in PROMPT_KEYS or key in COMPLETION_KEYS:
            width = max(value.shape[1], other.shape[1])
            fill = pad_token_id if key.endswith("_ids") else 0
            value, other = (_pad_to(t, width, fill, key in PROMPT_KEYS) for t in (value, other))
        merged[key] = torch.cat([value, other.to(value.device)])[order.to(value.device)]
    return merged
