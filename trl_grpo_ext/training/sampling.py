"""A train sampler whose prompt order is a function of (seed, epoch), so a resume in any epoch replays it exactly.

TRL's `RepeatSampler` seeds one `torch.Generator` once, in its constructor, and draws one permutation per
``__iter__``: epoch e gets the (e+1)-th permutation of that generator. transformers 5.24 does not replay finished
epochs through the sampler when it resumes (``Trainer._run_epoch`` skips batches of the resumed epoch only), so a
freshly built sampler in a resumed run hands epoch e the *first* permutation, epoch 0's: the resumed run trains
another prompt order than the uninterrupted one.

`EpochRepeatSampler` is TRL's `RepeatSampler` plus ``set_epoch``: transformers calls ``set_epoch(epoch)`` on the
train dataloader before iterating each epoch (accelerate forwards it to the sampler), and ``__iter__`` reseeds the
generator and advances it by ``epoch`` permutations before TRL's own ``__iter__`` draws the epoch's. The order of
epoch e is therefore the (e+1)-th permutation of ``torch.Generator().manual_seed(seed)``: identical to TRL's
uninterrupted order, whatever happened before (a resume, a dataloader rebuilt). Cost: e extra ``randperm`` calls of
the dataset size per epoch.

Nothing here imports the trainer.
"""

from __future__ import annotations

import torch

from .._trl_compat import repeat_sampler_class
from ..config.checks import Range

#: TRL's GRPO train sampler (``trl.trainer.utils.RepeatSampler``).
RepeatSampler = repeat_sampler_class()


def dataset_prompts(dataset) -> list:
    """The ``prompt`` of every row: the column of a `datasets.Dataset`, else row by row."""
    if "prompt" in (getattr(dataset, "column_names", None) or ()):
        return list(dataset["prompt"])
    return [row["prompt"] for row in dataset]


class EpochRepeatSampler(RepeatSampler):
    """TRL's `RepeatSampler` whose permutation depends only on ``(seed, epoch)``.

    Args: as `trl.trainer.utils.RepeatSampler` (``data_source``, ``mini_repeat_count``, ``batch_size`` [prompts per
        generation batch], ``repeat_count``, ``shuffle``, ``seed``).

    Attributes:
        epoch (`int`): the epoch the next ``__iter__`` yields, 0-based; set by ``set_epoch`` (transformers calls it at
            the start of every epoch, also the resumed one). Starts at 0; each ``__iter__`` advances it by one, so
            without ``set_epoch`` calls the order is TRL's.

    Raises:
        ValueError: ``shuffle=True`` with ``seed=None`` (an unseeded order cannot be replayed on resume).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.shuffle and self.seed is None:
            raise ValueError("EpochRepeatSampler(shuffle=True) needs a seed: an unseeded order cannot be replayed.")
        self.epoch = 0

    @classmethod
    def like(cls, sampler: RepeatSampler, **kwargs) -> EpochRepeatSampler:
        """A sampler of this class with the settings of TRL's ``sampler`` (as `GRPOTrainer._get_train_sampler` built
        it); ``kwargs``: a subclass's own arguments."""
        return cls(
            data_source=sampler.data_source,
            mini_repeat_count=sampler.mini_repeat_count,
            batch_size=sampler.batch_size,
            repeat_count=sampler.repeat_count,
            shuffle=sampler.shuffle,
            seed=sampler.seed,
            **kwargs,
        )

    def set_epoch(self, epoch: int) -> None:
        """Make the next ``__iter__`` yield epoch ``epoch`` (0-based) of the seeded sequence.

        Raises:
            ValueError: ``epoch`` is negative.
        """
        self.epoch = Range(low=0, integer=True, fix="epochs count from 0.").check("epoch", epoch, error=ValueError)

    def __iter__(self):
        epoch, self.epoch = self.epoch, self.epoch + 1  # without a set_epoch call, the next iteration is the next epoch
        if self.shuffle:
            self.generator.manual_seed(self.seed)
            for _ in range(epoch):  # the permutations TRL's generator drew for the epochs before this one
                torch.randperm(self.num_samples, generator=self.generator)
        return super().__iter__()


class SkippingRepeatSampler(EpochRepeatSampler):
    """`EpochRepeatSampler` that skips prompts predicted uniform before rollout (``zero_variance_filter: skip``).

    Each epoch yields TRL's order of that epoch, one generation batch (a chunk of ``batch_size`` rows, each
    ``mini_repeat_count`` times, the chunk ``repeat_count`` times) at a time, with every skipped row of the batch
    replaced (`zero_variance.history.skip_substitutes`). A batch is decided when its first index is drawn, from the
    streaks of that moment; the dataloader draws ahead of training, so the prompts of the batches decided but not yet
    rolled out (their streaks are stale) fill its slots only when no other prompt can. Each decision is recorded in
    the `PromptHistory` so a resumed epoch replays it. The same length, the same chunks and repeats, so the plan's steps per epoch and stop
    rule are unchanged.

    Args:
        *args, **kwargs: as `EpochRepeatSampler`.
        history (`PromptHistory`): shared with the trainer, which records every rollout in it.
        exploration_probability (`float`): ``skip_exploration_probability``.
        prompt_keys (`list[int]`): `prompt_key` of every dataset row.

    Attributes:
        skipped_fraction (`float`): share of the prompt slots decided so far in the current epoch whose row was
            replaced (0.0 before the epoch's first batch).
    """

    def __init__(self, *args, history, exploration_probability: float, prompt_keys: list[int], **kwargs):
        super().__init__(*args, **kwargs)
        self.history, self.exploration_probability, self.prompt_keys = history, exploration_probability, prompt_keys
        self.skipped_fraction = 0.0

    def __iter__(self):
        epoch = self.epoch
        return self._batches(super().__iter__(), epoch, self.history.epoch_decisions(epoch))

    def _batches(self, order, epoch: int, decisions: list[dict[int, int]]):
        from itertools import islice

        from ..zero_variance.history import skip_substitutes

        size, slots, replaced = self.batch_size * self.mini_repeat_count * self.repeat_count, 0, 0
        self.skipped_fraction, generated = 0.0, []  # generated: each batch's prompt keys, after its substitutions
        for index, batch in enumerate(iter(lambda: list(islice(order, size)), [])):
            rows = list(dict.fromkeys(batch))  # each row once, in order
            if len(decisions) <= index:
                pending = {key for keys in generated[self.history.observed_in_epoch():] for key in keys}
                decisions.append(skip_substitutes(rows, self.prompt_keys, self.history.streaks,
                                                  self.exploration_probability, self.seed or 0, epoch, index, pending))
            substitutes = decisions[index]
            generated.append([self.prompt_keys[substitutes.get(row, row)] for row in rows])
            slots, replaced = slots + len(rows), replaced + len(substitutes)
            self.skipped_fraction = replaced / slots
            yield from (substitutes.get(i, i) for i in batch)
