"""Invalid quantity combinations: each is rejected before any model loads, naming the field(s) and a fix."""

import math

import pytest

from trl_grpo_ext.plan import QuantityError, RunPlan, resolve_plan, resolve_trl_fields

# (id, values, world_size, substrings the message must contain: the field with its value, then the fix)
FIELD_CASES = [
    ("G=1", {"num_generations": 1}, 1, ["num_generations=1", "2 or more"]),
    ("G=0", {"num_generations": 0}, 1, ["num_generations=0", "2 or more"]),
    ("G fractional", {"num_generations": 2.5}, 1, ["num_generations=2.5", "an integer", "2 or more"]),
    ("G string", {"num_generations": "8"}, 1, ["num_generations='8'", "an integer"]),
    ("num_iterations=0", {"num_iterations": 0}, 1, ["num_iterations=0", "num_iterations=1"]),
    ("prompts_per_step=0", {"prompts_per_step": 0}, 1, ["prompts_per_step=0", "prompts_per_step=4"]),
    ("prompts_per_step<0", {"prompts_per_step": -4}, 1, ["prompts_per_step=-4", "prompts_per_step=4"]),
    ("prompts_per_step fractional", {"prompts_per_step": 2.5}, 1, ["prompts_per_step=2.5", "an integer"]),
    ("prompts_per_step bool", {"prompts_per_step": True}, 1, ["prompts_per_step=True", "an integer"]),
    ("micro_batch_size=0", {"micro_batch_size": 0}, 1, ["micro_batch_size=0", "micro_batch_size=8"]),
    # 4 × 8 = 32 completions on 1 process; divisors of 32
    ("micro does not divide", {"prompts_per_step": 4, "num_generations": 8, "micro_batch_size": 6}, 1,
     ["micro_batch_size=6 does not divide the 32 completions per step on 1 process; valid: 1, 2, 4, 8, 16, 32"]),
    ("micro larger than step", {"prompts_per_step": 4, "num_generations": 8, "micro_batch_size": 64}, 1,
     ["micro_batch_size=64", "valid: 1, 2, 4, 8, 16, 32"]),
    # 4 × 8 = 32 completions / 2 processes = 16 each; divisors of 16
    ("micro on two processes", {"prompts_per_step": 4, "num_generations": 8, "micro_batch_size": 3}, 2,
     ["micro_batch_size=3", "16 completions per step on each of 2 processes", "valid: 1, 2, 4, 8, 16"]),
    # 3 × 6 = 18 completions on 4 processes: prompts_per_step must be even (4 / gcd(6, 4) = 2)
    ("step not shareable by processes", {"prompts_per_step": 3, "num_generations": 6}, 4,
     ["prompts_per_step=3", "4 processes cannot share", "multiples of 2, nearest 2 or 4"]),
    ("total_training_steps=0", {"total_training_steps": 0}, 1, ["total_training_steps=0", "positive number"]),
    ("total_training_steps<0", {"total_training_steps": -10}, 1, ["total_training_steps=-10", "positive number"]),
    ("total_training_steps fractional", {"total_training_steps": 10.5}, 1,
     ["total_training_steps=10.5", "an integer"]),
    ("total_epochs=0", {"total_epochs": 0}, 1, ["total_epochs=0", "positive number of passes"]),
    ("total_epochs<0", {"total_epochs": -1}, 1, ["total_epochs=-1", "positive number of passes"]),
    ("total_epochs nan", {"total_epochs": math.nan}, 1, ["total_epochs=nan", "must be a number > 0", "positive number"]),
    ("total_epochs inf", {"total_epochs": math.inf}, 1, ["total_epochs=inf", "must be a number > 0", "positive number"]),
    ("total_epochs string", {"total_epochs": "3"}, 1, ["total_epochs='3'", "positive number"]),
    # conflicts between our fields and raw TRL fields: both named, and what ours would write
    ("prompts_per_step vs per_device", {"prompts_per_step": 4, "per_device_train_batch_size": 16}, 1,
     ["prompts_per_step=4 conflicts with per_device_train_batch_size=16: set one of them",
      "writes per_device_train_batch_size=8", "Remove per_device_train_batch_size"]),
    ("prompts_per_step vs GA", {"prompts_per_step": 4, "gradient_accumulation_steps": 2}, 1,
     ["prompts_per_step=4 conflicts with gradient_accumulation_steps=2", "gradient_accumulation_steps=4",
      "set one of them"]),
    # micro 4, G 8 -> lcm(4, 8) = 8 completions = 1 prompt, GA 2, so steps_per_generation would be 2
    ("micro vs steps_per_generation", {"micro_batch_size": 4, "steps_per_generation": 8}, 1,
     ["micro_batch_size=4 conflicts with steps_per_generation=8", "steps_per_generation=2", "set one of them"]),
    ("prompts_per_step vs generation_batch_size", {"prompts_per_step": 4, "generation_batch_size": 64}, 1,
     ["prompts_per_step=4 conflicts with generation_batch_size=64", "generation_batch_size=32", "set one of them"]),
    ("total_training_steps vs max_steps", {"total_training_steps": 100, "max_steps": 200}, 1,
     ["total_training_steps=100 conflicts with max_steps=200", "set one of them"]),
    ("total_epochs vs num_train_epochs", {"total_epochs": 2, "num_train_epochs": 5}, 1,
     ["total_epochs=2 conflicts with num_train_epochs=5", "set one of them"]),
    ("total_training_steps vs num_train_epochs", {"total_training_steps": 100, "num_train_epochs": 2}, 1,
     ["total_training_steps=100 conflicts with num_train_epochs=2", "set one of them"]),
    # raw TRL fields alone
    ("generation_batch_size and steps_per_generation", {"generation_batch_size": 16, "steps_per_generation": 2}, 1,
     ["generation_batch_size=16 and steps_per_generation=2", "remove one"]),
    ("generation_batch_size not multiple of global batch", {"generation_batch_size": 12}, 1,
     ["generation_batch_size=12", "multiple of per_device_train_batch_size × processes", "nearest valid: 8 or 16"]),
    # 8 × 1 × 1 = 8 completions not a multiple of G 6: per_device must be a multiple of 6
    ("per_device vs G", {"num_generations": 6}, 1,
     ["per_device_train_batch_size=8", "num_generations=6", "multiples of 6, nearest 6 or 12", "prompts_per_step"]),
    # lcm(8, 16) = 16
    ("generation_batch_size vs G", {"generation_batch_size": 24, "num_generations": 16}, 1,
     ["generation_batch_size=24", "num_generations=16", "multiples of 16, nearest 16 or 32"]),
    ("max_steps=0", {"max_steps": 0}, 1, ["max_steps=0", "use -1", "positive number"]),
    ("num_train_epochs=0", {"num_train_epochs": 0}, 1, ["num_train_epochs=0", "set num_train_epochs > 0"]),
    ("per_device=0", {"per_device_train_batch_size": 0}, 1, ["per_device_train_batch_size=0", "use e.g. 8"]),
    ("per_device None", {"per_device_train_batch_size": None}, 1, ["per_device_train_batch_size=None", "use e.g. 8"]),
    ("GA=0", {"gradient_accumulation_steps": 0}, 1, ["gradient_accumulation_steps=0", "use 1 or more"]),
    ("steps_per_generation=0", {"steps_per_generation": 0}, 1, ["steps_per_generation=0", "positive value"]),
    ("world_size=0", {}, 0, ["world_size=0", "number of training processes"]),
    ("typo in a field name", {"prompt_per_step": 4}, 1, ["prompt_per_step", "known: prompts_per_step"]),
]


