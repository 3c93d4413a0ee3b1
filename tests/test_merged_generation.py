"""`merge_adapter_for_generation`: the LoRA adapter merged into the float32 base for each generation.

The merged weight is worked out by hand (W + (alpha / r) B @ A, LoRA's formula: Hu et al. 2021, eq. 3, with PEFT's
scaling alpha / r), the merged model's logits are compared with the unmerged model's, and after the block every base
weight must be bit for bit what it was (no W + ΔW − ΔW rounding left behind).
"""

from __future__ import annotations

import pytest
import torch
from factories import LORA_TARGETS, lora, nf4, tiny_trainer

from trl_grpo_ext.config.checks import RunArgumentError
from trl_grpo_ext.config.engines import Engine
from trl_grpo_ext.models.embedded import tiny
from trl_grpo_ext.training.generation import check_merge_target, check_merged_generation, merged_adapter

R, ALPHA = 4, 8


def _peft_tiny(seed: int = 0):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(tiny.ensure_tiny_model(), dtype=torch.float32)
    # init_lora_weights=False: B is random too, so the adapter changes the output (B = 0 would merge nothing)
    return get_peft_model(model, LoraConfig(r=R, lora_alpha=ALPHA, target_modules=LORA_TARGETS,
                                            init_lora_weights=False))


def _lora_layers(model):
    from peft.tuners.lora import LoraLayer

    return [m for m in model.modules() if isinstance(m, LoraLayer)]


def test_merged_weights_are_lora_formula_and_restored_exactly():
    model = _peft_tiny()
    layers = _lora_layers(model)
    assert len(layers) == 2 * len(LORA_TARGETS)  # the tiny model's 2 layers
    before = [layer.get_base_layer().weight.detach().clone() for layer in layers]
    by_hand = [w + (ALPHA / R) * layer.lora_B["default"].weight @ layer.lora_A["default"].weight
               for w, layer in zip(before, layers)]
    ids = torch.tensor([[5, 9, 12, 3, 7, 1]])
    with torch.no_grad():
        unmerged_logits = model(input_ids=ids).logits
        with merged_adapter(model) as merged:
            assert merged == len(layers)
            for layer, expected in zip(layers, by_hand):
                torch.testing.assert_close(layer.get_base_layer().weight, expected, rtol=0, atol=1e-6)
            merged_logits = model(input_ids=ids).logits
    torch.testing.assert_close(merged_logits, unmerged_logits, rtol=0, atol=1e-5)
    for layer, w in zip(layers, before):
        assert torch.equal(layer.get_base_layer().weight, w)  # bit for bit
        assert not layer.merged


def test_merged_forward_skips_the_adapter_path():
    """The saving: while merged, no LoRA A or B product runs (a forward hook on every lora_A counts calls)."""
    model = _peft_tiny()
    calls = []
    for layer in _lora_layers(model):
        layer.lora_A["default"].register_forward_hook(lambda *_: calls.append(1))
    ids = torch.tensor([[5, 9, 12]])
    with torch.no_grad():
        model(input_ids=ids)
        unmerged_calls = len(calls)
        with merged_adapter(model):
            model(input_ids=ids)
    assert unmerged_calls == 2 * len(LORA_TARGETS)
    assert len(calls) == unmerged_calls  # none while merged


def test_restored_after_an_error_inside_the_block():
    model = _peft_tiny()
    before = [layer.get_base_layer().weight.detach().clone() for layer in _lora_layers(model)]
    with pytest.raises(RuntimeError, match="boom"), merged_adapter(model):
        raise RuntimeError("boom")
    assert all(torch.equal(layer.get_base_layer().weight, w) for layer, w in zip(_lora_layers(model), before))


def test_check_merge_target_refuses_what_cannot_merge():
    from transformers import AutoModelForCausalLM

    plain = AutoModelForCausalLM.from_pretrained(tiny.ensure_tiny_model())
    with pytest.raises(ValueError, match="merge_adapter_for_generation=True needs a LoRA adapter to merge, but the "
                                         "model is a Qwen2ForCausalLM. Fix: remove merge_adapter_for_generation"):
        check_merge_target(plain)
    model = _peft_tiny().to(torch.bfloat16)
    with pytest.raises(ValueError, match="the adapted base weights are bfloat16"):
        check_merge_target(model)
    check_merge_target(_peft_tiny())  # float32: accepted


