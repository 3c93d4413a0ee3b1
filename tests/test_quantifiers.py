"""Plans of worked examples, with every expected number worked out by hand in the comments.

Reference arithmetic (TRL 1.16 RepeatSampler + transformers' set_initial_training_values):
  generation batch [completions] = per_device × world × steps_per_generation (spg, default = GA)
  prompts per generation = generation batch / G; generation batches per epoch = floor(N / prompts per generation)
  micro-batches per process per epoch = generation batches × num_iterations × spg
  steps per epoch = ceil(micro-batches / GA); total = min(step limit, ceil(epochs × steps per epoch)) for our fields.
"""

import json
import sys

import pytest

from trl_grpo_ext.plan import QuantityError, RunPlan, plan_warnings, resolve_plan, resolve_trl_fields
from trl_grpo_ext.training.checkpoints import check_resume_compatible


def plan_of(values, dataset_size, world_size=1, max_completion_length=64):
    return resolve_plan(resolve_trl_fields(values, world_size), dataset_size, world_size, max_completion_length)


# ---------------------------------------------------------------------------------------------------------------------
# the three worked examples
# ---------------------------------------------------------------------------------------------------------------------


def test_tutorial_example_stops_by_step_limit():
    # 4 prompts × 8 = 32 completions/step; steps/epoch = floor(2000 / 4) = 500; epoch limit = 3 × 500 = 1500;
    # min(1000, 1500) = 1000 by the step limit; 1000 / 500 = 2.0 epochs.
    plan = plan_of({"prompts_per_step": 4, "num_generations": 8, "total_training_steps": 1000, "total_epochs": 3},
                   2000, max_completion_length=256)
    assert plan.completions_per_step == 32
    assert plan.steps_per_epoch == 500
    assert plan.total_steps == 1000
    assert plan.stop_reason == "step_limit"
    assert plan.epochs_covered == 2.0
    assert plan.epoch_limit_steps == 1500
    # default micro-batch: largest divisor of 32 that is <= 8 -> 8, so 32 / 8 = 4 accumulation steps
    assert (plan.micro_batch_size, plan.gradient_accumulation_steps, plan.steps_per_generation) == (8, 4, 4)
    # token budget: 32 completions × 256 tokens = 8192 per step; × 1000 steps = 8,192,000
    assert plan.token_budget == 8192 and plan.token_budget_total == 8_192_000
    assert plan.completions_total == 32_000


def test_epoch_limit_without_step_limit():
    # G defaults to 8: 10 × 8 = 80 completions; floor(1000 / 10) = 100 steps/epoch; 15 × 100 = 1500 by epochs.
    plan = plan_of({"prompts_per_step": 10, "total_epochs": 15}, 1000)
    assert plan.steps_per_epoch == 100
    assert plan.total_steps == 1500
    assert plan.stop_reason == "epoch_limit"
    assert plan.step_limit is None
    assert plan.epochs_covered == 15.0


def test_three_processes_in_trl_terms():
    # 4 completions × 3 processes × GA 2 = 24 completions = 24 / 6 = 4 prompts/step; generation batch 24 (spg = GA)
    # = 4 prompts; floor(8000 / 4) = 2000 batches; per process 2000 × 1 × 2 = 4000 micro-batches / GA 2 = 2000
    # steps/epoch; 2 epochs -> 4000 steps.
    values = {"num_generations": 6, "per_device_train_batch_size": 4, "gradient_accumulation_steps": 2,
              "num_train_epochs": 2}
    plan = plan_of(values, 8000, world_size=3)
    assert plan.prompts_per_step == 4
    assert plan.steps_per_epoch == 2000
    assert plan.total_steps == 4000
    assert plan.stop_reason == "epoch_limit" and plan.stop_semantics == "trl"


def test_three_processes_in_our_terms_matches_trl_terms():
    # same run stated in our fields: 4 × 6 = 24 completions, 24 / 3 = 8 per process, 8 / 4 = GA 2.
    fields = resolve_trl_fields({"prompts_per_step": 4, "num_generations": 6, "micro_batch_size": 4,
                                 "total_epochs": 2}, 3)
    assert (fields["per_device_train_batch_size"], fields["gradient_accumulation_steps"]) == (4, 2)
    plan = resolve_plan(fields, 8000, 3, 64)
    assert (plan.steps_per_epoch, plan.total_steps, plan.stop_reason) == (2000, 4000, "epoch_limit")


