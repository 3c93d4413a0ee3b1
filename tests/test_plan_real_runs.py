"""The plan's total optimizer steps equal the trainer's final global_step on real (tiny) runs.

Expected totals are worked out by hand from TRL's sampler rule (steps/epoch = floor(N / prompts_per_generation) × μ
× steps_per_generation / GA, last partial chunk dropped) and "whichever limit is reached first".
"""

import json

import pytest
from factories import tiny_config

from trl_grpo_ext import GRPOExtTrainer
from trl_grpo_ext.models.embedded import tiny
from trl_grpo_ext.zero_variance.history import prompt_key

COMMON = dict(max_completion_length=4, rewards=["char_fraction"], learning_rate=1e-3)

CASES = {
    # 40 prompts, 4 per step -> 10 steps/epoch; 3-step limit < 1 epoch (10 steps): stops at 3 by the step limit.
    "step_limit_wins": (40, dict(prompts_per_step=4, num_generations=4, micro_batch_size=8, total_training_steps=3,
                                 total_epochs=1), 3, "step_limit"),
    # 10 prompts, 4 per step -> floor(10/4) = 2 steps/epoch (2 prompts dropped); 1.5 epochs -> ceil(3.0) = 3 < 100.
    "fractional_epoch_limit_wins": (10, dict(prompts_per_step=4, num_generations=2, micro_batch_size=4,
                                             total_training_steps=100, total_epochs=1.5), 3, "epoch_limit"),
    # num_iterations 2: each generation batch is used twice -> floor(8/4) × 2 = 4 steps/epoch; 1 epoch -> 4.
    "num_iterations_2": (8, dict(prompts_per_step=4, num_generations=2, micro_batch_size=8, num_iterations=2,
                                 total_epochs=1), 4, "epoch_limit"),
    # raw TRL fields: 8 completions per device, G 4 -> 2 prompts per step; floor(9/2) = 4 steps/epoch; 1 epoch -> 4.
    "raw_trl_fields": (9, dict(per_device_train_batch_size=8, gradient_accumulation_steps=1, num_generations=4,
                               num_train_epochs=1), 4, "epoch_limit"),
    # gradient accumulation 2 and steps_per_generation 4 (raw): generation batch 16 = 4 prompts, 2 optimizer steps
    # each; floor(12/4) = 3 generation batches × 4 / 2 = 6 steps/epoch.
    "steps_per_generation_4": (12, dict(per_device_train_batch_size=4, gradient_accumulation_steps=2,
                                        steps_per_generation=4, num_generations=4, num_train_epochs=1),
                               6, "epoch_limit"),
    # the rollout budget splits each step's 8 completions unevenly, in two rounds: the plan's steps and epochs hold;
    # floor(8/2) = 4 steps/epoch; 1 epoch -> 4
    "rollout_budget_and_signal": (8, dict(prompts_per_step=2, num_generations=4, micro_batch_size=8, total_epochs=1,
                                          zero_variance_filter="mask", rollout_budget="adaptive",
                                          zero_variance_signal="entropy"), 4, "epoch_limit"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_planned_total_equals_global_step(name, tmp_path, tiny_model_dir, tiny_tokenizer):
    num_prompts, quantities, expected_total, expected_reason = CASES[name]
    args = tiny_config(tmp_path, **COMMON, **quantities)
    trainer = GRPOExtTrainer(str(tiny_model_dir), args=args, train_dataset=tiny.count_char_dataset(num_prompts),
                             processing_class=tiny_tokenizer)
    assert (trainer.plan.total_steps, trainer.plan.stop_reason) == (expected_total, expected_reason)
    trainer.train()
    assert trainer.state.global_step == trainer.state.max_steps == expected_total
    assert args.max_steps == args.resolved.max_steps  # written once, by the config (the step limit, or -1)
    saved = json.loads((tmp_path / "run_plan.json").read_text())
    assert saved["total_steps"] == expected_total and saved["stop_reason"] == expected_reason


def test_the_trainer_takes_the_callers_plan_and_refuses_another(tmp_path, tiny_model_dir, tiny_tokenizer):
    from trl_grpo_ext.plan import resolve_plan

    num_prompts, quantities, _, _ = CASES["step_limit_wins"]
    args = tiny_config(tmp_path, **COMMON, **quantities)
    dataset = tiny.count_char_dataset(num_prompts)
    plan = resolve_plan(args.resolved.quantity_fields(), num_prompts, 1, args.max_completion_length)
    trainer = GRPOExtTrainer(str(tiny_model_dir), args=args, train_dataset=dataset, processing_class=tiny_tokenizer,
                             run_plan=plan)
    assert trainer.plan is plan  # the recipe's plan is the trainer's
    # a plan for 44 prompts: floor(44 / 4) = 11 steps per epoch instead of 10
    other = resolve_plan(args.resolved.quantity_fields(), num_prompts + 4, 1, args.max_completion_length)
    with pytest.raises(ValueError, match="dataset_size: 44 given, 40 from the config and dataset; "
                                         "generation_batches_per_epoch: 11 given, 10"):
        GRPOExtTrainer(str(tiny_model_dir), args=args, train_dataset=dataset, processing_class=tiny_tokenizer,
                       run_plan=other)


def test_a_checked_checkpoint_is_not_checked_again(tmp_path, tiny_model_dir, tiny_tokenizer, monkeypatch):
    from transformers.trainer_utils import TrainOutput
    from trl import GRPOTrainer

    from trl_grpo_ext import trainer as trainer_module
    from trl_grpo_ext.training.checkpoints import CheckedCheckpoint

    num_prompts, quantities, _, _ = CASES["step_limit_wins"]
    args = tiny_config(tmp_path, **COMMON, **quantities)
    trainer = GRPOExtTrainer(str(tiny_model_dir), args=args, train_dataset=tiny.count_char_dataset(num_prompts),
                             processing_class=tiny_tokenizer)
    checkpoint = tmp_path / "checkpoint-2"
    checkpoint.mkdir()
    (checkpoint / "trainer_state.json").write_text("{}")
    checks = []
    real_check = trainer_module.ckpt.check_checkpoint_plan
    monkeypatch.setattr(trainer_module.ckpt, "check_checkpoint_plan", lambda *a: checks.append(a) or real_check(*a))
    monkeypatch.setattr(GRPOTrainer, "train", lambda self, resume_from_checkpoint=None, **kw: TrainOutput(
        0, 0.0, {"checkpoint": resume_from_checkpoint}))
    checked = CheckedCheckpoint(str(checkpoint), trainer.plan)
    assert trainer.train(resume_from_checkpoint=checked).metrics["checkpoint"] == str(checkpoint)
    assert checks == []  # checked by the caller (the recipe) against this very plan
    assert trainer.train(resume_from_checkpoint="last").metrics["checkpoint"] == str(checkpoint)
    filter_settings = {"zero_variance_filter": args.zero_variance_filter, "skip_exploration_probability": None,
                       "zero_variance_tolerance": None, "zero_variance_reward": None, "seed": args.seed}
    assert [call[:3] for call in checks] == [(str(checkpoint), trainer.plan, filter_settings)]  # a library user's path
    assert sorted(checks[0][3]()) == sorted(prompt_key(row["prompt"]) for row in trainer.train_dataset)  # its prompts