@pytest.mark.parametrize("values, world_size, expected", [c[1:] for c in FIELD_CASES], ids=[c[0] for c in FIELD_CASES])
def test_invalid_fields_are_rejected_with_field_and_fix(values, world_size, expected):
    with pytest.raises(QuantityError) as info:
        resolve_trl_fields(values, world_size)
    for text in expected:
        assert text in str(info.value)
    assert "\n" not in str(info.value)  # the plan command prints one line


def _plan(values, dataset_size, world_size=1, resolved_world=1, max_completion_length=64):
    return resolve_plan(resolve_trl_fields(values, resolved_world), dataset_size, world_size, max_completion_length)


# (id, thunk, substrings)
PLAN_CASES = [
    # 4 prompts per generation batch but only 3 prompts
    ("dataset smaller than a generation batch", lambda: _plan({"prompts_per_step": 4}, 3),
     ["dataset_size=3", "0 steps", "at least 4 prompts or lower prompts_per_step"]),
    ("unknown dataset size and no step limit", lambda: _plan({"prompts_per_step": 4, "total_epochs": 1}, None),
     ["dataset size unknown", "set total_training_steps", "--dataset-size"]),
    ("max_completion_length=0", lambda: _plan({"prompts_per_step": 4}, 100, max_completion_length=0),
     ["max_completion_length=0", "maximum tokens per completion"]),
    ("negative dataset size", lambda: _plan({"prompts_per_step": 4}, -1), ["dataset_size=-1", "number of prompts"]),
    ("world size differs from the resolved one", lambda: _plan({"prompts_per_step": 4}, 100, world_size=2),
     ["world_size=2", "prompts_per_step=4", "pass resolve_plan the world_size given to resolve_trl_fields"]),
    ("fields without any stop", lambda: resolve_plan({"stop_semantics": "first_reached"}, 100, 1, 64),
     ["no stop", "set total_training_steps or total_epochs"]),
    ("not a saved plan", lambda: RunPlan.from_dict({"total_steps": 3}), ["missing keys", "RunPlan.to_dict()"]),
]


@pytest.mark.parametrize("thunk, expected", [c[1:] for c in PLAN_CASES], ids=[c[0] for c in PLAN_CASES])
def test_invalid_plans_are_rejected_with_field_and_fix(thunk, expected):
    with pytest.raises(QuantityError) as info:
        thunk()
    for text in expected:
        assert text in str(info.value)


def test_at_least_thirty_invalid_combinations_are_enumerated():
    assert len(FIELD_CASES) + len(PLAN_CASES) >= 30


def test_quantity_error_is_a_value_error():
    assert issubclass(QuantityError, ValueError)