# ---------------------------------------------------------------------------------------------------------------------
# own examples
# ---------------------------------------------------------------------------------------------------------------------


def test_two_processes_dataset_not_divisible():
    # 6 × 4 = 24 completions, 12 per process, micro 3 -> GA 4; generation batch 3 × 2 × 4 = 24 = 6 prompts.
    # floor(100 / 6) = 16 batches (4 prompts left out); 16 × 1 × 4 / 4 = 16 steps/epoch; 2 epochs = 32 steps.
    plan = plan_of({"prompts_per_step": 6, "num_generations": 4, "micro_batch_size": 3, "total_epochs": 2}, 100,
                   world_size=2)
    assert plan.gradient_accumulation_steps == 4
    assert plan.prompts_per_generation == 6
    assert plan.generation_batches_per_epoch == 16
    assert plan.prompts_dropped_per_epoch == 4
    assert plan.steps_per_epoch == 16
    assert plan.total_steps == 32


def test_num_iterations_two_doubles_steps_per_epoch():
    # 4 × 4 = 16 completions, micro 8 -> GA 2 = spg. floor(40 / 4) = 10 batches; 10 × μ 2 × 2 / 2 = 20 steps/epoch.
    # 1 epoch = 20 steps; 16 × 20 = 320 completions through the loss, 320 / 2 = 160 generated.
    plan = plan_of({"prompts_per_step": 4, "num_generations": 4, "micro_batch_size": 8, "num_iterations": 2,
                    "total_epochs": 1}, 40)
    assert plan.steps_per_epoch == 20
    assert plan.total_steps == 20
    assert plan.completions_total == 320
    assert "(160 generated)" in plan.format_table()


def test_dataset_not_divisible_by_prompts_per_step():
    # 10 × 2 = 20 completions; default micro = largest divisor of 20 <= 8 = 5 -> GA 4.
    # floor(1003 / 10) = 100 steps/epoch, 3 prompts left out.
    plan = plan_of({"prompts_per_step": 10, "num_generations": 2, "total_epochs": 1}, 1003)
    assert (plan.micro_batch_size, plan.gradient_accumulation_steps) == (5, 4)
    assert plan.steps_per_epoch == 100 and plan.total_steps == 100
    assert plan.prompts_dropped_per_epoch == 3


def test_fractional_epoch_limit():
    # 100 steps/epoch; ceil(2.5 × 100) = 250 steps by the epoch limit; with a 300-step limit min(300, 250) = 250.
    plan = plan_of({"prompts_per_step": 10, "total_epochs": 2.5, "total_training_steps": 300}, 1000)
    assert plan.total_steps == 250
    assert plan.stop_reason == "epoch_limit"
    assert plan.epochs_covered == 2.5


def test_fractional_epoch_limit_follows_transformers_float_arithmetic():
    # floor(500 / 10) = 50 steps/epoch; transformers computes ceil(1.1 * 50) in floats: 1.1 is stored as
    # 1.100000000000000088817841970012523, and 1.1 * 50 rounds to 55.00000000000001, so the run takes 56 steps, not 55.
    plan = plan_of({"prompts_per_step": 10, "total_epochs": 1.1}, 500)
    assert plan.steps_per_epoch == 50
    assert plan.total_steps == 56


def test_steps_per_generation_differs_from_gradient_accumulation():
    # per_device 4 × 1 × spg 2 = 8 completions = 2 prompts per generation; floor(12 / 2) = 6 batches;
    # per process 6 × 1 × 2 = 12 micro-batches; ceil(12 / GA 3) = 4 steps/epoch; 4 × 1 × 3 / 4 = 3 prompts/step.
    plan = plan_of({"per_device_train_batch_size": 4, "gradient_accumulation_steps": 3, "steps_per_generation": 2,
                    "num_generations": 4, "num_train_epochs": 1}, 12)
    assert (plan.generation_batch_size, plan.prompts_per_generation) == (8, 2)
    assert plan.steps_per_epoch == 4 and plan.total_steps == 4
    assert plan.prompts_per_step == 3
    assert "ceil(floor(12 / 2) × 1 × 2 / 3) = 4" in plan.format_table()


