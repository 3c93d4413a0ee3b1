"""`ZeroVarianceFilter`: the whole zero-variance filter of one run ("mask", or "resample" then mask), on tensors.

The trainer hands it TRL's generation output and gathered rewards; the filter judges groups, resamples, masks
zero-variance rows out of the loss and its normaliser, rescales row-normalised losses and skips optimizer steps
that kept nothing. Everything collective goes through the ``gather`` / ``reduce`` functions it is given, and every
metric into the ``metrics`` lists it is given, so it runs on plain tensors without a trainer or accelerate (the
defaults are those of one process). Decisions are taken on gathered tensors only: every process runs the same
rounds of the same size and makes the same collective calls.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Callable

import torch

from ..training.checkpoints import ZERO_VARIANCE_STATE_FILE, write_json
from .budget import group_share
from .causes import RewardRange, cause_shares, declared_range, uniform_causes
from .groups import (
    ROW_NORMALISED_LOSSES,
    generated_uniform_fraction,
    identical_group_fraction,
    judged_rewards,
    masked_loss_scale,
    weighted_total,
    zero_variance_group_mask,
)
from .history import PromptHistory
from .merge import ROW_STAT_KEYS, fill_zero_variance_groups
from .metrics import METRICS, TRL_METRICS, log_trained_batch, row_stats, truncated_rows
from .resample import ResampleSource, ZeroVarianceFractionEstimate, resample_round_size

#: ``generate_round(dataset_indices)`` -> (TRL's local output dict, gathered (N, F) rewards, local completion ids):
#: one extra generation round for this process's prompts, each repeated G times.
GenerateRound = Callable[[list[int]], tuple[dict, torch.Tensor, list]]


class ZeroVarianceFilter:
    """The zero-variance filter of one run.

    Args:
        mode (`str`): ``zero_variance_filter``: ``"off"`` (judge only, for the advantages), ``"mask"``,
            ``"resample"`` or ``"skip"`` (mask, plus the `PromptHistory` the skipping sampler reads).
        num_generations (`int`): G.
        reward_weights (`Tensor`): (F,) TRL's reward weights.
        tolerance (`float`, defaults to `0.0`): ``zero_variance_tolerance`` [reward units].
        judged_index (`int`, *optional*): column of the judged reward (`settings.judged_reward_index`); None judges
            the weighted total.
        max_rounds (`int`, defaults to `0`): ``max_resample_rounds``.
        loss_type (`str`, defaults to `"dapo"`): TRL's ``loss_type`` (sets the loss rescale, `masked_loss_scale`).
        dataset_size (`int`, *optional*), seed (`int`, defaults to `0`): the extra prompts' order (resample only:
            `ResampleSource`).
        reward_names (`list[str]`): TRL's reward function names. scale_rewards (`str`): TRL's ``scale_rewards``.
            Both for TRL's metrics of the batch trained on (resample).
        eos_and_pad (`set[int]`): token ids that end a completion (truncation, resample metrics).
        pad_token_id (`int`): re-padding of merged batches.
        gather (`callable`, defaults to identity): tensor -> the tensors of all processes concatenated on dim 0 (a
            0-dim tensor gives one value per process).
        reduce (`callable`, defaults to identity): 0-dim tensor -> its sum over processes.
        process_index (`int`, defaults to `0`), num_processes (`int`, defaults to `1`): this process, all processes.
        metrics (`callable`, *optional*): () -> the dict of metric lists to append to (TRL's, through
            `_trl_compat.train_metrics`); None keeps them in `own_metrics`.
        reward_funcs (`list`, *optional*): TRL's reward functions: their declared ``value_range`` gives the judged
            reward's (minimum, maximum) (`causes.declared_range`), for the cause of a uniform group.

    Raises:
        ValueError: ``mode="resample"`` without a dataset length (`ResampleSource`).
    """

    def __init__(self, mode: str, num_generations: int, reward_weights: torch.Tensor, *, tolerance: float = 0.0,
                 judged_index: int | None = None, max_rounds: int = 0, loss_type: str = "dapo",
                 dataset_size: int | None = None, seed: int = 0, reward_names: list[str] = (),
                 scale_rewards: str = "group", eos_and_pad: set[int] = frozenset(), pad_token_id: int = 0,
                 gather: Callable[[torch.Tensor], torch.Tensor] = lambda t: t,
                 reduce: Callable[[torch.Tensor], torch.Tensor] = lambda t: t,
                 process_index: int = 0, num_processes: int = 1,
                 metrics: Callable[[], dict[str, list[float]]] | None = None, history: PromptHistory | None = None,
                 reward_funcs: list = ()):
        self.mode, self.num_generations, self.reward_weights = mode, num_generations, reward_weights
        self.tolerance, self.judged_index, self.max_rounds, self.loss_type = tolerance, judged_index, max_rounds, loss_type
        self.reward_names, self.scale_rewards = list(reward_names), scale_rewards
        self.eos_and_pad, self.pad_token_id = set(eos_and_pad), pad_token_id
        self.gather, self.reduce, self.process_index, self.num_processes = gather, reduce, process_index, num_processes
        self.own_metrics: dict[str, list[float]] = defaultdict(list)
        self.metrics = metrics if metrics is not None else (lambda: self.own_metrics)
        self.source = ResampleSource(dataset_size, seed) if mode == "resample" else None
        #: skip mode: every prompt's uniform streak, shared with the train sampler (`sampling.SkippingRepeatSampler`)
        self.history = (history or PromptHistory()) if mode == "skip" else None
        self.fraction_estimate = ZeroVarianceFractionEstimate()  # sizes the resample rounds (resample only)
        self.window_kept_rows = 0.0  # rows kept in this accumulation window (this process)
        self.window_dropped_rows = 0  # masked rows dropped before the loss forward in this window (this process)
        self.skip_next_step = False
        self.skipped_updates = 0
        self.reward_range = RewardRange(declared_range(reward_funcs, reward_weights.tolist(), judged_index)
                                        if len(reward_funcs) else None)  # the judged reward's range: right / wrong (`causes`)
        self.causes: list[str | None] = []  # the last generation batch's cause per group
        self.group_sizes: list[int] | None = None  # the batch's completions per group when unequal (rollout_budget)
        self.pass_rates = None  # rollout_budget: adaptive's `budget.PassRateHistory`, saved with the state

    @property
    def enabled(self) -> bool:
        """The filter changes training ("mask" or "resample")."""
        return self.mode != "off"

    def record(self, key: str, value: float | None) -> None:
        """Log ``value`` under `metrics.METRICS` [``key``] (skip: ``prompts_skipped``, the share of the epoch's prompt
        slots skipped before rollout; ``generation_seconds``: this process's wall seconds generating and scoring a
        step, every round included, whose uniform share `report.run_summary` attributes); None logs nothing."""
        if value is not None:  # None: the batch has no such figure
            self.metrics()[METRICS[key]].append(value)

    def local_rows(self, local_size: int) -> slice:
        """This process's rows of a gathered tensor: ``[rank·B, (rank+1)·B)``."""
        return slice(self.process_index * local_size, (self.process_index + 1) * local_size)

    def judge(self, rewards_per_func: torch.Tensor) -> torch.Tensor:
        """(N,) bool, True for every row of a zero-variance group in the judged reward."""
        judged = judged_rewards(rewards_per_func, self.reward_weights, self.judged_index)
        return zero_variance_group_mask(judged, self.num_generations, self.tolerance, sizes=self.group_sizes)

    def _record_causes(self, rewards_per_func: torch.Tensor, completion_ids: list, zero_variance: torch.Tensor):
        """The cause of each group's uniformity in the first round (`causes.uniform_causes`: None for a group with
        variance), its shares logged (`causes.CAUSE_KEYS`) in every mode."""
        judged = judged_rewards(rewards_per_func, self.reward_weights, self.judged_index)
        self.reward_range.update(judged)
        truncated = self.gather(truncated_rows(completion_ids, self.eos_and_pad, rewards_per_func.device)).bool()
        if truncated.numel() != judged.numel():  # no completion ids given (a caller of the filter alone)
            truncated = torch.zeros_like(zero_variance)
        causes = uniform_causes(judged, zero_variance, truncated, self.sizes(len(judged)), self.reward_range,
                                self.tolerance)
        for key, share in cause_shares(causes).items():
            self.metrics()[key].append(share)
        return causes

    def sizes(self, rows: int) -> list[int]:
        """Completions of each group of a gathered batch of ``rows``: `group_sizes`, else G each."""
        return self.group_sizes or [self.num_generations] * (rows // self.num_generations)

    def kept_rows(self, zero_variance: torch.Tensor) -> torch.Tensor:
        """(N,) bool, the rows that stay in the loss: all of them with the filter off."""
        return ~zero_variance if self.enabled else torch.ones_like(zero_variance)

    # -- one generation batch --------------------------------------------------------------------------------------
    def select(self, output: dict, rewards_per_func: torch.Tensor, completion_ids: list, metric_marks: dict,
               generate_round: GenerateRound) -> tuple[dict, torch.Tensor, torch.Tensor]:
        """Judge a generation batch (its uniform share logged in every mode) and, with "resample", replace its
        zero-variance groups.

        Args:
            output (`dict`): TRL's local generation output (``advantages`` (B,), ``completion_mask`` (B, C), ...).
            rewards_per_func (`Tensor`): (N, F) gathered rewards of it, NaN = None. completion_ids (`list`): local.
            metric_marks (`dict`): metric name -> number of values before this batch was generated (resample moves
                TRL's values of every round to ``zero_variance/rounds/<name>``).
            generate_round (`GenerateRound`): generates an extra round (resample only).

        Returns:
            ``(output, rewards, zero_variance)``: the batch to train on, its (N,) weighted total rewards (gathered) and
            its (N,) zero-variance mask (gathered).
        """
        rewards = weighted_total(rewards_per_func, self.reward_weights)
        self._correct_trl_share(rewards)
        zero_variance = self.judge(rewards_per_func)
        self.causes = self._record_causes(rewards_per_func, completion_ids, zero_variance)
        uniform_groups = sum(cause is not None for cause in self.causes) / len(self.causes)
        self.record("fraction_before", uniform_groups)  # every mode: the console reads it
        self.record("completions_uniform", zero_variance.float().mean().item())
        if self.enabled and self.group_sizes is None:
            self.record("identical", identical_group_fraction(completion_ids, self.gather, self.num_generations,
                                                               rewards_per_func.device))
        if self.mode == "resample":
            output, rewards, zero_variance = self._resample(
                output, rewards, zero_variance, rewards_per_func, completion_ids, generate_round)
            log_trained_batch(self, output, metric_marks)
        for key in ROW_STAT_KEYS:
            output.pop(key, None)
        return output, rewards, zero_variance

    def _resample(self, output, rewards, zero_variance, rewards_per_func, completion_ids, generate_round):
        """DAPO dynamic sampling: up to ``max_rounds`` extra generation rounds filling zero-variance groups.

        Each round is sized by `resample_round_size` from the running estimate of the zero-variance fraction (updated
        with every round's gathered counts) and the zero-variance groups still missing on the process that misses
        most.
        """
        g, world, rank = self.num_generations, self.num_processes, self.process_index
        local = self.local_rows(len(output["advantages"]))
        output["zero_variance_rewards"] = rewards[local]
        output.update(row_stats(rewards_per_func, completion_ids, local, self.eos_and_pad))
        local_zero_variance = zero_variance[local]
        cap = len(local_zero_variance) // g  # groups of this process's share of a generation batch
        self.fraction_estimate.update(int(zero_variance.sum()) // g, len(zero_variance) // g)
        rounds = drawn = 0
        while bool(zero_variance.any()) and rounds < self.max_rounds:
            missing = int(zero_variance.view(world, -1).sum(dim=1).max()) // g  # on the process that misses most
            per_process = resample_round_size(
                missing, self.fraction_estimate.value, cap, last_round=rounds == self.max_rounds - 1
            )
            indices = self.source.draw(per_process * world, rank, world)
            extra, extra_rewards_per_func, extra_ids = generate_round(indices)
            extra_rewards = weighted_total(extra_rewards_per_func, self.reward_weights)
            self._correct_trl_share(extra_rewards)
            extra_zero_variance = self.judge(extra_rewards_per_func)
            self.fraction_estimate.update(int(extra_zero_variance.sum()) // g, len(extra_zero_variance) // g)
            extra_local = self.local_rows(per_process * g)
            extra["zero_variance_rewards"] = extra_rewards[extra_local]
            extra.update(row_stats(extra_rewards_per_func, extra_ids, extra_local, self.eos_and_pad))
            output, local_zero_variance, _ = fill_zero_variance_groups(
                output, local_zero_variance, extra, extra_zero_variance[extra_local], g, self.pad_token_id
            )
            rewards = self.gather(output["zero_variance_rewards"])
            zero_variance = self.gather(local_zero_variance.to(torch.int8)).bool()
            rounds += 1
            drawn += per_process * world
        self.record("resample_rounds", float(rounds))
        self.record("prompts_drawn", float(drawn))
        self.record("shortfall_groups", zero_variance.float().sum().item() / g)
        self.record("fraction_estimate", self.fraction_estimate.value)
        return output, rewards, zero_variance

    def observe(self, prompt_keys: torch.Tensor, zero_variance: torch.Tensor) -> None:
        """Skip mode: record a generation batch's groups in the prompt history.

        Args:
            prompt_keys (`Tensor`): (N,) int64 `history.prompt_key` of every row, gathered (the same on every process).
            zero_variance (`Tensor`): (N,) bool, the first round's judgement (`select`'s), gathered.
        """
        if self.history is None:
            return
        g = self.num_generations
        self.history.observe(prompt_keys[::g].tolist(), zero_variance[::g].tolist())

    def _correct_trl_share(self, total_rewards: torch.Tensor) -> None:
        """Replace the ``frac_reward_zero_std`` TRL just logged for a generation round (``isclose(std, 0)``, blind to
        float32 noise and to all-None groups) by `groups.generated_uniform_fraction` of the same rewards."""
        self.correct_trl_share(total_rewards, self.metrics(), self.num_generations)

    def correct_trl_share(self, total_rewards: torch.Tensor, metrics: dict, num_generations: int) -> None:
        """`_correct_trl_share` for any metric dict (TRL's eval metrics too) and group size (``num_generations_eval``).

        Args:
            total_rewards (`Tensor`): (N,) weighted totals, NaN where unscorable. metrics (`dict`): metric lists.
            num_generations (`int`): the group size of this batch.
        """
        logged = metrics.get(TRL_METRICS["zero_variance_fraction"])
        if logged:
            logged[-1] = generated_uniform_fraction(total_rewards, num_generations, self.scale_rewards,
                                                    self.tolerance, self.group_sizes)

    def mask(self, output: dict, kept: torch.Tensor, local: slice) -> None:
        """Mask the rows not ``kept`` out of the loss (``tool_mask``) and its token normaliser
        (``num_items_in_batch``, gathered); add ``zero_variance_keep`` (B,) and ``zero_variance_loss_scale`` (0-dim),
        which TRL shuffles and splits with the batch and `scale_loss` reads. Shapes stay unchanged."""
        keep_local = kept[local].to(output["completion_mask"].device)
        tool_mask = output.get("tool_mask")
        base = torch.ones_like(output["completion_mask"]) if tool_mask is None else tool_mask
        output["tool_mask"] = base * keep_local.unsqueeze(1).to(base.dtype)
        loss_mask = output["completion_mask"] * output["tool_mask"]
        output["num_items_in_batch"] = self.gather(loss_mask.sum()).sum()
        output["zero_variance_keep"] = keep_local.float()
        kept_rows = int(kept.sum())
        output["zero_variance_loss_scale"] = torch.tensor(
            masked_loss_scale(self.loss_type, kept.numel(), kept_rows), device=keep_local.device
        )
        self.record("completions_masked", float(kept.numel() - kept_rows))
        self.record("fraction_after", group_share(~kept, self.sizes(kept.numel())))  # groups, as fraction_before

    # -- the loss and the optimizer step ---------------------------------------------------------------------------
    def drop_masked_rows(self, inputs: dict) -> dict:
        """The micro-batch ``inputs`` without its masked rows, so that they cost no loss forward or backward.

        Every tensor whose first dimension is the micro-batch's rows (B) is indexed with the kept rows, in their
        order; scalars (``num_items_in_batch``, the loss scale) stay. With several processes every process keeps the
        same number of rows R (the most any process kept, padded with masked rows), because TRL's loss gathers
        per-row metrics across processes; at least one row stays, so that every process runs a backward pass (DDP's
        gradient all-reduce needs all of them). A masked row contributes exactly 0 to every loss's numerator, so the
        gradient is unchanged once `scale_loss` multiplies row-normalised losses by R / B
        (``zero_variance_row_factor``). Multimodal micro-batches (``pixel_values``) are left whole.

        Args:
            inputs (`dict`): one micro-batch as TRL's ``_compute_loss`` receives it, with ``zero_variance_keep`` (B,).

        Returns:
            `dict`: the same keys plus ``zero_variance_row_factor`` (`float`, R / B) and ``zero_variance_any_kept``
            (`bool`, a process kept a row: `void_empty_means`); ``inputs`` itself when off or multimodal.
        """
        keep = inputs.get("zero_variance_keep")
        if keep is None or "pixel_values" in inputs:
            return inputs
        rows = keep.numel()
        kept = int(keep.sum())
        if self.num_processes > 1:
            kept = int(self.gather(torch.tensor([kept], device=keep.device)).max())
        target = min(rows, max(kept, 1))
        order = torch.argsort((keep <= 0).to(torch.int8), stable=True)[:target]  # kept rows first, in their order
        dropped = {key: value[order] if torch.is_tensor(value) and value.dim() >= 1 and value.size(0) == rows
                   else value for key, value in inputs.items()}
        dropped["zero_variance_row_factor"], dropped["zero_variance_any_kept"] = target / rows, kept > 0
        self.window_dropped_rows += rows - target
        return dropped

    def void_empty_means(self, metric_marks: dict, inputs: dict) -> None:
        """Set to NaN the metrics TRL's loss added for a micro-batch whose every row is masked on every process: its
        token means (``entropy``, ``kl``, the clip ratios) divide 0 by no token and read 0 (an ``entropy`` of 0 on a
        step that made no update reads as a deterministic policy). TRL's log leaves NaN out of the interval's mean
        (None when no micro-batch of the interval kept a token). ``entropy_coef`` (a setting, not a mean) stays.

        Args:
            metric_marks (`dict`): metric name -> number of values before TRL's ``_compute_loss`` ran.
            inputs (`dict`): the micro-batch, with ``zero_variance_keep`` (B,) when the filter is on."""
        keep, any_kept = inputs.get("zero_variance_keep"), inputs.get("zero_variance_any_kept")  # drop_masked_rows'
        if keep is None or (any_kept if any_kept is not None else float(self.reduce(keep.sum().float())) > 0):
            return
        for name, values in self.metrics().items():
            if name != "entropy_coef":
                values[metric_marks.get(name, 0):] = [float("nan")] * (len(values) - metric_marks.get(name, 0))

    def scale_loss(self, loss: torch.Tensor, inputs: dict) -> torch.Tensor:
        """A micro-batch's loss, rescaled so that masked rows leave row-counting normalisers too (and, for a micro-batch
        whose masked rows were dropped, so that the row-normalised mean over R of its B rows equals the mean over B);
        counts kept rows."""
        if "zero_variance_keep" not in inputs:
            return loss
        self.window_kept_rows += float(inputs["zero_variance_keep"].sum())
        scale = inputs["zero_variance_loss_scale"]
        if self.loss_type in ROW_NORMALISED_LOSSES:
            scale = scale * inputs.get("zero_variance_row_factor", 1.0)
        return loss * scale

    def end_window(self) -> None:
        """At the end of an accumulation window (on every process): skip the coming optimizer step if no process
        kept a row."""
        kept = self.reduce(torch.tensor(self.window_kept_rows))
        self.skip_next_step = kept.item() == 0
        self.window_kept_rows = 0.0
        self.record("completions_dropped", float(self.reduce(torch.tensor(float(self.window_dropped_rows)))))
        self.window_dropped_rows = 0

    def guard_step(self, step: Callable) -> Callable:
        """``step`` (an optimizer's ``step``), skipped when `end_window` found nothing kept: no update, no state
        change; each skip is logged as ``zero_variance/no_update`` 1.0 and counted in ``skipped_updates`` (not logged:
        TRL averages a logged value over the logging interval, which would turn a running count into a mean)."""
        def guarded_step(*args, **kwargs):
            skip, self.skip_next_step = self.skip_next_step, False
            self.record("no_update", float(skip))
            if skip:  # every group of this step had zero variance
                self.skipped_updates += 1
                return None
            return step(*args, **kwargs)

        return guarded_step

    # -- checkpoints -----------------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """The judged reward's range so far (the causes); where resample's extra prompts continue and how its rounds
        are sized; skip's prompt history."""
        state = {"reward_range": self.reward_range.state_dict()}
        if self.source is not None:
            state.update(resample_cursor=self.source.cursor,
                         uniform_fraction_estimate=self.fraction_estimate.state_dict())
        if self.history is not None:
            state["prompt_history"] = self.history.state_dict()
        if self.pass_rates is not None:
            state["pass_rates"] = self.pass_rates.state_dict()
        return state

    def save_state(self, checkpoint: str, settings: dict | None = None) -> None:
        """Write `state_dict` and ``settings`` (`checkpoints.filter_settings`, checked on resume) to
        ``checkpoint/zero_variance_state.json``."""
        write_json(checkpoint, ZERO_VARIANCE_STATE_FILE, {**self.state_dict(), **({"settings": settings} if settings else {})})

    def load_state(self, checkpoint: str | None) -> None:
        """Restore the state `save_state` wrote in ``checkpoint``, if any (resample and skip only)."""
        path = os.path.join(checkpoint or "", ZERO_VARIANCE_STATE_FILE)
        if not checkpoint or not os.path.isfile(path):
            return
        with open(path) as f:
            state = json.load(f)
        self.reward_range.load_state_dict(state.get("reward_range", {}))
        if self.pass_rates is not None and "pass_rates" in state:
            self.pass_rates.load_state_dict(state["pass_rates"])
        if self.source is None and self.history is None:
            return
        if self.history is not None:
            if "prompt_history" not in state:
                raise ValueError(f"{path} holds no prompt history: the checkpoint was not written by a "
                                 "zero_variance_filter: skip run. Fix: resume with the filter the run was started with.")
            self.history.load_state_dict(state["prompt_history"])
            return
        if "resample_cursor" not in state:
            raise ValueError(f"{path} holds no resample cursor: the checkpoint was not written by a "
                             "zero_variance_filter: resample run. Fix: resume with the filter the run was started with.")
        self.source.cursor = state["resample_cursor"]
        if "uniform_fraction_estimate" in state:  # absent in checkpoints of earlier versions
            self.fraction_estimate.load_state_dict(state["uniform_fraction_estimate"])
