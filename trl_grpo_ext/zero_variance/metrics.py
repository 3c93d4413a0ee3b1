"""The zero-variance filter's logged metrics, and TRL's per-batch metrics recomputed for the batch trained on.

Our metrics are logged under ``zero_variance/*`` (`METRICS`; the names are part of the logs users read and keep, so
they stay as first released). TRL's own per-batch metrics have TRL's names; `TRL_METRICS` maps our vocabulary to
them once (TRL calls a zero-variance group one of "zero std").
"""

from __future__ import annotations

import torch

from .groups import generated_uniform_fraction, weighted_total
from .report import GENERATION_SECONDS_KEY, IDENTICAL_KEY, NO_UPDATE_KEY, SKIPPED_PROMPTS_KEY

#: Our metrics, by meaning -> the logged name (every value is averaged over the steps of a logging interval).
METRICS = {
    "fraction_before": "zero_variance/frac_uniform_before",  # zero-variance rows / rows, first generation round
    "identical": IDENTICAL_KEY,  # groups of G identical completions / groups, first generation round
    "fraction_after": "zero_variance/frac_uniform_after",  # after resampling: the rows masked out of the loss
    "completions_masked": "zero_variance/completions_masked",  # rows masked out of the loss, all processes
    "resample_rounds": "zero_variance/resample_rounds",  # extra generation rounds this step
    "prompts_drawn": "zero_variance/prompts_drawn",  # extra prompts drawn this step, all processes
    "shortfall_groups": "zero_variance/shortfall_groups",  # zero-variance groups left after the last round
    "fraction_estimate": "zero_variance/uniform_fraction_estimate",  # the estimate p that sizes the rounds
    "no_update": NO_UPDATE_KEY,  # 1.0 on a step whose optimizer update was skipped, else 0.0
    "prompts_skipped": SKIPPED_PROMPTS_KEY,  # skip mode: share of the epoch's prompt slots skipped before rollout
    "completions_dropped": "zero_variance/completions_dropped",  # masked rows dropped before the loss forward
    "generation_seconds": GENERATION_SECONDS_KEY,  # wall seconds generating and scoring this step's completions
    "completions_uniform": "zero_variance/frac_completions_uniform",  # rows of uniform groups / rows, first round
    "completions_no_gradient": "zero_variance/frac_completions_no_gradient",  # rows whose every advantage is 0
    "budget_min": "zero_variance/completions_per_prompt_min",  # rollout_budget: fewest completions a prompt got
    "budget_max": "zero_variance/completions_per_prompt_max",  # and most (a step's; a mean over a logging interval)
}
#: Prefix of TRL's metrics of every generation round of a resampled step (their average over the rounds).
ROUNDS_PREFIX = "zero_variance/rounds/"

#: Our names for TRL 1.16's per-batch metrics (``GRPOTrainer`` generation step) -> TRL's logged names. The per-reward
#: ``rewards/<name>/mean`` and ``rewards/<name>/std`` follow TRL's pattern directly.
TRL_METRICS = {
    "reward_mean": "reward",
    "reward_std": "reward_std",
    "zero_variance_fraction": "frac_reward_zero_std",
    "length_mean": "completions/mean_length",
    "length_min": "completions/min_length",
    "length_max": "completions/max_length",
    "truncated_fraction": "completions/clipped_ratio",
    "terminated_length_mean": "completions/mean_terminated_length",
    "terminated_length_min": "completions/min_terminated_length",
    "terminated_length_max": "completions/max_terminated_length",
}