def test_last_optimizer_step_of_an_epoch_is_partial():
    # as above with GA 5: ceil(12 / 5) = 3 steps/epoch (5 + 5 + 2 micro-batches); 2 epochs = ceil(2 × 3) = 6.
    plan = plan_of({"per_device_train_batch_size": 4, "gradient_accumulation_steps": 5, "steps_per_generation": 2,
                    "num_generations": 4, "num_train_epochs": 2}, 12)
    assert plan.steps_per_epoch == 3 and plan.total_steps == 6
    assert plan.prompts_per_step == 5  # 4 × 5 / 4


def test_raw_trl_max_steps_overrides_epochs():
    # TRL defaults per_device 8, GA 1, G 8 -> 1 prompt/step; floor(100 / 1) = 100 steps/epoch.
    # max_steps 50 > 0 wins over num_train_epochs 0.2 (which alone would stop at ceil(0.2 × 100) = 20) -> 50 steps;
    # our fields with the same limits stop at the first reached: 20.
    raw = plan_of({"max_steps": 50, "num_train_epochs": 0.2}, 100)
    assert (raw.total_steps, raw.stop_reason, raw.stop_semantics) == (50, "step_limit", "trl")
    assert raw.epoch_limit_steps == 20
    ours = plan_of({"total_training_steps": 50, "total_epochs": 0.2}, 100)
    assert (ours.total_steps, ours.stop_reason, ours.stop_semantics) == (20, "epoch_limit", "first_reached")


def test_raw_trl_defaults_alone():
    # nothing set: per_device 8, GA 1, G 8 -> 1 prompt/step, 64 / 1 = 64 steps/epoch, num_train_epochs 3 -> 192.
    plan = plan_of({}, 64)
    assert (plan.prompts_per_step, plan.steps_per_epoch, plan.total_steps) == (1, 64, 192)
    assert plan.stop_semantics == "trl"
    # TRL's default max_steps -1 is no step limit: the table does not credit a "max_steps > 0" rule that did not apply
    assert "stopped by the epoch limit (TRL's rule: max_steps ≤ 0, so num_train_epochs decides)" in plan.format_table()
    raw = plan_of({"max_steps": 50, "num_train_epochs": 0.2}, 100)
    assert "stopped by the step limit (TRL's rule: max_steps > 0 wins)" in raw.format_table()


def test_raw_generation_batch_size():
    # generation_batch_size 16 / (per_device 4 × 1) = spg 4; 16 / 4 = 4 prompts per generation; floor(20 / 4) = 5
    # batches × 1 × 4 = 20 micro-batches / GA 1 = 20 steps/epoch; num_train_epochs 3 -> 60; prompts/step = 4/4 = 1.
    plan = plan_of({"per_device_train_batch_size": 4, "generation_batch_size": 16, "num_generations": 4}, 20)
    assert (plan.steps_per_generation, plan.prompts_per_generation) == (4, 4)
    assert (plan.steps_per_epoch, plan.total_steps, plan.prompts_per_step) == (20, 60, 1)


def test_fractional_prompts_per_step_from_raw_fields():
    # per_device 2 × 1 × GA 1 = 2 completions per step = 2 / 4 = 1/2 prompt; spg 2 -> generation batch 4 = 1 prompt.
    # floor(10 / 1) = 10 batches × 2 = 20 micro-batches = 20 steps/epoch.
    plan = plan_of({"per_device_train_batch_size": 2, "steps_per_generation": 2, "num_generations": 4,
                    "num_train_epochs": 1}, 10)
    assert plan.prompts_per_step == 0.5
    assert plan.total_steps == 20
    assert any("1/2 prompts per optimizer step is not a whole number" in w for w in plan_warnings(plan))


def test_four_processes_three_iterations_fractional_epochs():
    # 8 × 4 = 32 completions, 8 per process, micro 2 -> GA 4; generation batch 2 × 4 × 4 = 32 = 8 prompts.
    # floor(50 / 8) = 6 batches; per process 6 × 3 × 4 = 72 micro-batches / 4 = 18 steps/epoch.
    # ceil(1.5 × 18) = 27 by epochs < 30 by steps.
    plan = plan_of({"prompts_per_step": 8, "num_generations": 4, "micro_batch_size": 2, "num_iterations": 3,
                    "total_epochs": 1.5, "total_training_steps": 30}, 50, world_size=4)
    assert plan.gradient_accumulation_steps == 4
    assert plan.steps_per_epoch == 18
    assert (plan.total_steps, plan.stop_reason, plan.epochs_covered) == (27, "epoch_limit", 1.5)


