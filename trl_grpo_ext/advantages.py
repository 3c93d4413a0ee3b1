"""Group-relative advantages as pure functions over plain tensors.

Every function takes `rewards`, a float tensor of shape `(N,)` with `N = num_prompts × num_generations` in group
order (the `num_generations` completions of prompt 0, then those of prompt 1, ...), exactly as TRL's
`GRPOTrainer._generate_and_score_completions` lays them out. A missing reward (every reward function returned
`None`) is `NaN`: it is left out of every mean and std and its advantage is 0.

Formulas, with μ_g the mean and σ_g the std of group g's non-missing rewards (docs/advantages.md has a worked table):

    baseline   b_i = μ_g                                    group_mean    (GRPO, arXiv 2402.03300)
               b_i = (Σ_{j in g, j != i} r_j) / (n_g - 1)   leave_one_out (RLOO, arXiv 2402.14740)
    advantage  A_i = (r_i - b_i) / (σ + ε)   σ = σ_g or σ_batch        group / batch (batch: arXiv 2508.08221)
               A_i =  r_i - b_i                                        none          (Dr. GRPO, arXiv 2503.20783)

With `group_mean`, sample std and ε = 1e-4 this is TRL 1.16's formula operation for operation (float32 results are
bit-identical, see tests/test_advantages.py), with one deliberate difference: a group whose non-missing rewards are
all equal gets advantage exactly 0, where TRL can return rounding residue (eight rewards of 0.1 in float32 give
-7.45e-05 in TRL; with ε = 0 the residue would be of order 1).
"""

from __future__ import annotations

import math

import torch

from .config.advantage_settings import BASELINES, STD_KINDS, STD_SCALINGS, AdvantageSettings
from .config.checks import Range, check_choice


def _check_rewards(rewards: torch.Tensor, num_generations: int) -> None:
    if not isinstance(rewards, torch.Tensor) or rewards.ndim != 1 or not rewards.is_floating_point():
        got = (
            f"a {rewards.dtype} tensor of shape {tuple(rewards.shape)}"
            if isinstance(rewards, torch.Tensor)
            else type(rewards).__name__
        )
        raise ValueError(
            f"rewards must be a 1-D floating-point tensor of shape (num_prompts * num_generations,), got {got}. "
            "Use NaN, not None, for a missing reward and sum several reward functions into one column first."
        )
    Range(low=1, integer=True, fix="pass G, the completions per prompt.").check(
        "num_generations", num_generations, error=ValueError, typed=True)
    if rewards.numel() % num_generations:
        raise ValueError(
            f"rewards has {rewards.numel()} entries, which is not divisible by num_generations ({num_generations}): "
            "it must hold num_prompts × num_generations rewards in group order."
        )


def _nanstd(values: torch.Tensor, dim: int | None, sample: bool) -> torch.Tensor:
    """Std ignoring NaNs, with TRL's `nanstd` operation order (`trl.trainer.utils.nanstd`), keepdim=True.

    Sample std (`sample=True`) is NaN where fewer than 2 values are present; population std is NaN only where none is.
    The Bessel factor n / (n - 1) is computed in `values.dtype` (TRL computes it in float32; identical for float32).
    """
    mean = torch.nanmean(values, dim=dim, keepdim=True)
    variance = torch.nanmean((values - mean) ** 2, dim=dim, keepdim=True)
    if sample:
        count = torch.sum(~torch.isnan(values), dim=dim, keepdim=True).to(values.dtype)
        correction = count / (count - 1)
        correction = torch.where(count > 1, correction, torch.full_like(correction, float("nan")))
        variance = variance * correction
    return torch.sqrt(variance)


