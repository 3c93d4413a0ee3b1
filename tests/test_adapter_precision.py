"""Adapter precision: `cast_trainable_to`, the lost-update measurement, and both wired into the trainer on 4-bit models.

Hand-worked numbers used below. bfloat16 keeps 8 significant bits, so a value w in [2^e, 2^(e+1)) is stored with a
spacing (ulp) of 2^(e-7), and an update smaller than half of it, 2^(e-8), rounds back to w:
- w = 1.0 (e = 0, but stepping *down* lands in [0.5, 1) whose ulp is 2^-8): 1 - 1e-4 is within 2^-9 ≈ 0.00195 of 1.0,
  so an SGD update of 1e-4 is lost;
- w = 1e-3 (e = -10, ulp 2^-17 ≈ 7.6e-6): 1e-3 - 1e-4 moves by 13 ulps, kept;
- w = 0.0: 0 - 1e-4 = -1e-4 is representable, kept;
- float32 w = 1.0: ulp 2^-23 ≈ 1.2e-7, kept.
"""

import logging

import pytest
import torch
from factories import lora, nf4, tiny_trainer
from torch import nn

from trl_grpo_ext.training.adapter_precision import LostUpdateTracker, cast_trainable_to

LOGGER = "trl_grpo_ext.training.adapter_precision"


# -- cast_trainable_to ------------------------------------------------------------------------------------------------
def _bf16_model():
    model = nn.ModuleDict({"head": nn.Linear(2, 1), "frozen": nn.Linear(2, 2)}).to(torch.bfloat16)
    model["frozen"].requires_grad_(False)
    with torch.no_grad():
        model["head"].weight.copy_(torch.tensor([[0.5, 0.25]]))
        model["head"].bias.fill_(0.125)
    return model


def test_cast_counts_changed_tensors_and_leaves_frozen_ones():
    model = _bf16_model()
    assert cast_trainable_to(model, "float32") == 2  # head.weight, head.bias
    assert model["head"].weight.dtype == model["head"].bias.dtype == torch.float32
    assert model["frozen"].weight.dtype == torch.bfloat16
    assert cast_trainable_to(model, torch.float32) == 0  # already float32


def test_hooks_run_a_bf16_input_through_a_float32_linear_and_return_bf16():
    model = _bf16_model()
    cast_trainable_to(model, "float32")
    x = torch.tensor([[1.0, 2.0]], dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="dtype"):  # the failure the hooks prevent
        nn.functional.linear(x, model["head"].weight, model["head"].bias)
    out = model["head"](x)
    assert out.dtype == torch.bfloat16
    assert out.item() == 0.5 * 1.0 + 0.25 * 2.0 + 0.125  # 1.125, exact in bf16
    assert model["head"](x.float()).dtype == torch.float32  # output follows the input's dtype


def test_cast_is_idempotent_no_double_hooks():
    model = _bf16_model()
    cast_trainable_to(model, "float32")
    cast_trainable_to(model, "float32")
    cast_trainable_to(model, "bfloat16")
    head = model["head"]
    assert len(head._forward_pre_hooks) == 1 and len(head._forward_hooks) == 1
    assert not model["frozen"]._forward_pre_hooks  # no trainable parameter, no hook
    assert head.weight.dtype == torch.bfloat16
    assert head(torch.tensor([[1.0, 2.0]])).dtype == torch.float32  # the hook follows the latest cast


def test_lora_layers_get_no_hooks_and_exclude_keeps_dtype():
    model = nn.ModuleDict({"lora_A": nn.Linear(2, 2), "lora_magnitude_vector": nn.Linear(2, 2)})
    assert cast_trainable_to(model, "bfloat16", exclude=("lora_magnitude_vector",)) == 2  # lora_A weight and bias
    assert model["lora_A"].weight.dtype == torch.bfloat16
    assert model["lora_magnitude_vector"].weight.dtype == torch.float32
    assert not model["lora_A"]._forward_pre_hooks  # peft's LoRA layers cast their own input


def test_unknown_dtype_name_is_a_value_error():
    with pytest.raises(ValueError, match="'fp8'"):
        cast_trainable_to(nn.Linear(2, 2), "fp8")