def test_micro_batch_only_picks_smallest_whole_step():
    # micro 6 × 1 process, G 4: lcm(6, 4) = 12 completions = 3 prompts, GA 12 / 6 = 2.
    fields = resolve_trl_fields({"micro_batch_size": 6, "num_generations": 4}, 1)
    assert (fields["prompts_per_step"], fields["micro_batch_size"], fields["gradient_accumulation_steps"]) == (3, 6, 2)
    # micro 8, G 8: lcm 8 -> 1 prompt, GA 1 (TRL's default shape).
    fields = resolve_trl_fields({"micro_batch_size": 8}, 1)
    assert (fields["prompts_per_step"], fields["gradient_accumulation_steps"]) == (1, 1)


def test_prompts_per_step_only_picks_largest_divisor_up_to_8():
    # 3 × 8 = 24: divisors <= 8 are 1, 2, 3, 4, 6, 8 -> 8, GA 3. 5 × 7 = 35: 1, 5, 7 -> 7, GA 5.
    assert resolve_trl_fields({"prompts_per_step": 3}, 1)["gradient_accumulation_steps"] == 3
    fields = resolve_trl_fields({"prompts_per_step": 5, "num_generations": 7}, 1)
    assert (fields["per_device_train_batch_size"], fields["gradient_accumulation_steps"]) == (7, 5)


def test_unknown_dataset_size_plans_steps_only():
    plan = plan_of({"prompts_per_step": 4, "total_training_steps": 100, "total_epochs": 2}, None)
    assert (plan.total_steps, plan.stop_reason) == (100, "step_limit")
    assert plan.steps_per_epoch is None and plan.epochs_covered is None
    assert any("cannot be checked without the dataset size" in w for w in plan_warnings(plan))


def test_tie_between_limits_is_reported_as_step_limit():
    # floor(100 / 10) = 10 steps/epoch; 2 epochs = 20 = the step limit.
    plan = plan_of({"prompts_per_step": 10, "total_training_steps": 20, "total_epochs": 2}, 100)
    assert (plan.total_steps, plan.stop_reason) == (20, "step_limit")


# ---------------------------------------------------------------------------------------------------------------------
# fields written for TRL
# ---------------------------------------------------------------------------------------------------------------------


def test_fields_written_for_step_limit_only():
    fields = resolve_trl_fields({"prompts_per_step": 4, "total_training_steps": 1000}, 1)
    # num_train_epochs = 1000.0 is worth >= 1000 steps, so it can never stop the run first.
    assert (fields["max_steps"], fields["num_train_epochs"], fields["stop_semantics"]) == (1000, 1000.0,
                                                                                          "first_reached")
    assert fields["steps_per_generation"] is None and fields["generation_batch_size"] is None
    assert fields["total_epochs"] is None


def test_fields_written_for_epoch_limit_only():
    fields = resolve_trl_fields({"prompts_per_step": 4, "total_epochs": 2.5}, 1)
    assert (fields["max_steps"], fields["num_train_epochs"]) == (-1, 2.5)


def test_resolving_written_fields_again_is_stable():
    first = resolve_trl_fields({"prompts_per_step": 4, "num_generations": 8, "micro_batch_size": 4,
                                "total_training_steps": 100}, 2)
    # a config whose TRL fields were already written (plus TRL's own spg = GA) resolves to the same thing
    again = {k: first[k] for k in ("prompts_per_step", "micro_batch_size", "total_training_steps", "total_epochs",
                                   "per_device_train_batch_size", "gradient_accumulation_steps", "max_steps",
                                   "num_train_epochs", "num_generations", "num_iterations")}
    again["steps_per_generation"] = first["gradient_accumulation_steps"]
    assert resolve_trl_fields(again, 2) == first


def test_raw_field_equal_to_what_ours_write_is_accepted():
    fields = resolve_trl_fields({"prompts_per_step": 4, "micro_batch_size": 16, "per_device_train_batch_size": 16}, 1)
    assert fields["gradient_accumulation_steps"] == 2  # 32 / 16


