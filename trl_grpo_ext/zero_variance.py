"""Zero-variance group filter: the tensor logic of "mask" and "resample" (DAPO dynamic sampling).

A group is *uniform* when its G weighted total rewards are all equal (or spread at most `zero_variance_tolerance`):
every advantage in it is 0, so it carries no policy-gradient signal, yet TRL still counts its tokens in the loss
normaliser and applies KL / entropy terms to it. "mask" removes its completions from the loss and the normaliser;
"resample" (Yu et al. 2025, DAPO, arXiv 2503.14476, "dynamic sampling") first replaces uniform groups with
informative groups generated for further prompts. Uniformity is judged on the weighted total reward, the quantity
TRL turns into advantages (`multi_objective_aggregation="sum_then_normalize"`), or on one reward function chosen with
`zero_variance_reward` (`judged_rewards`).

Nothing here imports the trainer: the functions take and return plain tensors and dicts of tensors.
"""

from __future__ import annotations

import math

import torch

#: Loss types whose normaliser counts rows (sequences) or a constant per row, so masking rows needs a rescale by
#: rows / kept rows to exclude them from the normaliser (see `masked_loss_scale`). The token-count normalisers of
#: dapo / cispo / vespo use `num_items_in_batch`, recomputed from kept tokens; bnpo divides by the micro-batch's own
#: kept tokens.
ROW_NORMALISED_LOSSES = frozenset({"grpo", "sapo", "dr_grpo", "luspo"})
TOKEN_NORMALISED_LOSSES = frozenset({"dapo", "bnpo", "cispo", "vespo"})

PROMPT_KEYS = ("prompt_ids", "prompt_mask")  # left-padded (B, P)
COMPLETION_KEYS = (  # right-padded (B, C)
    "completion_ids",
    "completion_mask",
    "old_per_token_logps",
    "ref_per_token_logps",
    "sampling_per_token_logps",
    "tool_mask",
)
#: Per-row figures the trainer carries through `fill_uniform_groups` in resample mode and removes before training:
#: weighted totals (B,), rewards per function (B, F), completion lengths (B,) [tokens], truncated (B,) bool.
ROW_STAT_KEYS = (
    "zero_variance_rewards",
    "zero_variance_rewards_per_func",
    "zero_variance_completion_lengths",
    "zero_variance_truncated",
)
ROW_KEYS = ("advantages", *ROW_STAT_KEYS)  # (B, ...)
SCALAR_KEYS = ("num_items_in_batch",)