# -- LostUpdateTracker ------------------------------------------------------------------------------------------------
def _hand_example():
    """bf16 [1.0, 1e-3, 1.0, 0.0] with gradient [1, 1, 0, 1] and float32 [1.0] with gradient [1]; SGD lr 1e-4.

    Counted (non-zero gradient): 4 elements. Lost: only bf16 w = 1.0 with gradient 1 (see the module docstring).
    """
    low = nn.Parameter(torch.tensor([1.0, 1e-3, 1.0, 0.0], dtype=torch.bfloat16))
    high = nn.Parameter(torch.tensor([1.0]))
    no_grad = nn.Parameter(torch.tensor([1.0], dtype=torch.bfloat16))  # grad stays None: not counted
    optimizer = torch.optim.SGD([low, high, no_grad], lr=1e-4)

    def set_grads():
        low.grad = torch.tensor([1.0, 1.0, 0.0, 1.0], dtype=torch.bfloat16)
        high.grad = torch.tensor([1.0])

    return optimizer, set_grads


def test_tracker_hand_computed_fraction_and_record():
    optimizer, set_grads = _hand_example()
    recorded = []
    tracker = LostUpdateTracker(every=1, threshold=1.0, record=recorded.append)
    tracker.attach(optimizer)
    set_grads()
    optimizer.step()
    assert tracker.history == recorded == [0.25]  # 1 lost of 4 with a non-zero gradient


def test_tracker_measures_every_nth_step_only():
    optimizer, set_grads = _hand_example()
    tracker = LostUpdateTracker(every=2, threshold=1.0)
    tracker.attach(optimizer)
    for _ in range(4):  # measured: steps 1 and 3
        set_grads()
        optimizer.step()
    # step 3: bf16 1.0 is still 1.0 (lost again); 1e-3 and 0.0 moved on; float32 0.9998 moved on
    assert tracker.history == [0.25, 0.25]


def test_tracker_off_and_all_zero_gradients_record_nothing():
    optimizer, _ = _hand_example()
    off = LostUpdateTracker(every=0, threshold=0.0)
    off.attach(optimizer)
    assert not optimizer._optimizer_step_pre_hooks
    on = LostUpdateTracker(every=1, threshold=0.0)
    on.attach(optimizer)
    for group in optimizer.param_groups:
        for p in group["params"]:
            p.grad = torch.zeros_like(p)
    optimizer.step()
    assert on.history == [] and off.history == []


def test_warning_above_threshold_once_and_says_what_to_change(caplog):
    optimizer, set_grads = _hand_example()
    tracker = LostUpdateTracker(every=1, threshold=0.2)
    tracker.attach(optimizer)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for _ in range(2):
            set_grads()
            optimizer.step()
    warnings = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(warnings) == 1, warnings  # 0.25 > 0.2 twice, warned once
    assert "25%" in warnings[0] and "optimizer step 1" in warnings[0]
    assert "bfloat16" in warnings[0] and "adapter_dtype: float32" in warnings[0]


def test_no_warning_at_or_below_threshold(caplog):
    optimizer, set_grads = _hand_example()
    tracker = LostUpdateTracker(every=1, threshold=0.25)
    tracker.attach(optimizer)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        set_grads()
        optimizer.step()
    assert tracker.history == [0.25]
    assert not [r for r in caplog.records if r.name == LOGGER]


def test_float32_only_warning_points_at_the_learning_rate(caplog):
    p = nn.Parameter(torch.tensor([1.0]))
    optimizer = torch.optim.SGD([p], lr=1e-9)  # 1e-9 < 2^-24: below float32's half-ulp at 1.0
    tracker = LostUpdateTracker(every=1, threshold=0.5)
    tracker.attach(optimizer)
    p.grad = torch.tensor([1.0])
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        optimizer.step()
    assert tracker.history == [1.0]
    (message,) = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert "learning_rate" in message and "adapter_dtype" not in message


# -- the trainer on the tiny model, NF4 + LoRA r=8 + trainable lm_head, lr 1e-5 ----------------------------------------
LR = 1e-5
STEPS = 3


def _trainer(tmp_path, adapter_dtype: str, compute_dtype=torch.float32, steps: int = STEPS):
    from trl_grpo_ext.models.embedded import tiny

    return tiny_trainer(
        tmp_path, None, tiny.count_char_dataset(64), quantization_config=nf4(compute_dtype),
        peft_config=lora(modules_to_save=["lm_head"]), prompts_per_step=2, num_generations=8, micro_batch_size=16,
        total_training_steps=steps, max_completion_length=24, learning_rate=LR, rewards=["char_fraction"],
        adapter_dtype=adapter_dtype, lost_update_steps=1, model_init_kwargs={"dtype": compute_dtype},
    )


