"""Trainer callbacks of `GRPOExtTrainer` that hold no GRPO logic (the sampler's epoch on resume)."""

from __future__ import annotations

from transformers import TrainerCallback


class SamplerEpochCallback(TrainerCallback):
    """Sets the train sampler's epoch at the start of every epoch, the resumed one included.

    transformers calls ``set_epoch`` on the train dataloader too, but accelerate does not forward it through every
    wrapper: with several processes, the dataloader of a resumed epoch (`skip_first_batches`: `SkipBatchSampler`
    around `BatchSamplerShard`) never reaches the sampler, which would then replay epoch 0's order. The epoch is
    ``global_step // steps_per_epoch`` of the plan, as transformers computes it on resume (``_init_training_state``).
    """

    def __init__(self, trainer):
        self.trainer = trainer

    def on_epoch_begin(self, args, state, control, **kwargs):
        sampler, steps_per_epoch = self.trainer._epoch_sampler, self.trainer.plan.steps_per_epoch
        if sampler is not None and steps_per_epoch:
            sampler.set_epoch(state.global_step // steps_per_epoch)