@pytest.mark.parametrize(("values", "engine", "message"), [
    ({"load_in_8bit": True}, Engine(), "with load_in_8bit=True: PEFT would de-quantize"),
    ({"bf16": True}, Engine(), "with the base loaded as 'auto'"),
    ({"dtype": "float16"}, Engine(), "with the base loaded as 'float16'"),
    ({"use_vllm": True}, Engine(), "with use_vllm=True: TRL already hands vLLM the merged weights"),
    ({}, Engine("deepspeed", zero_stage=3, source="deepspeed"), "with DeepSpeed ZeRO-3 (from deepspeed): the base is "
                                                                 "sharded"),
    ({}, Engine("fsdp", fsdp_version=2, source="fsdp"), "with FSDP2 (from fsdp): the base is sharded"),
])
def test_merged_generation_rule_refuses(values, engine, message):
    with pytest.raises(RunArgumentError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_merged_generation({"merge_adapter_for_generation": True, **values}, engine)


@pytest.mark.parametrize("engine", [Engine(), Engine("ddp", source="WORLD_SIZE"),
                                    Engine("deepspeed", zero_stage=2, source="deepspeed")])
def test_merged_generation_rule_accepts_a_whole_float32_base(engine):
    check_merged_generation({"merge_adapter_for_generation": True, "dtype": "float32", "bf16": True}, engine)
    check_merged_generation({"merge_adapter_for_generation": True}, engine)  # bf16 unset: float32 on this machine
    check_merged_generation({"merge_adapter_for_generation": False, "load_in_4bit": True}, engine)


def _count_reward(completions, completion_ids, **kwargs):
    return [float(sum(ids) % 7) for ids in completion_ids]  # differs within a group: every step updates


def test_training_merges_each_generation_and_leaves_the_base_exact(tmp_path, monkeypatch):
    """Two optimizer steps, one generation batch each: merged twice; the frozen base ends bit for bit where it began
    (LoRA trains only the adapter), while the adapter itself trained."""
    from peft.tuners.tuners_utils import BaseTuner

    merges = []
    original = BaseTuner.merge_adapter
    monkeypatch.setattr(BaseTuner, "merge_adapter", lambda self, *a, **k: (merges.append(1), original(self, *a, **k)))
    trainer = tiny_trainer(tmp_path, _count_reward, tiny.count_char_dataset(16), peft_config=lora(),
                           merge_adapter_for_generation=True, prompts_per_step=2, num_generations=4,
                           micro_batch_size=8, total_training_steps=2, max_completion_length=8, learning_rate=1e-2,
                           seed=0)
    layers = _lora_layers(trainer.model)
    base = [layer.get_base_layer().weight.detach().clone() for layer in layers]
    adapter = [layer.lora_B["default"].weight.detach().clone() for layer in layers]
    trainer.train()
    assert trainer.state.global_step == 2
    assert len(merges) == 2
    assert all(torch.equal(layer.get_base_layer().weight, w) for layer, w in zip(layers, base))
    assert not any(layer.merged for layer in layers)
    assert all(not torch.equal(layer.lora_B["default"].weight, b) for layer, b in zip(layers, adapter))


def test_trainer_refuses_a_model_without_adapter(tmp_path):
    with pytest.raises(ValueError, match="needs a LoRA adapter to merge"):
        tiny_trainer(tmp_path, _count_reward, tiny.count_char_dataset(16), merge_adapter_for_generation=True,
                     prompts_per_step=2, num_generations=4, micro_batch_size=8, total_training_steps=1,
                     max_completion_length=8)


def test_trainer_refuses_a_4bit_base(tmp_path):
    with pytest.raises(ValueError, match="needs a float32 base that is not quantized"):
        tiny_trainer(tmp_path, _count_reward, tiny.count_char_dataset(16), quantization_config=nf4(),
                     peft_config=lora(), merge_adapter_for_generation=True, prompts_per_step=2, num_generations=4,
                     micro_batch_size=8, total_training_steps=1, max_completion_length=8)