def group_baseline(rewards: torch.Tensor, num_generations: int, baseline: str = "group_mean") -> torch.Tensor:
    """The baseline b_i subtracted from each reward.

    - `"group_mean"`: b_i = μ_g, the mean of the non-missing rewards of i's group (GRPO; Shao et al. 2024,
      DeepSeekMath, arXiv 2402.03300). NaN where the whole group is missing.
    - `"leave_one_out"`: b_i = (Σ_{j in g, j != i} r_j) / (n_g - 1), the mean of the *other* non-missing rewards
      (RLOO; Ahmadian et al. 2024, arXiv 2402.14740; Kool et al. 2019). Computed as (S_g - r_i) / (n_g - 1) with
      S_g the group's NaN-ignoring sum, as TRL's `RLOOTrainer` does. NaN where i is missing or has no non-missing
      sibling. Note r_i - b_i = n_g / (n_g - 1) · (r_i - μ_g).

    Args:
        rewards (`torch.Tensor`): float, shape `(N,)`, N = num_prompts × num_generations in group order; NaN = missing.
        num_generations (`int`): G, completions per prompt (>= 1).
        baseline (`str`, defaults to `"group_mean"`): one of `BASELINES`.

    Returns:
        `torch.Tensor`: shape `(N,)`, dtype of `rewards`, in reward units.

    Raises:
        ValueError: bad `rewards` (not 1-D float), `num_generations` < 1, N not divisible by G, unknown `baseline`.
    """
    _check_rewards(rewards, num_generations)
    check_choice("advantage_baseline", baseline, BASELINES)
    grouped = rewards.reshape(-1, num_generations)
    if baseline == "group_mean":
        return torch.nanmean(grouped, dim=1).repeat_interleave(num_generations, dim=0)
    counts = (~torch.isnan(grouped)).sum(dim=1, keepdim=True)
    sums = torch.nansum(grouped, dim=1, keepdim=True)
    return ((sums - grouped) / (counts - 1)).reshape(-1)


def reward_std(
    rewards: torch.Tensor, num_generations: int, scaling: str = "group", std_kind: str = "sample"
) -> torch.Tensor:
    """The std σ each centred reward is divided by (before ε is added), NaNs ignored.

    - `"group"`: σ_g over the non-missing rewards of i's group (GRPO, arXiv 2402.03300).
    - `"batch"`: one σ over every non-missing reward of the batch, broadcast (TRL's `"batch"`; the PPO-Lite paper,
      Liu et al. 2025, "Tricks or Traps? A Deep Dive into RL for LLM Reasoning", arXiv 2508.08221).
    - `"none"`: ones (the identity divisor; `compute_advantages` then adds no ε).

    `std_kind="sample"`: sqrt(Σ (r - μ)² / (n - 1)), NaN when n < 2 (TRL's `nanstd`); `"population"`:
    sqrt(Σ (r - μ)² / n), NaN when n = 0.

    Args:
        rewards (`torch.Tensor`): float, shape `(N,)` in group order; NaN = missing.
        num_generations (`int`): G, completions per prompt (>= 1).
        scaling (`str`, defaults to `"group"`): one of `STD_SCALINGS`.
        std_kind (`str`, defaults to `"sample"`): one of `STD_KINDS`.

    Returns:
        `torch.Tensor`: shape `(N,)`, dtype of `rewards`, in reward units.

    Raises:
        ValueError: bad `rewards` or `num_generations` (as `group_baseline`), unknown `scaling` or `std_kind`.
    """
    _check_rewards(rewards, num_generations)
    check_choice("advantage_std_scaling", scaling, STD_SCALINGS)
    check_choice("advantage_std_kind", std_kind, STD_KINDS)
    sample = std_kind == "sample"
    if scaling == "group":
        std = _nanstd(rewards.reshape(-1, num_generations), dim=1, sample=sample)
        return std.reshape(-1).repeat_interleave(num_generations, dim=0)
    if scaling == "batch":
        return _nanstd(rewards, dim=None, sample=sample).expand_as(rewards)
    return torch.ones_like(rewards)


def equal_reward_groups(rewards: torch.Tensor, num_generations: int) -> torch.Tensor:
    """Flag every completion of a group whose non-missing rewards are all equal, or that has fewer than 2 of them.

    Equality is exact (max == min), so [0.1, 0.1, 0.1] is flagged although its computed std is rounding noise (e.g.
    3e-8 in float32). `compute_advantages` gives such groups exactly 0; the zero-variance filter adds a tolerance on
    top (`trl_grpo_ext.zero_variance.zero_variance_group_mask`).

    Args:
        rewards (`torch.Tensor`): float, shape `(N,)` in group order; NaN = missing.
        num_generations (`int`): G, completions per prompt (>= 1).

    Returns:
        `torch.Tensor`: bool, shape `(N,)`; every completion of a flagged group is `True`.

    Raises:
        ValueError: bad `rewards` or `num_generations`.
    """
    _check_rewards(rewards, num_generations)
    grouped = rewards.reshape(-1, num_generations)
    present = ~torch.isnan(grouped)
    high = torch.where(present, grouped, torch.full_like(grouped, -math.inf)).amax(dim=1)
    low = torch.where(present, grouped, torch.full_like(grouped, math.inf)).amin(dim=1)
    equal = (present.sum(dim=1) < 2) | (high == low)
    return equal.repeat_interleave(num_generations, dim=0)