def weighted_total(rewards_per_func: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Per-completion total reward as TRL forms it: Σ_k w_k r_k over the functions that returned a value.

    Args:
        rewards_per_func (`Tensor`): (N, F) float, NaN where a reward function returned None.
        weights (`Tensor`): (F,) reward weights.

    Returns:
        (N,) float; NaN where every function returned None (an unscorable completion).
    """
    total = (rewards_per_func * weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)
    return total.masked_fill(torch.isnan(rewards_per_func).all(dim=1), float("nan"))


def judged_rewards(rewards_per_func: torch.Tensor, weights: torch.Tensor, index: int | None) -> torch.Tensor:
    """The per-completion values the zero-variance filter judges uniformity on.

    Args:
        rewards_per_func (`Tensor`): (N, F) float, NaN where a reward function returned None.
        weights (`Tensor`): (F,) reward weights.
        index (`int`, *optional*): column of the chosen reward function (`zero_variance_reward`); ``None`` judges the
            weighted total (`weighted_total`).

    Returns:
        (N,) float: the chosen function's raw (unweighted) values, or the weighted totals; NaN where missing.

    Example: accuracy [0, 0, 0, 0] and a 0.1-weighted format reward [1, 0, 1, 1] give totals [0.1, 0, 0.1, 0.1]
    (not uniform), but judged on accuracy (index 0) the group is uniform.
    """
    if index is None:
        return weighted_total(rewards_per_func, weights)
    return rewards_per_func[:, index]


def masked_loss_scale(loss_type: str, num_rows: int, kept_rows: int) -> float:
    """Factor on a loss whose masked rows still count in its normaliser, so that it equals the loss of the kept rows.

    For row-normalised losses (`ROW_NORMALISED_LOSSES`: mean over sequences, or a constant per sequence as in Dr.
    GRPO's B × L_max) the masked rows contribute 0 to the numerator but count in the denominator; multiplying by
    rows / kept rows restores the mean over the kept rows. Token-normalised losses need no factor (1.0).

    Args:
        loss_type (`str`): TRL's `loss_type`.
        num_rows (`int`): rows (completions) of the generation batch, all processes.
        kept_rows (`int`): rows kept by the filter, all processes.

    Returns:
        `float`; 1.0 when nothing is kept (the loss is 0 then, and the optimizer step is skipped).

    Raises:
        ValueError: unknown ``loss_type``.
    """
    if loss_type in TOKEN_NORMALISED_LOSSES:
        return 1.0
    if loss_type not in ROW_NORMALISED_LOSSES:
        raise ValueError(f"zero_variance_filter does not know how loss_type={loss_type!r} normalises its loss.")
    return num_rows / kept_rows if kept_rows else 1.0


def fill_uniform_groups(
    batch: dict,
    uniform: torch.Tensor,
    candidate: dict,
    candidate_uniform: torch.Tensor,
    num_generations: int,
    pad_token_id: int,
) -> tuple[dict, torch.Tensor, int]:
    """Replace the uniform groups of ``batch`` by informative groups of ``candidate``, in order (one process).

    Both dicts are local outputs of TRL's `_generate_and_score_completions` holding whole groups (B % G == 0). The
    i-th uniform group of ``batch`` takes the i-th informative group of ``candidate`` until either runs out. Rows
    are re-padded to the longer of the two (prompts on the left, completions on the right).

    Args:
        batch, candidate (`dict`): keys from `PROMPT_KEYS`, `COMPLETION_KEYS`, `ROW_KEYS`, `SCALAR_KEYS`.
        uniform, candidate_uniform (`Tensor`): (B,) bool, True for every row of a uniform group.
        num_generations (`int`): G.
        pad_token_id (`int`): pad id for ``prompt_ids`` / ``completion_ids``.

    Returns:
        ``(merged, merged_uniform, groups_filled)``; ``merged`` is a new dict, inputs are not modified.

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
    holes = uniform.view(-1, g)[:, 0].nonzero().flatten().tolist()
    donors = (~candidate_uniform.view(-1, g)[:, 0]).nonzero().flatten().tolist()
    pairs = list(zip(holes, donors))
    if not pairs:
        return dict(batch), uniform.clone(), 0
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
    merged_uniform = uniform.clone()
    merged_uniform[dst_rows] = False
    return merged, merged_uniform, len(pairs)


def _pad_to(tensor: torch.Tensor, width: int, value, left: bool) -> torch.Tensor:
    missing = width - tensor.shape[1]
    if missing == 0:
        return tensor
    pad = torch.full((tensor.shape[0], missing), value, dtype=tensor.dtype, device=tensor.device)
    return torch.cat([pad, tensor] if left else [tensor, pad], dim=1)


class ResampleSource:
    """Reproducible order of the extra prompts drawn by "resample".

    The extra prompts are a separate permutation of the training prompts (seed ``seed + 1``, so it differs from the
    main sampler's), walked in order and restarted with a new permutation when exhausted. Each round draws
    ``prompts_per_round`` prompts across all processes; process r takes the r-th contiguous share. Extra prompts do
    not advance the main sampler: the plan's epochs count the main sampler only, and the prompts drawn here are
    counted in the metric ``zero_variance/prompts_drawn``.

    Args:
        dataset_size (`int`): prompts in the training set.
        seed (`int`): the run's seed.

    Raises:
        ValueError: ``dataset_size`` is not an int >= 1 (e.g. ``None`` for an iterable dataset without a length).
    """

    def __init__(self, dataset_size: int, seed: int):
        if isinstance(dataset_size, bool) or not isinstance(dataset_size, int) or dataset_size < 1:
            raise ValueError(
                "zero_variance_filter='resample' needs a training set with a length; got "
                f"dataset_size={dataset_size}. Use a map-style datasets.Dataset, or zero_variance_filter: mask with "
                "an iterable dataset."
            )
        self.dataset_size = dataset_size
        self.seed = seed
        self.cursor = 0  # prompts drawn so far, all processes
        self._permutations: dict[int, list[int]] = {}

    def _permutation(self, epoch: int) -> list[int]:
        if epoch not in self._permutations:
            generator = torch.Generator().manual_seed(self.seed + 1 + epoch)
            self._permutations = {epoch: torch.randperm(self.dataset_size, generator=generator).tolist()}
        return self._permutations[epoch]

    def draw(self, prompts_per_round: int, rank: int, world_size: int) -> list[int]:
        """Dataset indices of this process's share of the next round (``prompts_per_round // world_size`` prompts).

        Every process must call it once per round with the same ``prompts_per_round`` and ``world_size``.
        """
        per_rank = prompts_per_round // world_size
        start = self.cursor + rank * per_rank
        indices = []
        for position in range(start, start + per_rank):
            epoch, offset = divmod(position, self.dataset_size)
            indices.append(self._permutation(epoch)[offset])
        self.cursor += prompts_per_round
        return indices


class UniformFractionEstimate:
    """Running estimate of p, the fraction of generated groups that are uniform, for sizing resample rounds.

    Exponentially decayed counts: after each generation round with ``uniform`` uniform groups out of ``groups``,
    ``U ← decay·U + uniform`` and ``N ← decay·N + groups``; the estimate is ``U / N``. With the default decay 0.9 a round
    weighs 0.9^k after k further rounds, so the estimate follows a p that drifts as the policy learns. Every process
    updates it with the same gathered counts, so it is identical on every process; its state is saved in each
    checkpoint (``state_dict``) so that a resumed run sizes its rounds as the uninterrupted run did.

    Args:
        decay (`float`, defaults to `0.9`): weight kept by the past at each update, in (0, 1].

    Raises:
        ValueError: ``decay`` outside (0, 1].
    """

    def __init__(self, decay: float = 0.9):
        if not 0 < decay <= 1:
            raise ValueError(f"UniformFractionEstimate: decay={decay} must be in (0, 1].")
        self.decay = decay
        self.uniform = 0.0
        self.groups = 0.0

    def update(self, uniform: int, groups: int) -> None:
        """Add one generation round: ``uniform`` of its ``groups`` groups were uniform (all processes)."""
        self.uniform = self.decay * self.uniform + uniform
        self.groups = self.decay * self.groups + groups

    @property
    def value(self) -> float | None:
        """The estimate of p in [0, 1]; None before the first update."""
        return self.uniform / self.groups if self.groups > 0 else None

    def state_dict(self) -> dict:
        return {"uniform": self.uniform, "groups": self.groups}

    def load_state_dict(self, state: dict) -> None:
        self.uniform, self.groups = float(state["uniform"]), float(state["groups"])


#: Largest expected number of surplus informative groups a resample round may generate, as a fraction of the groups
#: it is drawn for: a round that is not the last allowed one, and the last one (see `resample_round_size`).
MAX_EXPECTED_SURPLUS = 0.05
MAX_EXPECTED_SURPLUS_LAST_ROUND = 0.25


def expected_surplus(prompts: int, missing: int, informative_probability: float) -> float:
    """E[max(0, X − missing)] for X ~ Binomial(prompts, informative_probability): informative groups generated in a
    round beyond the ``missing`` ones it can use (they are discarded)."""
    q = informative_probability
    return sum(
        math.comb(prompts, k) * q**k * (1 - q) ** (prompts - k) * (k - missing) for k in range(missing + 1, prompts + 1)
    )


def resample_round_size(
    missing: int,
    uniform_fraction: float | None,
    cap: int,
    last_round: bool,
    max_surplus: float = MAX_EXPECTED_SURPLUS,
    max_surplus_last_round: float = MAX_EXPECTED_SURPLUS_LAST_ROUND,
) -> int:
    """Prompts (= groups) to generate in one resample round, for one process's share of the batch.

    Each prompt yields an informative group with probability q = 1 − p (``uniform_fraction``). Generating n prompts
    for ``missing`` holes costs n groups and gives X ~ Binomial(n, q) informative ones, of which those beyond
    ``missing`` are thrown away. The fewest completions per informative group kept is G / (1 − p) (every informative
    group used); the waste above that bound is the surplus E[max(0, X − missing)] (`expected_surplus`). The rule: the
    largest n >= missing whose expected surplus is at most ``max_surplus × missing`` (a round that is not the last
    allowed one: what it leaves missing is drawn for in the next round, with a fresh estimate), or at most
    ``max_surplus_last_round × missing`` (the last allowed round, a larger draw so that a shortfall stays rare).

    n is kept within [missing, cap]; with no estimate yet (None) or p = 1, n = cap (TRL's generation batch share,
    the size of every round before this sizing existed).

    Args:
        missing (`int`): uniform groups left to replace on this process (>= 1).
        uniform_fraction (`float`, *optional*): the running estimate of p (`UniformFractionEstimate.value`).
        cap (`int`): most prompts a round may draw on this process (its share of one generation batch).
        last_round (`bool`): this is the last round `max_resample_rounds` allows.
        max_surplus (`float`, defaults to `MAX_EXPECTED_SURPLUS` = 0.05), max_surplus_last_round (`float`, defaults to
            `MAX_EXPECTED_SURPLUS_LAST_ROUND` = 0.25): see above. Chosen in a simulation of 17-step runs with the
            estimate (4 prompts a step, 3 rounds): completions per informative group 1.03 × the bound on average at
            p = 0.5 to 0.7 (95th percentile ≤ 1.08), against 1.05 to 1.07 (up to 1.12) when the last round draws the
            expected need ceil(missing / q).

    Returns:
        `int` in [min(missing, cap), cap].

    Raises:
        ValueError: ``missing`` < 1 or ``cap`` < 1.
    """
    if missing < 1 or cap < 1:
        raise ValueError(f"resample_round_size: missing={missing} and cap={cap} must be >= 1.")
    if uniform_fraction is None or uniform_fraction >= 1:
        return cap
    q = 1.0 - max(0.0, uniform_fraction)
    bound = (max_surplus_last_round if last_round else max_surplus) * missing
    n = min(missing, cap)
    while n < cap and expected_surplus(n + 1, missing, q) <= bound:
        n += 1
    return n


def trained_batch_metrics(
    rewards_per_func: torch.Tensor,
    weights: torch.Tensor,
    reward_names: list[str],
    num_generations: int,
    scale_rewards: str,
    completion_lengths: torch.Tensor,
    truncated: torch.Tensor,
) -> dict[str, float]:
    """TRL's per-batch metrics, computed for the batch that is trained on (resample merges several rounds into it).

    The same definitions as TRL 1.16 `GRPOTrainer._generate_and_score_completions` / `_generate` (pinned in
    tests/test_trl_contract.py): ``rewards/<name>/mean`` and ``/std`` (nan-aware over each function's values),
    ``reward`` / ``reward_std`` (weighted totals, unscorable rows left out), ``frac_reward_zero_std`` (rows whose group
    std, or batch std with ``scale_rewards="batch"``, is close to 0), and the ``completions/*`` lengths (terminated:
    rows that ended with EOS or pad; 0 when none did).

    Args:
        rewards_per_func (`Tensor`): (N, F), NaN where a function returned None; all processes.
        weights (`Tensor`): (F,).
        reward_names (`list[str]`): F names, as TRL logs them.
        num_generations (`int`): G.
        scale_rewards (`str`): TRL's ``scale_rewards`` (``"group"``, ``"batch"`` or ``"none"``).
        completion_lengths (`Tensor`): (N,) tokens of each completion.
        truncated (`Tensor`): (N,) bool, the completion did not end with EOS / pad.

    Returns:
        ``{metric name: value}``.
    """
    from trl.trainer.utils import nanstd

    metrics = {}
    for i, name in enumerate(reward_names):
        metrics[f"rewards/{name}/mean"] = torch.nanmean(rewards_per_func[:, i]).item()
        metrics[f"rewards/{name}/std"] = nanstd(rewards_per_func[:, i]).item()
    rewards = weighted_total(rewards_per_func, weights)
    if scale_rewards == "batch":
        std = nanstd(rewards).expand_as(rewards) if rewards.numel() > 1 else torch.zeros_like(rewards)
    else:
        std = nanstd(rewards.view(-1, num_generations), dim=1).repeat_interleave(num_generations)
    metrics["reward"] = torch.nanmean(rewards).item()
    metrics["reward_std"] = nanstd(rewards).item()
    metrics["frac_reward_zero_std"] = torch.isclose(std, torch.zeros_like(std)).float().mean().item()
    lengths = completion_lengths.float()
    metrics["completions/mean_length"] = lengths.mean().item()
    metrics["completions/min_length"] = lengths.min().item()
    metrics["completions/max_length"] = lengths.max().item()
    metrics["completions/clipped_ratio"] = truncated.float().mean().item()
    terminated = lengths[~truncated.bool()]
    if len(terminated) == 0:
        terminated = torch.zeros(1)
    metrics["completions/mean_terminated_length"] = terminated.mean().item()
    metrics["completions/min_terminated_length"] = terminated.min().item()
    metrics["completions/max_terminated_length"] = terminated.max().item()
    return metrics
