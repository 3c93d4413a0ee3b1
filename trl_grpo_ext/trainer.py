"""`GRPOExtTrainer`: TRL's `GRPOTrainer` with the plan, the stop rule and the GRPO extensions wired in.

The trainer holds no GRPO logic of its own: the plan comes from `plan`, advantages from `advantages`, the
zero-variance filter from `zero_variance`, rewards from `rewards`, adapter precision from `adapter_precision`,
generation checks and the vLLM base-drift metric from `generation`. Every override calls `super()` and
post-processes; no TRL method body is copied. Every private TRL name relied on is listed in `_trl_compat` (and pinned
by `tests/test_trl_contract.py`); everything but the overrides' definitions goes through it.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import time
import warnings

import torch
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from . import _trl_compat
from .advantages import advantage_metrics, compute_advantages, uniform_group_signal
from .config.engines import resolve_engine
from .models.loading import is_4bit_model, is_quantized_model, keep_4bit_training_layout
from .plan import RunPlan, confirm_plan, format_plan_report, plan_warnings, seed_line
from .training import checkpoints as ckpt
from .training import console, trainer_args
from .training.adapter_precision import LostUpdateTracker, cast_trainable_to
from .training.callbacks import SamplerEpochCallback
from .training.engine_step import EngineStepGuard
from .training.generation import DRIFT_METRIC, BaseDriftMonitor, check_vllm_before_loading, preserved_dtypes
from .training.memory_probe import MemoryProbeCallback
from .training.merged_generation import check_merge_target, merged_adapter
from .training.rollout_budget import AdaptiveRollout
from .training.sampling import EpochRepeatSampler, RepeatSampler, SkippingRepeatSampler, dataset_prompts
from .zero_variance import (
    ZeroVarianceFilter,
    budget_note,
    check_skip_plan,
    judged_reward_index,
    prompt_key,
    resample_note,
    run_expectations,
    skip_note,
    start_history,
    weighted_total,
)
from .zero_variance.budget import grouped_advantages
from .zero_variance.causes import cause_signs
from .zero_variance.groups import zero_variance_group_mask

logger = logging.getLogger(__name__)


# TRL 1.16 and PEFT call these names, deprecated by transformers 5.24: one FutureWarning per generation, unavoidable.
warnings.filterwarnings(
    "ignore", message=r"`(is_gradient_checkpointing|gradient_checkpointing_(en|dis)able)` is deprecated",
    category=FutureWarning)

class GRPOExtTrainer(GRPOTrainer):
    """TRL's `GRPOTrainer` driven by a [`GRPOExtConfig`].

    Args: as `trl.GRPOTrainer`. Differences:
        reward_funcs: optional when `args.rewards` names rewards from the registry (they are built here, wrapped with
            the `args.reward_error_policy` guard); passing both is an error.
        args (`GRPOExtConfig`, *optional*): a plain `trl.GRPOConfig` trains as a `GRPOExtConfig` of the same values
            (our settings at their defaults); None: the defaults, with ``output_dir`` ``<model name>-GRPO`` (TRL's).
        run_plan (`RunPlan`, *optional*): the run's plan, resolved by the caller before any model loaded (the recipe
            does); it must be the plan of `args` on `train_dataset` (else `ValueError`). Unset: resolved here.

    Attributes:
        plan (`RunPlan`): the resolved quantities of this run, the single source of truth for every derived number
            (steps per epoch, total optimizer steps, stop reason, token budget).

    Raises:
        TypeError: `args` is not a `GRPOConfig`.
        ValueError: `reward_funcs` and `args.rewards` are both given, or no reward source (TRL's words), or no
            `train_dataset` and no `environment_factory` (TRL's words).
        ValueError: `run_plan` is not the plan of `args` on `train_dataset`.
        QuantityError: the dataset is too small for one generation batch, or has no length and no step limit.
    """

    def __init__(self, model, reward_funcs=None, args: GRPOConfig | None = None, train_dataset=None,
                 *more, run_plan: RunPlan | None = None, **kwargs):
        kwargs = trainer_args.named(more, kwargs)  # eval_dataset, processing_class, ... given by position, as TRL's
        args = trainer_args.ext_config(args, model)  # None or a plain GRPOConfig: as TRL takes them
        trainer_args.check_train_dataset(train_dataset, kwargs.get("environment_factory"))
        reward_funcs = trainer_args.reward_funcs_from_args(reward_funcs, args, kwargs.get("environment_factory"))
        if reward_funcs and not any(isinstance(f, str) for f in reward_funcs):  # names known now (else: below)
            judged_reward_index(args.resolved.zero_variance.zero_variance_reward, [_trl_compat.reward_func_name(f) for f in reward_funcs])
        dataset_size = len(train_dataset) if hasattr(train_dataset, "__len__") else None
        self.plan: RunPlan = confirm_plan(run_plan, args.resolved.quantity_fields(), dataset_size, args.world_size,
                                          args.max_completion_length)
        model_name = model if isinstance(model, str) else getattr(model, "name_or_path", "")
        zv = args.resolved.zero_variance
        # skip's streaks from skip_history_file, before any model; not read to resume (the checkpoint's history wins)
        resuming = zv.skip_history_file and ckpt.resolve_resume_checkpoint(args.resume_from_checkpoint, args.output_dir)
        history, self.history_seeded = start_history(
            zv, args.num_generations, lambda: dataset_prompts(train_dataset), bool(resuming),
            expect=run_expectations(args.resolved.rewards, args.max_completion_length, None, args.temperature))
        if zv.zero_variance_filter == "skip":
            check_skip_plan(self.plan, seeded=zv.skip_history_file is not None)
        for advice in plan_warnings(self.plan, instruct_model=True if "instruct" in str(model_name).lower() else None,
                                    loss_type=args.loss_type):
            logger.warning(advice)
        check_vllm_before_loading(model, args, kwargs.get("quantization_config"))
        if isinstance(model, str) and model.startswith("embedded:"):  # built locally, as the recipe does
            from .models.embedded.tiny import resolve_model_path

            model = resolve_model_path(model)
        super().__init__(model, reward_funcs, args=args, train_dataset=train_dataset, **kwargs)
        if is_quantized_model(self.model):
            # TRL casts a quantized model's trainable adapter weights to bf16 ("float32" undoes it); plain trainable
            # modules (a modules_to_save lm_head) get dtype hooks, without which bf16 fails: adapter_precision.
            cast_trainable_to(self.model, args.adapter_dtype, exclude=("lora_magnitude_vector",))
            # bitsandbytes repacks a 4-bit layer's weight for its CPU inference kernel on the first no-grad forward in
            # eval mode (TRL's eval loop, continuous batching's model runner) and never unpacks it for training: the
            # next training step then fails. Keep the training layout (see models.keep_4bit_training_layout).
            keep_4bit_training_layout(self.model)
        if args.merge_adapter_for_generation:  # a model built in Python; the recipe's settings: rule merged_generation
            check_merge_target(self.model, args, resolve_engine(vars(args)))
        # use_vllm on a 4-bit base (opted in): measure how far the re-quantized base drifts, once per generation batch
        self.base_drift = BaseDriftMonitor(self.model) if args.use_vllm and is_4bit_model(self.model) \
            and hasattr(self.model, "merge_adapter") else None
        self.lost_updates = LostUpdateTracker(
            args.lost_update_steps, args.lost_update_warning_threshold,
            record=lambda fraction: _trl_compat.record_metric(self, "adapter/lost_update_frac", fraction),
        )
        #: `zero_variance.ZeroVarianceFilter` of the run (judges groups for the advantages even when it is off).
        self.zero_variance = ZeroVarianceFilter(
            zv.zero_variance_filter, self.num_generations, self.reward_weights, tolerance=zv.zero_variance_tolerance,
            judged_index=judged_reward_index(zv.zero_variance_reward, self.reward_func_names),
            max_rounds=zv.max_resample_rounds, loss_type=self.loss_type, dataset_size=dataset_size, seed=args.seed,
            reward_names=self.reward_func_names, scale_rewards=self.scale_rewards, reward_funcs=self.reward_funcs,
            eos_and_pad=_trl_compat.eos_and_pad_ids(self), pad_token_id=self.processing_class.pad_token_id,
            gather=self.accelerator.gather,
            reduce=lambda value: self.accelerator.reduce(value.to(self.accelerator.device), reduction="sum"),
            process_index=self.accelerator.process_index, num_processes=self.accelerator.num_processes,
            metrics=lambda: _trl_compat.train_metrics(self), history=history,
        )
        self.rollout = AdaptiveRollout(self) if zv.rollout_budget == "adaptive" else None
        self.zero_variance.pass_rates = getattr(self.rollout, "history", None)  # saved in checkpoints with the filter
        console.install(self)  # first, so that the bar is closed before _PlanCallback logs the stop reason
        self.add_callback(_PlanCallback(self))
        self.add_callback(MemoryProbeCallback(self))  # the longest-first probe before step 1 (args.memory_probe)
        self._epoch_sampler: EpochRepeatSampler | None = None  # built with the train dataloader
        self.add_callback(SamplerEpochCallback(self))
        self.eval_plan = None  # the run's `eval_plan.EvalPlan` (set by the recipe), printed under the plan table
        self.embedded_seed = None  # the embedded task's embedded_seed (set by the recipe), named with seed there

    def create_optimizer(self, *args, **kwargs):
        """`Trainer.create_optimizer`, then attach the lost-update measurement (if `lost_update_steps` > 0) and the
        zero-variance guard of ``step`` (`engine_step.EngineStepGuard` under DeepSpeed), once per optimizer."""
        optimizer = super().create_optimizer(*args, **kwargs)
        if optimizer is self.__dict__.get("extended_optimizer"):  # asked again (DeepSpeed's init does): hooked once
            return optimizer
        self.extended_optimizer = optimizer
        self.lost_updates.attach(optimizer)
        if self.zero_variance.enabled:  # under DeepSpeed the engine steps inside backward: see engine_step
            guard = EngineStepGuard(self.zero_variance, lambda: self.state.global_step).wrap \
                if self.is_deepspeed_enabled else self.zero_variance.guard_step
            optimizer.step = guard(optimizer.step)
        return optimizer

    def _get_train_sampler(self, dataset=None):
        """TRL's `RepeatSampler`, as an `EpochRepeatSampler`: the same order, but a function of (seed, epoch), so a
        resume in any epoch trains the uninterrupted run's prompts (see `sampling`)."""
        sampler = super()._get_train_sampler(dataset)
        if type(sampler) is not RepeatSampler:
            return sampler
        if self.zero_variance.history is not None:  # skip: prompts predicted uniform are replaced before rollout
            sampler = SkippingRepeatSampler.like(
                sampler, history=self.zero_variance.history,
                exploration_probability=self.args.resolved.zero_variance.skip_exploration_probability,
                prompt_keys=[prompt_key(prompt) for prompt in dataset_prompts(sampler.data_source)])
        else:
            sampler = EpochRepeatSampler.like(sampler)
        self._epoch_sampler = sampler
        return sampler

    # -- rewards -> advantages -> zero-variance filter ---------------------------------------------------------------
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        """TRL's rewards (gathered, (N, F)); kept so the advantages below are computed from the same tensor."""
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._last_rewards_per_func = rewards_per_func
        self._last_completion_ids_list = completion_ids_list  # local rows: lengths for the trained batch's metrics
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        """TRL's generation batch, with our advantages and (if enabled) the zero-variance filter applied.

        The advantages are recomputed from TRL's gathered rewards with `advantages.compute_advantages` (equal to
        TRL's own with TRL's settings); zero-variance groups are replaced (resample) and/or masked out of the loss and
        its normaliser through TRL's `tool_mask` and `num_items_in_batch` (`zero_variance.ZeroVarianceFilter`).
        Tensor shapes never change, so every process makes the same collective calls.
        """
        metric_marks, start = _trl_compat.metric_marks(self), time.perf_counter()
        if self.rollout is not None and self.model.training:  # rollout_budget: adaptive, groups of unequal size
            output, self.zero_variance.group_sizes = self.rollout.generate(inputs, metric_marks)
        else:
            output = self._generate_and_score_keeping_dtypes(inputs)
        if self.base_drift is not None and self.model.training:
            _trl_compat.record_metric(self, DRIFT_METRIC, self.base_drift.measure(warn_at_step=self.state.global_step))
        if self.args.multi_objective_aggregation != "sum_then_normalize":
            return output
        if not self.model.training:  # TRL's eval loop: its frac_reward_zero_std recomputed, nothing else changes
            self.zero_variance.correct_trl_share(weighted_total(self._last_rewards_per_func, self.reward_weights),
                                                 _trl_compat.train_metrics(self, "eval"), self.num_generations_eval)
            return output
        zero_variance = self.zero_variance
        output, rewards, zero_variance_rows = zero_variance.select(
            output, self._last_rewards_per_func, self._last_completion_ids_list, metric_marks, self._generate_round
        )
        if zero_variance.history is not None:  # skip: the prompts' history, the same on every process
            keys = torch.tensor([prompt_key(row["prompt"]) for row in inputs], device=rewards.device)
            zero_variance.observe(self.accelerator.gather(keys), zero_variance_rows)
            zero_variance.record("prompts_skipped", getattr(self._epoch_sampler, "skipped_fraction", 0.0))
        mask, sizes = zero_variance_rows if zero_variance.enabled else None, zero_variance.group_sizes
        advantages = grouped_advantages(rewards, sizes, self.args.resolved.advantages, mask) if sizes else \
            compute_advantages(rewards, self.num_generations, self.args.resolved.advantages, zero_variance_mask=mask)
        local = zero_variance.local_rows(len(output["advantages"]))
        output["advantages"] = advantages[local].to(output["advantages"].dtype)
        if not zero_variance.enabled and zero_variance.judged_index is not None:  # TRL's advantages judge the total
            zero_variance_rows = zero_variance_group_mask(rewards, self.num_generations, zero_variance.tolerance,
                                                          sizes=sizes)
        if self.args.resolved.zero_variance.zero_variance_signal != "off":  # all right / all wrong groups: kept
            signs = cause_signs(zero_variance.causes, zero_variance.sizes(len(rewards)), rewards.device)
            output["zero_variance_signal"], zero_variance_rows = signs[local], zero_variance_rows & (signs == 0)
        zero_variance.record("completions_no_gradient", zero_variance_rows.float().mean().item())  # advantage 0 all over
        kept = zero_variance.kept_rows(zero_variance_rows)
        if kept.sum() > 1:  # with every row masked the statistics are undefined (NaN would poison the log average)
            for name, value in advantage_metrics(advantages, mask=kept).items():
                _trl_compat.record_metric(self, name, value)
        if zero_variance.enabled:
            zero_variance.mask(output, kept, local)
        zero_variance.record("generation_seconds", time.perf_counter() - start)
        zero_variance.group_sizes = None
        return output

    def _generate_round(self, indices: list[int]):
        """One extra generation round of resample: dataset rows ``indices``, each G times -> (TRL's output, the
        gathered (N, F) rewards, the local completion ids)."""
        rows = [self.train_dataset[i] for i in indices for _ in range(self.num_generations)]
        output = self._generate_and_score_keeping_dtypes(rows)
        return output, self._last_rewards_per_func, self._last_completion_ids_list

    def _generate_single_turn(self, *args, **kwargs):
        """TRL's generation; with ``merge_adapter_for_generation``, the adapter merged into the base for it."""
        with merged_adapter(self.model) if self.args.merge_adapter_for_generation else contextlib.nullcontext():
            return super()._generate_single_turn(*args, **kwargs)

    def _generate_and_score_keeping_dtypes(self, inputs):
        """TRL's generation batch; with continuous batching, the dtype cast TRL makes before it is undone after it
        (the float32 adapter stays float32 and exact, see `generation.preserved_dtypes`)."""
        if not self.use_transformers_continuous_batching:
            return super()._generate_and_score_completions(inputs)
        with preserved_dtypes(self.model):
            return super()._generate_and_score_completions(inputs)

    def _compute_loss(self, model, inputs):
        """TRL's loss; with the filter on, of the micro-batch without its masked rows (they cost no forward or
        backward: `ZeroVarianceFilter.drop_masked_rows`), rescaled so the gradient equals the masked batch's; the
        token means of a micro-batch with no kept row are not logged as 0 (`void_empty_means`)."""
        if not self.model.training:
            return super()._compute_loss(model, inputs)
        inputs, marks = self.zero_variance.drop_masked_rows(inputs), _trl_compat.metric_marks(self)
        self._signal_inputs = inputs if "zero_variance_signal" in inputs else None  # read by the method below
        loss = self.zero_variance.scale_loss(super()._compute_loss(model, inputs), inputs)
        self.zero_variance.void_empty_means(marks, inputs)
        return loss

    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        """TRL's per-token log-probabilities and entropies; in the loss of a micro-batch holding rows of all-right or
        all-wrong groups (``zero_variance_signal``), their token advantages are added from these entropies
        (`advantages.uniform_group_signal`) before TRL's loss reads ``inputs["advantages"]``."""
        logps, entropies, *rest = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        inputs, self._signal_inputs = self.__dict__.get("_signal_inputs"), None
        if inputs is not None and entropies is not None:
            mask = inputs["completion_mask"] * inputs.get("tool_mask", torch.ones_like(inputs["completion_mask"]))
            signal = uniform_group_signal(inputs["zero_variance_signal"], entropies, mask,
                                          self.args.resolved.zero_variance.zero_variance_signal_coef)
            advantages = inputs["advantages"]
            inputs["advantages"] = (advantages.unsqueeze(1) if advantages.dim() == 1 else advantages) + signal
        return (logps, entropies, *rest)

    def training_step(self, model, inputs, num_items_in_batch=None):
        """TRL's step; at the end of an accumulation window, decide (on all processes) whether anything was kept."""
        loss = super().training_step(model, inputs, num_items_in_batch)
        # sync_gradients: set by transformers on the last micro-batch of each accumulation window (a partial one too)
        if self.zero_variance.enabled and self.accelerator.sync_gradients and not self.is_deepspeed_enabled:
            self.zero_variance.end_window()  # (DeepSpeed: closed at its step, engine_step.EngineStepGuard)
        return loss

    # -- stop rule -------------------------------------------------------------------------------------------------
    def set_initial_training_values(self, args, dataloader):
        """Size the run (LR schedule, progress bar) to the plan's real stop, then let transformers do the rest.

        transformers reads the stop from ``args.max_steps``; it gets a copy of ``args`` holding the plan's
        ``total_steps``, and the config keeps the ``max_steps`` it wrote (the step limit, or -1)."""
        stop = copy.copy(args)
        stop.max_steps = self.plan.total_steps
        return super().set_initial_training_values(stop, dataloader)

    def train(self, resume_from_checkpoint=None, overwrite_output_dir: bool = False, **kwargs):
        """`Trainer.train`; a resumed run's metrics add the checkpoint's step (`checkpoints.RESUMED_FROM_STEP`).
        ``resume_from_checkpoint`` (`str`/`bool`, defaults to ``args.resume_from_checkpoint``, which transformers
        ignores): ``True``/``"last"`` is the newest *complete* checkpoint, ``False`` a new run; a checkpoint whose saved
        plan differs is refused (`QuantityError`), a `CheckedCheckpoint` of this plan (the recipe's) is not checked
        again. ``overwrite_output_dir`` (`bool`, defaults to False): a new run may overwrite an ``output_dir`` holding a
        complete checkpoint, else `ValueError` (`check_output_dir`)."""
        if resume_from_checkpoint is None:
            resume_from_checkpoint = self.args.resume_from_checkpoint
        if isinstance(resume_from_checkpoint, ckpt.CheckedCheckpoint) and resume_from_checkpoint.plan == self.plan:
            checkpoint = resume_from_checkpoint  # the adapter as loaded (all-linear, a continued one): only now known
            ckpt.check_settings_unchanged(checkpoint, {"lora": ckpt.peft_lora_settings(self.model)})
        else:
            checkpoint = ckpt.check_checkpoint_plan(
                ckpt.resolve_resume_checkpoint(resume_from_checkpoint, self.args.output_dir), self.plan,
                ckpt.filter_settings(self.args.resolved.zero_variance, self.args.seed),
                lambda: map(prompt_key, dataset_prompts(self.train_dataset)),
                ckpt.resume_settings(self.args, ckpt.peft_lora_settings(self.model)))
        ckpt.check_output_dir(self.args.output_dir, resuming=checkpoint is not None or overwrite_output_dir,
                              fixes="python")
        # the optimizer state: optimizer.pt, DeepSpeed's global_step*/, FSDP's optimizer.bin or optimizer_0/
        if checkpoint and not any(os.path.exists(os.path.join(checkpoint, f)) for f in ckpt.OPTIMIZER_STATE):
            logger.warning("%s has no optimizer.pt (saved with save_only_model=True?): training resumes with a fresh "
                           "optimizer and scheduler state, so it will not match an uninterrupted run.", checkpoint)
        self.zero_variance.load_state(checkpoint)
        if self.is_world_process_zero():  # before the progress bar starts
            self._print_plan(resumed=checkpoint is not None)
        resumed_from = ckpt.checkpoint_steps(checkpoint)[0] if checkpoint else None  # before rotation may delete it
        output = super().train(resume_from_checkpoint=checkpoint, **kwargs)
        # the train_* figures cover this call's steps (the card says so); None overwrites all_results.json's old key
        output.metrics[ckpt.RESUMED_FROM_STEP] = resumed_from
        return output

    def load_finished(self, checkpoint: str):
        """The last checkpoint of a complete run (it holds the plan's last step) loaded without training a step: the
        weights and the trainer state, for the outputs the run's end did not write (the recipe's resume of a complete
        run). Returns `TrainOutput` whose metrics hold only ``resumed_from_step`` (the checkpoint's step)."""
        from transformers import TrainerState
        from transformers.trainer_utils import TrainOutput

        _trl_compat.load_checkpoint_weights(self, checkpoint)
        self.state = TrainerState.load_from_json(os.path.join(checkpoint, "trainer_state.json"))
        losses = [entry["loss"] for entry in self.state.log_history if "loss" in entry]
        return TrainOutput(self.state.global_step, sum(losses) / len(losses) if losses else 0.0,
                           {ckpt.RESUMED_FROM_STEP: self.state.global_step})

    def _print_plan(self, resumed: bool = False) -> None:
        """The plan table, the rewards and the resample note on stdout; the plan also goes to the trackers, which read
        ``args.to_dict()`` (`GRPOExtConfig.to_dict` adds it as ``run_plan``)."""
        args = self.args
        args.run_plan = self.plan
        zv = args.resolved.zero_variance
        notes = [seed_line(args.seed, self.embedded_seed)]
        if zv.zero_variance_filter == "resample":
            notes.append(resample_note(self.plan, zv.max_resample_rounds))
        if zv.rollout_budget == "adaptive":
            notes.append(budget_note(self.plan))
        if zv.zero_variance_filter == "skip":
            notes.append(skip_note(self.plan, zv.skip_exploration_probability, self.history_seeded, zv.skip_history_file,
                                   resumed))
        print(format_plan_report(self.plan, args.resolved.rewards, notes, self.eval_plan), flush=True)


class _PlanCallback(TrainerCallback):
    """Saves the plan at the start and in every checkpoint, and logs the stop reason (`train` prints it)."""

    def __init__(self, trainer: GRPOExtTrainer):
        self.trainer = trainer

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            os.makedirs(args.output_dir, exist_ok=True)
            ckpt.write_plan(self.trainer.plan, args.output_dir)

    def on_save(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            checkpoint = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
            if os.path.isdir(checkpoint):
                ckpt.write_plan(self.trainer.plan, checkpoint)
                zv = ckpt.filter_settings(args.resolved.zero_variance, args.seed)
                self.trainer.zero_variance.save_state(checkpoint, zv)
                lora = ckpt.peft_lora_settings(self.trainer.model)
                ckpt.write_json(checkpoint, ckpt.SETTINGS_FILE, ckpt.resume_settings(args, lora))

    def on_train_end(self, args, state, control, **kwargs):
        plan = self.trainer.plan
        if state.global_step >= plan.total_steps and state.is_world_process_zero:
            covered = "" if plan.epochs_covered is None else f" ({plan.epochs_covered:.3g} epochs covered)"  # unknown
            logger.warning("Stopped at optimizer step %d by the %s%s.", state.global_step,  # for an IterableDataset
                           plan.stop_reason.replace("_", " "), covered)