def _first_step_bounds(trainer) -> tuple[float, float]:
    """Lost fraction expected at optimizer step 1, from the rounding rule alone (before training).

    At step 1 every lora_B is zero, so every lora_A gradient is exactly zero (not counted) and the counted elements
    are lora_B and the lm_head copy. Adam's first update is lr·g/(|g| + eps) ≈ ±lr. An element is lost for sure if
    w ± lr both round back to w, and may be lost if one of them does (the sign of g decides).
    """
    sure = maybe = counted = 0
    for name, p in trainer.model.named_parameters():
        if not p.requires_grad or "lora_A" in name:
            continue
        w = p.detach()
        down = (w.float() - LR).to(w.dtype) == w
        up = (w.float() + LR).to(w.dtype) == w
        sure, maybe, counted = sure + int((down & up).sum()), maybe + int((down | up).sum()), counted + w.numel()
    return sure / counted, maybe / counted


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """adapter_dtype -> (first-step bounds, tracker history, logged adapter/lost_update_frac, final dtypes, warnings)."""
    results = {}
    for adapter_dtype in ("bfloat16", "float32"):
        handler = _Collect()
        logging.getLogger(LOGGER).addHandler(handler)
        try:
            trainer = _trainer(tmp_path_factory.mktemp(adapter_dtype), adapter_dtype)
            bounds = _first_step_bounds(trainer)
            trainer.train()
        finally:
            logging.getLogger(LOGGER).removeHandler(handler)
        logged = [e["adapter/lost_update_frac"] for e in trainer.state.log_history if "adapter/lost_update_frac" in e]
        dtypes = {p.dtype for p in trainer.model.parameters() if p.requires_grad}
        results[adapter_dtype] = bounds, trainer.lost_updates.history, logged, dtypes, handler.messages
    print({k: [round(f, 5) for f in v[1]] for k, v in results.items()})  # the numbers for the report (pytest -s)
    return results


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def test_bf16_adapters_lose_updates_float32_adapters_do_not(runs):
    _, bf16, _, bf16_dtypes, _ = runs["bfloat16"]
    _, fp32, _, fp32_dtypes, _ = runs["float32"]
    assert bf16_dtypes == {torch.bfloat16} and fp32_dtypes == {torch.float32}
    assert len(bf16) >= 3 and len(fp32) >= 3  # a step whose gradient is all zero is not measured
    assert max(fp32) <= 0.01  # the acceptance bar
    assert min(bf16) >= 0.2  # at every measured step, above the default warning threshold
    assert sum(bf16) / len(bf16) >= 100 * max(sum(fp32) / len(fp32), 1e-4)


def test_first_step_fraction_matches_the_bf16_rounding_rule(runs):
    for adapter_dtype in ("bfloat16", "float32"):
        (sure, maybe), history, *_ = runs[adapter_dtype]
        assert sure - 0.001 <= history[0] <= maybe + 0.001, (adapter_dtype, sure, maybe, history[0])
    assert runs["bfloat16"][0][0] > 0.2  # the rule predicts heavy loss for bf16 (lm_head init std 0.02 >> 2^8·lr)
    assert runs["float32"][0][1] == 0.0  # and none for float32


def test_fraction_is_logged_as_a_trainer_metric(runs):
    for adapter_dtype in ("bfloat16", "float32"):
        _, history, logged, _, _ = runs[adapter_dtype]
        assert logged == pytest.approx(history, rel=1e-6)


def test_trainer_warns_for_bf16_adapters_only(runs):
    bf16_messages, fp32_messages = runs["bfloat16"][4], runs["float32"][4]
    assert len(bf16_messages) == 1 and "adapter_dtype: float32" in bf16_messages[0]
    assert fp32_messages == []


def test_float32_adapters_with_bf16_compute_and_trainable_lm_head(tmp_path):
    """The QLoRA setting (model and compute in bf16) with a float32 `modules_to_save` lm_head: generation and loss run.

    Without the dtype hooks the lm_head matmul fails with "expected m1 and m2 to have the same dtype".
    """
    trainer = _trainer(tmp_path, "float32", compute_dtype=torch.bfloat16, steps=1)
    lm_head = trainer.model.base_model.model.lm_head.modules_to_save["default"]
    inputs = []
    lm_head.register_forward_pre_hook(lambda module, args: inputs.append(args[0]), prepend=True)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_B" in n or "lm_head" in n}
    before = {n: p for n, p in before.items() if dict(trainer.model.named_parameters())[n].requires_grad}
    trainer.train()
    assert inputs and {x.dtype for x in inputs} == {torch.bfloat16}  # the mismatched case really ran
    with pytest.raises(RuntimeError, match="dtype"):
        nn.functional.linear(inputs[0], lm_head.weight)
    params = dict(trainer.model.named_parameters())
    assert {params[n].dtype for n in before} == {torch.float32}
    assert all(not torch.equal(params[n].detach(), w) for n, w in before.items())  # lm_head and every lora_B moved
    assert trainer.state.log_history[0]["completions/mean_length"] > 0