def test_our_stop_fields_with_raw_batch_fields():
    # batch in TRL terms, stop in ours: 4 × 2 / 4 = 2 prompts/step; floor(10 / 2) = 5 steps/epoch; min(7, 10) = 7.
    plan = plan_of({"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2, "num_generations": 4,
                    "total_training_steps": 7, "total_epochs": 2}, 10)
    assert (plan.prompts_per_step, plan.steps_per_epoch, plan.total_steps) == (2, 5, 7)
    assert plan.stop_semantics == "first_reached"


# ---------------------------------------------------------------------------------------------------------------------
# RunPlan serialisation and display
# ---------------------------------------------------------------------------------------------------------------------


def test_to_dict_from_dict_and_json_round_trip():
    plan = plan_of({"prompts_per_step": 4, "total_training_steps": 1000, "total_epochs": 3}, 2000)
    assert RunPlan.from_dict(plan.to_dict()) == plan
    assert RunPlan.from_dict(json.loads(plan.to_json())) == plan
    with pytest.raises(QuantityError, match="missing keys"):
        RunPlan.from_dict({k: v for k, v in plan.to_dict().items() if k != "total_steps"})


def test_a_saved_plan_rebuilds_itself_and_its_table(tmp_path):
    """What the model card needs: run_plan.json -> the same RunPlan -> the same table, units and arithmetic."""
    # raw TRL fields: 2 completions per step / G 4 = 1/2 prompt per step (a float); spg 2 -> 1 prompt per generation
    # batch, floor(10 / 1) × 2 = 20 steps/epoch; 1.5 epochs -> ceil(1.5 × 20) = 30 steps (float values round-trip)
    plan = plan_of({"per_device_train_batch_size": 2, "steps_per_generation": 2, "num_generations": 4,
                    "num_train_epochs": 1.5}, 10)
    assert (plan.prompts_per_step, plan.epoch_limit, plan.total_steps, plan.epochs_covered) == (0.5, 1.5, 30, 1.5)
    path = tmp_path / "run_plan.json"
    path.write_text(plan.to_json())
    again = RunPlan.read(path)
    assert again == plan and again.format_table() == plan.format_table()
    assert "1/2 (≈0.5) prompts" in again.format_table()
    assert RunPlan.from_json(plan.to_json()) == plan
    with pytest.raises(QuantityError, match="not a saved RunPlan: a JSON list"):
        RunPlan.from_json("[1, 2]")
    with pytest.raises(QuantityError, match="not a saved RunPlan: not JSON"):
        RunPlan.from_json("total_steps: 3")


def test_format_table_shows_arithmetic_and_units():
    table = plan_of({"prompts_per_step": 4, "total_training_steps": 1000, "total_epochs": 3}, 2000).format_table()
    assert "floor(2000 / 4) × 1 = 500" in table
    assert "ceil(3 × 500) = 1500 steps" in table
    assert "min(1000, 1500) stopped by the step limit" in table
    # token budget: 32 completions × 64 tokens = 2048 per step
    assert "32 completions" in table and "2,048 tokens" in table


def test_plan_is_frozen():
    plan = plan_of({"prompts_per_step": 4}, 100)
    with pytest.raises(AttributeError):
        plan.total_steps = 1


# ---------------------------------------------------------------------------------------------------------------------
# warnings
# ---------------------------------------------------------------------------------------------------------------------


def test_no_warnings_for_the_tutorial_example():
    plan = plan_of({"prompts_per_step": 4, "total_training_steps": 1000, "total_epochs": 3}, 2000)
    assert plan_warnings(plan, instruct_model=True) == []


def test_warning_small_group_for_instruct_model():
    plan = plan_of({"prompts_per_step": 4, "num_generations": 4, "total_epochs": 1}, 100)
    assert plan_warnings(plan, instruct_model=False) == []
    (warning,) = plan_warnings(plan, instruct_model=True)
    assert "num_generations=4" in warning and "num_generations=8 or more" in warning


def test_warning_one_prompt_per_step_and_many_epochs():
    plan = plan_of({"prompts_per_step": 1, "total_epochs": 6}, 100)
    warns = plan_warnings(plan)
    assert any("prompts_per_step=1" in w and "at least 2–4" in w for w in warns)
    assert any("covers 6 epochs" in w for w in warns)


def test_warning_step_limit_before_one_epoch():
    # 100 steps/epoch, step limit 40 -> 0.4 epochs with total_epochs 2 set.
    plan = plan_of({"prompts_per_step": 10, "total_training_steps": 40, "total_epochs": 2}, 1000)
    (warning,) = plan_warnings(plan)
    assert "total_training_steps=40 stops after 0.4 of an epoch" in warning and "100 or more" in warning


