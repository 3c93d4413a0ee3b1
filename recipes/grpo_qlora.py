# Copyright the trl-grpo-ext authors. Licensed under the Apache License, Version 2.0.
"""GRPO with a 4-bit NF4 QLoRA policy: on one GPU, or on the embedded tiny model on a CPU.

    # one GPU, a real model (needs the Hugging Face Hub)
    accelerate launch --config_file recipes/accelerate_configs/single_gpu.yaml \
        recipes/grpo_qlora.py --config recipes/configs/qwen2.5-0.5b-instruct_gsm8k.yaml

    # the embedded default: a tiny model built locally, CPU, no network
    accelerate launch --config_file recipes/accelerate_configs/cpu.yaml \
        recipes/grpo_qlora.py --config recipes/configs/tiny_cpu.yaml

Any config key can be overridden on the command line (`--learning_rate 1e-5`). The script reads top to bottom:
arguments -> data, plan and resume checks -> tokenizer -> model settings -> trainer -> train -> save -> evaluate -> plot ->
model card -> push.
"""

import sys

from accelerate.utils import set_seed
from huggingface_hub import constants as hf_constants

from trl_grpo_ext import GRPOExtTrainer
from trl_grpo_ext.config.recipe_parse import parse_recipe_args, set_offline_defaults, write_run_config
from trl_grpo_ext.data.load import drop_long_prompts, load_eval_dataset, load_prompt_dataset
from trl_grpo_ext.evaluation.evaluate import final_evaluation
from trl_grpo_ext.hub import HubPushError, build_model_card, push_settings
from trl_grpo_ext.hub.plot import plot_training, reward_trend
from trl_grpo_ext.models.embedded import tiny
from trl_grpo_ext.models.loading import (
    continued_lora_differences,
    load_continued_model,
    lora_config,
    quantization_config,
    run_tokenizer,
)
from trl_grpo_ext.models.settings import cpu_bf16_warning, load_dtype
from trl_grpo_ext.models.source import resolve_model_source
from trl_grpo_ext.plan import resolve_plan
from trl_grpo_ext.plan.evaluation import resolve_eval_plan
from trl_grpo_ext.rewards.spec import weight_warnings
from trl_grpo_ext.training.checkpoints import (
    ResumeSettingsError,
    RunComplete,
    check_checkpoint_plan,
    check_output_dir,
    config_lora_settings,
    filter_settings,
    resolve_resume_checkpoint,
    resume_settings,
)
from trl_grpo_ext.training.console import closing_line, defer_closing_line
from trl_grpo_ext.training.finished import complete_line, outputs_written
from trl_grpo_ext.training.host_memory import retain_freed_memory
from trl_grpo_ext.training.interrupt import GracefulInterrupt, exit_run
from trl_grpo_ext.zero_variance.history import prompt_key