def compute_advantages(
    rewards: torch.Tensor,
    num_generations: int,
    settings: AdvantageSettings,
    zero_variance_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Advantages A_i = (r_i - b_i) / (σ + ε), or r_i - b_i when `settings.std_scaling == "none"`.

    b_i is `group_baseline(rewards, G, settings.baseline)`, σ is `reward_std(rewards, G, settings.std_scaling,
    settings.std_kind)` and ε is `settings.epsilon`. Then, in this order:
    a zero denominator (only possible with ε = 0) gives 0; NaN (missing reward, or a std undefined for lack of
    values) gives 0, as TRL's `nan_to_num`; every completion of a group whose non-missing rewards are all equal, or
    that has fewer than 2 of them, gives exactly 0; rows flagged in `zero_variance_mask` give exactly 0.

    Sources: GRPO (Shao et al. 2024, arXiv 2402.03300) = group_mean + group std; Dr. GRPO (Liu et al. 2025,
    arXiv 2503.20783) = group_mean + none; RLOO (Ahmadian et al. 2024, arXiv 2402.14740) = leave_one_out + none;
    batch std as TRL's `scale_rewards="batch"` (arXiv 2508.08221): group mean, batch std.

    Args:
        rewards (`torch.Tensor`): float, shape `(N,)`, N = num_prompts × num_generations in group order; NaN = missing.
        num_generations (`int`): G, completions per prompt (>= 1).
        settings (`AdvantageSettings`): baseline, std scaling, ε, std kind.
        zero_variance_mask (`torch.Tensor`, *optional*): bool, shape `(N,)`; `True` rows get advantage exactly 0 (e.g.
            `zero_variance.zero_variance_group_mask(rewards, G, tolerance)` from the zero-variance filter).

    Returns:
        `torch.Tensor`: shape `(N,)`, dtype of `rewards`, no NaN; in reward units when the std scaling is `"none"`,
        else in units of σ.

    Raises:
        ValueError: bad `rewards` or `num_generations`; `settings` not an `AdvantageSettings`; `zero_variance_mask` not a
            bool tensor of shape `(N,)`.
    """
    _check_rewards(rewards, num_generations)
    if not isinstance(settings, AdvantageSettings):
        raise ValueError(
            f"settings must be an AdvantageSettings, got {type(settings).__name__}; build it with "
            "AdvantageSettings(...) or resolve_advantage_settings(...)."
        )
    if zero_variance_mask is not None and (
        not isinstance(zero_variance_mask, torch.Tensor)
        or zero_variance_mask.dtype != torch.bool
        or zero_variance_mask.shape != rewards.shape
    ):
        got = (
            f"{zero_variance_mask.dtype} of shape {tuple(zero_variance_mask.shape)}"
            if isinstance(zero_variance_mask, torch.Tensor)
            else type(zero_variance_mask).__name__
        )
        raise ValueError(
            f"zero_variance_mask must be a bool tensor of shape {tuple(rewards.shape)} (like rewards), got {got}."
        )
    advantages = rewards - group_baseline(rewards, num_generations, settings.baseline)
    if settings.std_scaling != "none":
        denominator = reward_std(rewards, num_generations, settings.std_scaling, settings.std_kind) + settings.epsilon
        advantages = advantages / denominator
        advantages = torch.where(denominator == 0, torch.zeros_like(advantages), advantages)
    advantages = torch.nan_to_num(advantages, nan=0.0)
    zero = equal_reward_groups(rewards, num_generations)
    if zero_variance_mask is not None:
        zero = zero | zero_variance_mask.to(zero.device)
    return advantages.masked_fill(zero, 0.0)


def advantage_metrics(advantages: torch.Tensor, mask: torch.Tensor | None = None) -> dict[str, float]:
    """Per-step advantage statistics for logging.

    Keys: `"advantages/mean"` (mean of A), `"advantages/abs_mean"` (mean of |A|), `"advantages/std"` (sample std of
    A, divides by n - 1 like TRL's logged `reward_std`). Computed in float64 over the rows where `mask` is `True`
    (all rows when `mask` is `None`). With no row selected every value is NaN; with one row the std is NaN.

    Args:
        advantages (`torch.Tensor`): float, shape `(N,)`.
        mask (`torch.Tensor`, *optional*): bool, shape `(N,)`: the rows to include (e.g. the rows kept by the
            zero-variance filter).

    Returns:
        `dict[str, float]`: the three values, as Python floats.

    Raises:
        ValueError: `advantages` not a 1-D float tensor, or `mask` not a bool tensor of the same shape.
    """
    if not isinstance(advantages, torch.Tensor) or advantages.ndim != 1 or not advantages.is_floating_point():
        raise ValueError("advantages must be a 1-D floating-point tensor of shape (N,).")
    if mask is not None:
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.shape != advantages.shape:
            raise ValueError(f"mask must be a bool tensor of shape {tuple(advantages.shape)} (like advantages).")
        advantages = advantages[mask]
    values = advantages.detach().to(torch.float64)
    if values.numel() == 0:
        return {"advantages/mean": math.nan, "advantages/abs_mean": math.nan, "advantages/std": math.nan}
    std = values.std(correction=1).item() if values.numel() > 1 else math.nan
    return {
        "advantages/mean": values.mean().item(),
        "advantages/abs_mean": values.abs().mean().item(),
        "advantages/std": std,
    }


def uniform_group_signal(signs: torch.Tensor, entropies: torch.Tensor, mask: torch.Tensor,
                         coef: float) -> torch.Tensor:
    """Token advantages for the completions of all-right and all-wrong uniform groups (RL-ZVP-style; docs/advantages.md).

    A uniform group has GRPO advantage 0 on every token. RL-ZVP (Le et al. 2025, "No Prompt Left Behind", arXiv
    2509.21880) gives such a group's tokens a signed advantage instead: the sign from the group's correctness, the
    size from the token's entropy under the policy. Here, with H_t the (detached) entropy of token t, H_max the
    largest over the completion's loss tokens and α = ``coef``:

        all right (sign +1):  A_t = +α · H_t / H_max          (forks the model was unsure of are reinforced most)
        all wrong (sign −1):  A_t = −α · (1 − H_t / H_max)    (confident wrong tokens are penalised most; forks least)
        any other row (0):    A_t = 0

    so 0 ≤ |A_t| ≤ α; a completion whose every loss token has zero entropy gets 0 (right) or −α (wrong).

    Args:
        signs (`Tensor`): (B,) float, +1 for a row of an all-right group, −1 of an all-wrong one, 0 otherwise.
        entropies (`Tensor`): (B, T) float, per-token entropy [nats] of the completion under the current policy.
        mask (`Tensor`): (B, T), 1 for the tokens in the loss.
        coef (`float`): α > 0, the largest |advantage| a token gets (``zero_variance_signal_coef``).

    Returns:
        `Tensor`: (B, T), dtype of ``entropies``, 0 outside ``mask``; no gradient flows into the entropies.

    >>> signs = torch.tensor([1.0, -1.0, 0.0])
    >>> h = torch.tensor([[0.5, 1.0, 2.0], [0.5, 1.0, 2.0], [1.0, 1.0, 1.0]])
    >>> uniform_group_signal(signs, h, torch.ones(3, 3), 0.1)
    tensor([[ 0.0250,  0.0500,  0.1000],
            [-0.0750, -0.0500, -0.0000],
            [ 0.0000,  0.0000,  0.0000]])
    """
    mask = mask.to(entropies.dtype)
    held = entropies.detach() * mask
    peak = held.amax(dim=1, keepdim=True)
    ratio = torch.where(peak > 0, held / peak.clamp(min=torch.finfo(held.dtype).tiny), torch.zeros_like(held))
    signs = signs.to(entropies.dtype).unsqueeze(1)
    signal = torch.where(signs > 0, coef * ratio, torch.where(signs < 0, -coef * (1 - ratio), torch.zeros_like(ratio)))
    return signal * mask