def test_warning_trl_max_steps_overrides_epochs():
    plan = plan_of({"max_steps": 4000, "num_train_epochs": 1, "per_device_train_batch_size": 32}, 8000)
    # 32 / 8 = 4 prompts/step, 2000 steps/epoch; 4000 steps = 2 epochs although num_train_epochs = 1.
    (warning,) = plan_warnings(plan)
    assert "max_steps=4000 overrides num_train_epochs=1" in warning
    assert "would stop earlier, at step 2000" in warning and "covers 2 epochs" in warning
    # the usual TRL short run: max_steps before num_train_epochs (TRL's default 3) stops: nothing to advise
    assert plan_warnings(plan_of({"max_steps": 10, "per_device_train_batch_size": 32}, 8000)) == []


def test_warning_memory_suggests_a_micro_batch_that_fits():
    # micro 8 × 4096 tokens × 2 bytes × 151,936 vocab = 9,957,081,088 B = 9.27 GiB, + 0.5e9 × 0.5 B = 0.23 GiB
    # -> 9.5 GiB > 8 GiB. micro 4: 4.64 + 0.23 = 4.87 GiB fits; 8 does not -> suggest 4.
    plan = plan_of({"prompts_per_step": 4, "total_epochs": 1}, 100, max_completion_length=4096)
    (warning,) = plan_warnings(plan, gpu_memory_gib=8, model_params=0.5e9)
    assert "needs at least 9.5 GiB" in warning and "micro_batch_size=4" in warning
    assert plan_warnings(plan, gpu_memory_gib=10, model_params=0.5e9) == []
    # what fits is said too (the same lower bound: 9.273 + 0.233 = 9.506 GiB), and nothing where the warning speaks
    from trl_grpo_ext.plan.advice import memory_note

    assert "micro-batch of 8 × 4096 tokens needs at least 9.51 GiB, within it" in memory_note(plan, 10, 0.5e9)
    assert "9.27 GiB (no --model-params: the weights not counted)" in memory_note(plan, 10)
    assert memory_note(plan, 8, 0.5e9) is None


# ---------------------------------------------------------------------------------------------------------------------
# resume
# ---------------------------------------------------------------------------------------------------------------------


def test_resume_with_the_same_plan_passes(recwarn):
    plan = plan_of({"prompts_per_step": 4, "total_training_steps": 1000, "total_epochs": 3}, 2000)
    check_resume_compatible(plan.to_dict(), plan)
    assert len(recwarn) == 0


def test_resume_with_other_prompts_per_step_is_refused_listing_every_difference():
    saved = plan_of({"prompts_per_step": 4, "total_training_steps": 1000, "total_epochs": 3}, 2000).to_dict()
    now = plan_of({"prompts_per_step": 8, "total_training_steps": 1000, "total_epochs": 3}, 2000)
    with pytest.raises(QuantityError) as info:
        check_resume_compatible(saved, now)
    message = str(info.value)
    assert "prompts_per_step: 4 in the checkpoint, 8 now" in message
    assert "steps_per_epoch: 500 in the checkpoint, 250 now" in message  # floor(2000 / 8) = 250
    assert "start a new output_dir" in message


def test_resume_with_a_new_step_limit_is_refused():
    saved = plan_of({"prompts_per_step": 4, "total_training_steps": 1000}, 2000).to_dict()
    with pytest.raises(QuantityError, match="total_steps: 1000 in the checkpoint, 2000 now"):
        check_resume_compatible(saved, plan_of({"prompts_per_step": 4, "total_training_steps": 2000}, 2000))


def test_resume_with_other_micro_batch_is_explained_not_refused():
    saved = plan_of({"prompts_per_step": 4, "micro_batch_size": 8, "total_epochs": 1}, 2000).to_dict()
    now = plan_of({"prompts_per_step": 4, "micro_batch_size": 4, "total_epochs": 1}, 2000)
    with pytest.warns(UserWarning, match="micro_batch_size: 8 in the checkpoint, 4 now"):
        check_resume_compatible(saved, now)


def test_module_imports_no_heavy_library():
    import subprocess

    code = ("import sys, trl_grpo_ext.plan; "
            "print(sorted(m for m in ('torch', 'transformers', 'trl') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