def trained_batch_metrics(
    rewards_per_func: torch.Tensor,
    weights: torch.Tensor,
    reward_names: list[str],
    num_generations: int,
    scale_rewards: str,
    completion_lengths: torch.Tensor,
    truncated: torch.Tensor,
    tolerance: float = 0.0,
) -> dict[str, float]:
    """TRL's per-batch metrics, computed for the batch that is trained on (resample merges several rounds into it).

    The same definitions as TRL 1.16's generation step (pinned in tests/test_trl_contract.py), under TRL's names
    (`TRL_METRICS`): ``rewards/<name>/mean`` and ``/std`` (nan-aware over each function's values), the mean and std
    of the weighted totals (unscorable rows left out), the fraction of rows whose group (or batch, with
    ``scale_rewards="batch"``) is uniform (`groups.generated_uniform_fraction`: TRL's ``isclose(std, 0)`` misses
    float32 noise), and the completion lengths (terminated: rows that ended with EOS or pad;
    0 when none did).

    Args:
        rewards_per_func (`Tensor`): (N, F), NaN where a function returned None; all processes.
        weights (`Tensor`): (F,).
        reward_names (`list[str]`): F names, as TRL logs them.
        num_generations (`int`): G.
        scale_rewards (`str`): TRL's ``scale_rewards`` (``"group"``, ``"batch"`` or ``"none"``).
        completion_lengths (`Tensor`): (N,) tokens of each completion.
        truncated (`Tensor`): (N,) bool, the completion did not end with EOS / pad.
        tolerance (`float`, defaults to `0.0`): ``zero_variance_tolerance`` (the uniform-group definition).

    Returns:
        ``{TRL's metric name: value}``.
    """
    from .._trl_compat import nanstd

    name_of = TRL_METRICS
    metrics = {}
    for i, name in enumerate(reward_names):
        metrics[f"rewards/{name}/mean"] = torch.nanmean(rewards_per_func[:, i]).item()
        metrics[f"rewards/{name}/std"] = nanstd(rewards_per_func[:, i]).item()
    rewards = weighted_total(rewards_per_func, weights)
    metrics[name_of["reward_mean"]] = torch.nanmean(rewards).item()
    metrics[name_of["reward_std"]] = nanstd(rewards).item()
    metrics[name_of["zero_variance_fraction"]] = generated_uniform_fraction(rewards, num_generations, scale_rewards,
                                                                            tolerance)
    lengths = completion_lengths.float()
    metrics[name_of["length_mean"]] = lengths.mean().item()
    metrics[name_of["length_min"]] = lengths.min().item()
    metrics[name_of["length_max"]] = lengths.max().item()
    metrics[name_of["truncated_fraction"]] = truncated.float().mean().item()
    terminated = lengths[~truncated.bool()]
    if len(terminated) == 0:
        terminated = torch.zeros(1)
    metrics[name_of["terminated_length_mean"]] = terminated.mean().item()
    metrics[name_of["terminated_length_min"]] = terminated.min().item()
    metrics[name_of["terminated_length_max"]] = terminated.max().item()
    return metrics


def truncated_rows(completion_ids: list, eos_and_pad: set[int], device=None) -> torch.Tensor:
    """(B,) int8, 1 for a completion that did not end with an end-of-sequence or pad token (cut at
    ``max_completion_length``, as TRL's ``completions/clipped_ratio`` counts it); an empty completion is not cut."""
    return torch.tensor([int(len(row) > 0 and int(row[-1]) not in eos_and_pad) for row in completion_ids],
                        dtype=torch.int8, device=device)


def row_stats(rewards_per_func: torch.Tensor, completion_ids: list, local: slice, eos_and_pad: set[int]) -> dict:
    """Per-row figures of one generation round (local rows), carried through `merge.fill_zero_variance_groups` so
    that the trained batch's metrics can be computed: rewards per function, completion lengths, truncation."""
    device = rewards_per_func.device
    return {
        "zero_variance_rewards_per_func": rewards_per_func[local],
        "zero_variance_completion_lengths": torch.tensor([len(row) for row in completion_ids], device=device),
        "zero_variance_truncated": truncated_rows(completion_ids, eos_and_pad, device).bool(),
    }


def log_trained_batch(zero_variance, output: dict, metric_marks: dict) -> None:
    """Log TRL's batch metrics of the batch that is trained on under TRL's names; move TRL's values of every
    generation round of this step to ``zero_variance/rounds/<name>`` (their average over the rounds).

    Args:
        zero_variance (`ZeroVarianceFilter`): its gather, metrics and reward settings.
        output (`dict`): the local batch with the `row_stats` keys. metric_marks (`dict`): metric name -> number of
            values before the step's first round."""
    values = trained_batch_metrics(
        zero_variance.gather(output["zero_variance_rewards_per_func"]),
        zero_variance.reward_weights,
        zero_variance.reward_names,
        zero_variance.num_generations,
        zero_variance.scale_rewards,
        zero_variance.gather(output["zero_variance_completion_lengths"]),
        zero_variance.gather(output["zero_variance_truncated"].to(torch.int8)).bool(),
        tolerance=zero_variance.tolerance,
    )
    metrics = zero_variance.metrics()
    for name, value in values.items():
        logged = metrics[name]
        mark = metric_marks.get(name, 0)
        metrics[f"{ROUNDS_PREFIX}{name}"].extend(logged[mark:])
        del logged[mark:]
        logged.append(value)