def main(script_args, training_args, model_args, push_args) -> int:
    ################
    # Seed, push settings (TRL's push_to_hub=True means "push the adapter once, after everything is saved")
    ################
    set_seed(training_args.seed)
    push = push_args.resolve(training_args)
    training_args.hub_token = None  # the push keeps it; training_args.bin in output_dir and checkpoints never does

    ################
    # Data, plan and resume check: every error here is answered in one line before any model loads (the dataset's rows
    # were checked once, with the config, by parse_recipe_args: validation/dataset_stage.py)
    ################
    try:
        if training_args.device.type == "cpu":  # freed activations stay in the process, not faulted in every step
            memory = retain_freed_memory()
            if training_args.process_index == 0:
                print(f"host memory: {memory}")
        train_dataset = load_prompt_dataset(script_args)  # an embedded task: its embedded_seed's rows
        if script_args.max_prompt_length is not None:  # counted in tokens of the run's tokenizer and chat template
            train_dataset = drop_long_prompts(train_dataset, run_tokenizer(model_args, script_args.chat_template),
                                              script_args.max_prompt_length)
        plan = resolve_plan(training_args.resolved.quantity_fields(), len(train_dataset), training_args.world_size,
                            training_args.max_completion_length)  # the run's plan, resolved once: the trainer gets it
        evaluating = training_args.eval_strategy != "no" or script_args.final_eval != "none"
        eval_dataset = load_eval_dataset(script_args, split="test", num_prompts=script_args.eval_num_prompts) \
            if evaluating else None
        eval_plan = resolve_eval_plan(
            eval_prompts=len(eval_dataset) if eval_dataset is not None else None,
            eval_strategy=training_args.eval_strategy, eval_steps=training_args.eval_steps,
            logging_steps=training_args.logging_steps, num_generations=training_args.num_generations,
            num_generations_eval=training_args.num_generations_eval,
            per_device_eval_batch_size=training_args.per_device_eval_batch_size,
            world_size=training_args.world_size, total_steps=plan.total_steps, steps_per_epoch=plan.steps_per_epoch,
            final_eval=script_args.final_eval, split_rows=script_args.eval_num_prompts is None,
        )
        complete = None  # a checkpoint holding the plan's last step: nothing is trained, the missing outputs written
        try:
            checkpoint = check_checkpoint_plan(  # once per run: the trainer does not check a checked checkpoint again
                resolve_resume_checkpoint(training_args.resume_from_checkpoint, training_args.output_dir), plan,
                filter_settings(training_args.resolved.zero_variance, training_args.seed),
                lambda: map(prompt_key, train_dataset["prompt"]),
                resume_settings(training_args, config_lora_settings(model_args)))
        except RunComplete as done:  # e.g. a retry loop's command after a kill that fell after the last checkpoint
            if outputs_written(training_args.output_dir, done.checkpoint):
                print(complete_line(training_args.output_dir, done.checkpoint, done.step, done.total_steps, False))
                return 0
            checkpoint = complete = done.checkpoint
        check_output_dir(training_args.output_dir, resuming=checkpoint is not None or script_args.overwrite_output_dir)
    except (ValueError, OSError) as err:  # QuantityError is a ValueError; datasets raises OSError subclasses
        print(f"error: {err}", file=sys.stderr)
        return 2
    for warning in weight_warnings(training_args.resolved.rewards):
        print(f"warning: {warning}", file=sys.stderr)
    if push.enabled and hf_constants.HF_HUB_OFFLINE:  # the push (hub.push_run) reads the same switch
        print(f"warning: HF_HUB_OFFLINE is set, so the push to {push.repo_id} after training will fail; everything "
              "is written to output_dir first, and `trl-grpo-ext push` sends it later. Unset HF_HUB_OFFLINE to push "
              "at the end of this run.", file=sys.stderr)

    ################
    # Tokenizer (an earlier run's adapter as model_name_or_path is continued: its base loads, the adapter trains on)
    ################
    source = resolve_model_source(model_args.model_name_or_path)
    model_path = tiny.resolve_model_path(model_args.model_name_or_path)
    try:
        tokenizer = run_tokenizer(model_args, script_args.chat_template)
    except ValueError as err:  # a Hub model that cannot be reached: one line, not transformers' traceback
        print(f"error: {err}", file=sys.stderr)
        return 2

    ################
    # Model settings: 4-bit NF4 base + LoRA adapter (TRL loads the model inside the trainer)
    ################
    training_args.model_init_kwargs = {
        "revision": model_args.model_revision,
        "attn_implementation": model_args.attn_implementation,
        "dtype": load_dtype(model_args, training_args),
        **(training_args.model_init_kwargs or {}),
    }

    if training_args.device.type == "cpu" and training_args.process_index == 0 and (
            warning := cpu_bf16_warning(training_args.model_init_kwargs["dtype"], training_args.bf16)):
        print(f"warning: {warning}", file=sys.stderr)
    peft_config, quantization = lora_config(model_args), quantization_config(model_args, training_args)
    if source.continued:
        print(source.describe())
        for difference in continued_lora_differences(model_args, source.adapter):
            print(f"warning: the adapter keeps its own LoRA settings; not used: {difference}", file=sys.stderr)
        model_path = load_continued_model(source, training_args, quantization)  # trainable PeftModel
        peft_config = quantization = training_args.model_init_kwargs = None  # used above, not again by TRL

    ################
    # Trainer (rewards come from `rewards:` in the config, through the registry; TRL's eval loop scores the held-out
    # split with the same rewards every `eval_steps`)
    ################
    trainer = GRPOExtTrainer(
        model=model_path,
        args=training_args,
        train_dataset=train_dataset,
        run_plan=plan,
        eval_dataset=eval_dataset if training_args.eval_strategy != "no" else None,
        processing_class=tokenizer,
        quantization_config=quantization,
        peft_config=peft_config,
    )

    trainer.eval_plan = eval_plan  # printed with the plan table when training starts
    defer_closing_line(trainer)  # the uniform groups' causes and fix: the run's last line, after the files below
    if tiny.is_embedded(script_args.dataset_name):
        trainer.embedded_seed = script_args.embedded_seed

    ################
    # Train (Ctrl-C / SIGTERM saves a checkpoint and prints the resume command); a complete run: its last checkpoint
    # loaded, no step trained, for the outputs below
    ################
    if complete:
        train_result = trainer.load_finished(complete)
    else:
        try:
            with GracefulInterrupt(trainer) as interrupt:
                train_result = trainer.train(resume_from_checkpoint=checkpoint,
                                             overwrite_output_dir=script_args.overwrite_output_dir)
        except ResumeSettingsError as err:  # the adapter as loaded against the checkpoint's, before its state loads
            print(f"error: {err}", file=sys.stderr)
            return 2
        if interrupt.stopped:
            trainer.end()
            return interrupt.report()

    ################
    # Save: adapter, tokenizer, metrics, trainer state (every process takes part), then, on the main process only,
    # the run config, plot and model card: all local, before any upload
    ################
    trainer.save_model(training_args.output_dir)
    trainer.save_metrics("train", train_result.metrics)
    trainer.save_state()
    exit_code = 0
    if trainer.accelerator.is_main_process:
        write_run_config(training_args.output_dir, script_args, training_args, model_args, push_args, source)
        logged = any(isinstance(entry.get("reward"), (int, float)) for entry in trainer.state.log_history)
        if logged:
            first, last = reward_trend(trainer.state.log_history)
            print(f"Mean reward: {first:.3f} over the first 10% of steps -> {last:.3f} over the last 10%")
        else:
            print(f"No reward was logged with a value (logging_steps={training_args.logging_steps} for "
                  f"{trainer.state.global_step} steps, or every completion unscored): no reward trend and no reward "
                  "plot.")

        ################
        # Final evaluation: greedy accuracy on the held-out prompts (and the base's, on the same prompts)
        ################
        if script_args.final_eval != "none":
            evaluation = final_evaluation(trainer, tokenizer, eval_dataset,
                                          compare_base=script_args.final_eval == "compare_base",
                                          num_samples=script_args.final_eval_num_samples)
            print(evaluation.report)
            print(f"Evaluation: {evaluation.write(training_args.output_dir)}")
        if script_args.plot and logged:
            plot = plot_training(trainer.state.log_history, f"{training_args.output_dir}/reward_plot.png")
            print(f"Reward plot: {plot}")
        build_model_card(training_args.output_dir, mode=push.mode if push.enabled else "adapter",
                         repo_id=push.repo_id).save(f"{training_args.output_dir}/README.md")
        saved = "Adapter" if model_args.use_peft or source.continued else "Model"  # a full fine-tune saves the model
        print(f"{saved} and tokenizer: {training_args.output_dir}")
        if complete:
            print(complete_line(training_args.output_dir, complete, trainer.state.global_step, plan.total_steps, True))

        ################
        # Push (optional)
        ################
        if push.enabled:
            try:
                print(f"Pushed to {push_settings(push, training_args.output_dir)}")
            except HubPushError as err:
                print(f"error: {err}", file=sys.stderr)
                exit_code = 1
        uniform = closing_line(trainer.state.log_history, trainer.plan) if logged else None
        if uniform:
            print(uniform)

    ################
    # End: finish the trackers and destroy the process group on every process
    ################
    trainer.end()
    return exit_code


if __name__ == "__main__":
    set_offline_defaults()
    exit_run(main(*parse_recipe_args()))
