"""``rollout_budget: adaptive`` in the trainer: a step's generation in two rounds, its completions split across its
prompts by `zero_variance.budget` (docs/zero_variance.md, "A rollout budget per prompt").

The step's batch keeps the plan's shape: each process still generates and trains B = its prompts × G completions.
Round one gives each of its prompts n₀ = ⌊G / 2⌋; round two gives the other prompts × (G − n₀) to the prompts whose
first round and history say they are hard (`budget.allocate_completions`), so a prompt ends with between n₀ and
n₀ + prompts × (G − n₀) completions. Each process splits its own prompts' completions, so every process makes the same
generation calls of the same sizes (the collective calls stay matched); every decision that outlives the step (the
pass-rate history) is taken on gathered tensors, identical on every process.
"""

from __future__ import annotations

import contextlib

import torch

from ..zero_variance.budget import (
    PassRateHistory,
    allocate_completions,
    estimate_pass_rates,
    first_round_size,
    scale_scores,
)
from ..zero_variance.groups import judged_rewards
from ..zero_variance.history import prompt_key
from ..zero_variance.merge import concat_batches
from ..zero_variance.metrics import log_trained_batch, row_stats


@contextlib.contextmanager
def _group_size(trainer, size: int):
    """TRL's ``num_generations`` set to ``size`` for one generation round: TRL 1.16 reshapes a round's rewards into
    rows of ``num_generations`` for its own advantages and group metrics (which this round's caller replaces), so a
    round of prompts × ``size`` completions must divide by it (prompts × G / 2 does not when the prompts are odd)."""
    saved, trainer.num_generations = trainer.num_generations, size
    try:
        yield
    finally:
        trainer.num_generations = saved


class AdaptiveRollout:
    """The two generation rounds of one training step, and the pass-rate history they learn from.

    Args:
        trainer (`GRPOExtTrainer`): generates (``_generate_and_score_keeping_dtypes``), gathers, owns the filter.

    Attributes:
        history (`PassRateHistory`): every prompt's scaled rewards so far (saved with the filter's state).
    """

    def __init__(self, trainer):
        self.trainer = trainer
        self.history = PassRateHistory()

    def generate(self, inputs: list[dict], metric_marks: dict) -> tuple[dict, list[int]]:
        """One step's generation batch with its completions split by the budget rule.

        Args:
            inputs (`list[dict]`): this process's rows as TRL's sampler gives them, G consecutive rows per prompt.
            metric_marks (`dict`): metric name -> values logged before this step (TRL's metrics of both rounds are
                replaced by the merged batch's, `metrics.log_trained_batch`).

        Returns:
            ``(output, sizes)``: TRL's output of the merged local batch (each prompt's completions together), and the
            completions of every group of the gathered batch, in order. The trainer's ``_last_rewards_per_func``
            (gathered) and ``_last_completion_ids_list`` (local) describe the merged batch.
        """
        t, zv = self.trainer, self.trainer.zero_variance
        g = t.num_generations
        n0, prompts = first_round_size(g), inputs[::g]
        with _group_size(t, n0):
            first = t._generate_and_score_keeping_dtypes([row for row in prompts for _ in range(n0)])
        rewards1, ids1 = t._last_rewards_per_func, list(t._last_completion_ids_list)
        local1 = zv.local_rows(len(prompts) * n0)
        judged = judged_rewards(rewards1, zv.reward_weights, zv.judged_index)
        zv.reward_range.update(judged)
        scores = self._scaled(judged[local1]).view(len(prompts), n0).tolist()
        keys = [prompt_key(row["prompt"]) for row in prompts]
        rates = estimate_pass_rates(scores, [self.history.prior(key) for key in keys])
        counts = allocate_completions(rates, len(prompts) * (g - n0), n0)
        with _group_size(t, g - n0):
            second = t._generate_and_score_keeping_dtypes(
                [row for row, n in zip(prompts, counts) for _ in range(n - n0)])
        rewards2, ids2 = t._last_rewards_per_func, list(t._last_completion_ids_list)
        order, extra = [], len(prompts) * n0
        for i, n in enumerate(counts):  # prompt i: its n0 first-round rows, then its n - n0 second-round rows
            order += list(range(i * n0, (i + 1) * n0)) + list(range(extra, extra + n - n0))
            extra += n - n0
        order = torch.tensor(order, dtype=torch.long)
        output = concat_batches(first, second, order, t.processing_class.pad_token_id)
        output["num_items_in_batch"] = t.accelerator.gather(output["completion_mask"].sum()).sum()
        local = torch.cat([rewards1[local1], rewards2[zv.local_rows(len(prompts) * (g - n0))]])[order.to(rewards1.device)]
        t._last_rewards_per_func = t.accelerator.gather(local)
        ids = ids1 + ids2
        t._last_completion_ids_list = [ids[i] for i in order.tolist()]
        device = t._last_rewards_per_func.device
        sizes = t.accelerator.gather(torch.tensor(counts, device=device)).tolist()
        log_trained_batch(zv, row_stats(t._last_rewards_per_func, t._last_completion_ids_list,
                                        zv.local_rows(len(order)), zv.eos_and_pad), metric_marks)
        self._observe(keys, sizes, device)
        zv.record("budget_min", float(min(sizes)))
        zv.record("budget_max", float(max(sizes)))
        return output, sizes

    def _scaled(self, judged: torch.Tensor) -> torch.Tensor:
        """Judged rewards scaled to [0, 1] by the reward's declared range, else the run's (`budget.scale_scores`)."""
        reward_range = self.trainer.zero_variance.reward_range
        low, high = reward_range.declared or (reward_range.low, reward_range.high)
        return scale_scores(judged, low, high)

    def _observe(self, local_keys: list[int], sizes: list[int], device) -> None:
        """Record every group of the gathered batch in the history (the same on every process)."""
        t, zv = self.trainer, self.trainer.zero_variance
        keys = t.accelerator.gather(torch.tensor(local_keys, dtype=torch.int64, device=device)).tolist()
        scores = self._scaled(judged_rewards(t._last_rewards_per_func, zv.reward_weights, zv.judged_index)).tolist()
        start = 0
        for key, size in zip(keys, sizes):
            self.history.observe(key, scores[start:start + size])
            start += size
