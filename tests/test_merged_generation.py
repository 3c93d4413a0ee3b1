"""`merge_adapter_for_generation`: the LoRA adapter merged into the float32 base for each generation.

The merged weight is worked out by hand (W + (alpha / r) B @ A, LoRA's formula: Hu et al. 2021, eq. 3, with PEFT's
scaling alpha / r), the merged model's logits are compared with the unmerged model's, and after the block every base
weight must be bit for bit what it was (no W + ΔW − ΔW rounding left behind).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from factories import LORA_TARGETS, lora, nf4, tiny_trainer

from trl_grpo_ext import GRPOExtConfig
from trl_grpo_ext.config.checks import RunArgumentError
from trl_grpo_ext.config.engines import Engine
from trl_grpo_ext.models.embedded import tiny
from trl_grpo_ext.training.merged_generation import check_merge_target, merged_adapter
from trl_grpo_ext.validation.generation import check_merged_generation

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
        check_merge_target(plain, None, Engine())
    model = _peft_tiny().to(torch.bfloat16)
    args = GRPOExtConfig(output_dir="unused", use_cpu=True, bf16=False, report_to=[])
    with pytest.raises(ValueError, match="with the base loaded as 'bfloat16'"):
        check_merge_target(model, args, Engine())
    check_merge_target(_peft_tiny(), args, Engine())  # float32: accepted
    with pytest.raises(ValueError, match=r"with DeepSpeed ZeRO-3 \(from deepspeed\): the base is sharded"):
        check_merge_target(_peft_tiny(), args, Engine("deepspeed", zero_stage=3, source="deepspeed"))


@pytest.mark.parametrize(("values", "engine", "message"), [
    ({"load_in_8bit": True}, Engine(), "with load_in_8bit=True: PEFT would de-quantize"),
    ({"model_init_kwargs": {"quantization_config": {"load_in_4bit": True}}}, Engine(),
     "with a quantized base (model_init_kwargs.quantization_config)"),
    ({"model_init_kwargs": '{"quantization_config": {"load_in_8bit": true}}'}, Engine(),
     "with a quantized base (model_init_kwargs.quantization_config)"),
    ({"bf16": True, "dtype": "auto"}, Engine(), "with bf16=True and dtype='auto' (the checkpoint's own dtype)"),
    ({"use_transformers_continuous_batching": True, "bf16": True, "dtype": "float32"}, Engine(),
     "with use_transformers_continuous_batching=True and bf16=True: the whole model is cast to that precision"),
    ({"bf16": True, "dtype": "float32"}, Engine("deepspeed", zero_stage=2, source="deepspeed"),
     "with DeepSpeed ZeRO-2 (from deepspeed) and bf16=True: the whole model is cast"),
    ({"use_peft": True, "lora_dropout": 0.05}, Engine(), "with lora_dropout=0.05: TRL generates in training mode"),
    ({"dtype": "float32"}, Engine("deepspeed", zero_stage=2, source="zero2.yaml", mixed_precision="bf16"),
     "with DeepSpeed ZeRO-2 (from zero2.yaml) and mixed_precision='bf16' (from zero2.yaml): the whole model is cast"),
    ({"dtype": "float16"}, Engine(), "with the base loaded as 'float16'"),
    ({}, Engine("deepspeed", zero_stage=3, source="deepspeed"), "with DeepSpeed ZeRO-3 (from deepspeed): the base is "
                                                                 "sharded"),
    ({}, Engine("fsdp", fsdp_version=2, source="fsdp"), "with FSDP2 (from fsdp): the base is sharded"),
])
def test_merged_generation_rule_refuses(values, engine, message):
    with pytest.raises(RunArgumentError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_merged_generation({"merge_adapter_for_generation": True, **values}, engine)


@pytest.mark.parametrize("engine", [Engine(), Engine("ddp", source="WORLD_SIZE")])
def test_merged_generation_rule_accepts_a_whole_float32_base(engine):
    check_merged_generation({"merge_adapter_for_generation": True, "dtype": "float32", "bf16": True}, engine)
    check_merged_generation({"merge_adapter_for_generation": True, "use_peft": True, "lora_dropout": 0.0}, engine)
    check_merged_generation({"merge_adapter_for_generation": True, "use_transformers_continuous_batching": True},
                            engine)  # float32 continuous batching: no cast
    check_merged_generation({"merge_adapter_for_generation": True}, engine)  # bf16 unset: float32 on this machine
    check_merged_generation({"merge_adapter_for_generation": False, "load_in_4bit": True}, engine)
    # DeepSpeed below ZeRO-3 keeps float32 weights without bf16/fp16
    check_merged_generation({"merge_adapter_for_generation": True}, Engine("deepspeed", zero_stage=2, source="x"))


def test_rule_accepts_disable_dropout():
    values = {"merge_adapter_for_generation": True, "use_peft": True, "lora_dropout": 0.05}
    with pytest.raises(RunArgumentError, match=r"lora_dropout=0.05: .*set lora_dropout: 0 \(or disable_dropout: true\)"):
        check_merged_generation(values, Engine())
    check_merged_generation({**values, "disable_dropout": True}, Engine())  # TRL sets every dropout's p to 0
    # a continued adapter keeps its own lora_dropout (0.0 here): the trainer judges it once loaded
    check_merged_generation({**values, "model_name_or_path": str(Path(__file__).parent / "data" / "tiny_adapter")},
                            Engine())


def test_only_active_adapters_are_merged_and_judged():
    """Two adapters, the second on 2 of the 14 projections with dropout 0.2 and inactive: the first is merged (14
    layers), the check ignores the inactive one's dropout; with the second active, 2 layers merge."""
    model = _peft_tiny()
    from peft import LoraConfig

    model.add_adapter("b", LoraConfig(r=R, lora_alpha=ALPHA, target_modules=["q_proj"], lora_dropout=0.2))
    args = GRPOExtConfig(output_dir="unused", use_cpu=True, bf16=False, report_to=[])
    check_merge_target(model, args, Engine())
    with torch.no_grad(), merged_adapter(model) as merged:
        assert merged == 2 * len(LORA_TARGETS)
    model.set_adapter("b")
    with pytest.raises(ValueError, match="with lora_dropout=0.2"):
        check_merge_target(model, args, Engine())
    before = [p.detach().clone() for p in model.parameters()]
    with torch.no_grad(), merged_adapter(model) as merged:
        assert merged == 2
    assert _restored(model, before)


def test_check_merge_target_refuses_lora_bias_without_a_bias():
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny.ensure_tiny_model(), dtype=torch.float32),
                           LoraConfig(r=R, lora_alpha=ALPHA, target_modules=["o_proj"], lora_bias=True))
    with pytest.raises(ValueError, match="with lora_bias=True on a layer that has no bias"):
        check_merge_target(model, GRPOExtConfig(output_dir="unused", use_cpu=True, bf16=False, report_to=[]),
                           Engine())


def _count_reward(completions, completion_ids, **kwargs):
    return [float(sum(ids) % 7) for ids in completion_ids]  # differs within a group: every step updates


def test_training_merges_each_generation_and_leaves_the_base_exact(tmp_path, monkeypatch):
    """Two optimizer steps, one generation batch each: merged twice; the frozen base ends bit for bit where it began
    (LoRA trains only the adapter), while the adapter itself trained."""
    import contextlib

    import trl_grpo_ext.trainer as trainer_module

    merges = []

    @contextlib.contextmanager
    def counted(model):
        with merged_adapter(model) as merged:
            merges.append(merged)
            yield merged

    monkeypatch.setattr(trainer_module, "merged_adapter", counted)
    trainer = tiny_trainer(tmp_path, _count_reward, tiny.count_char_dataset(16), peft_config=lora(),
                           merge_adapter_for_generation=True, prompts_per_step=2, num_generations=4,
                           micro_batch_size=8, total_training_steps=2, max_completion_length=8, learning_rate=1e-2,
                           seed=0)
    layers = _lora_layers(trainer.model)
    base = [layer.get_base_layer().weight.detach().clone() for layer in layers]
    adapter = [layer.lora_B["default"].weight.detach().clone() for layer in layers]
    trainer.train()
    assert trainer.state.global_step == 2
    assert merges == [2 * len(LORA_TARGETS)] * 2  # every adapted layer, at each of the 2 generations
    assert all(torch.equal(layer.get_base_layer().weight, w) for layer, w in zip(layers, base))
    assert not any(layer.merged for layer in layers)
    assert all(not torch.equal(layer.lora_B["default"].weight, b) for layer, b in zip(layers, adapter))


def test_trainer_refuses_a_model_without_adapter(tmp_path):
    with pytest.raises(ValueError, match="needs a LoRA adapter to merge"):
        tiny_trainer(tmp_path, _count_reward, tiny.count_char_dataset(16), merge_adapter_for_generation=True,
                     prompts_per_step=2, num_generations=4, micro_batch_size=8, total_training_steps=1,
                     max_completion_length=8)


def test_trainer_refuses_lora_dropout(tmp_path):
    from peft import LoraConfig

    with pytest.raises(ValueError, match="with lora_dropout=0.1: TRL generates in training mode"):
        tiny_trainer(tmp_path, _count_reward, tiny.count_char_dataset(16), merge_adapter_for_generation=True,
                     peft_config=LoraConfig(r=8, lora_alpha=16, lora_dropout=0.1, target_modules=LORA_TARGETS,
                                            task_type="CAUSAL_LM"),
                     prompts_per_step=2, num_generations=4, micro_batch_size=8, total_training_steps=1,
                     max_completion_length=8)


def test_trainer_refuses_a_4bit_base(tmp_path):
    with pytest.raises(ValueError, match=r"with a quantized base \(adapted weights stored as uint8\)"):
        tiny_trainer(tmp_path, _count_reward, tiny.count_char_dataset(16), quantization_config=nf4(),
                     peft_config=lora(), merge_adapter_for_generation=True, prompts_per_step=2, num_generations=4,
                     micro_batch_size=8, total_training_steps=1, max_completion_length=8)


def _restored(model, before) -> bool:
    return all(torch.equal(w, p) for w, p in zip(before, model.parameters()))


def test_dora_base_restored_exactly():
    """PEFT's unmerge of a DoRA layer assigns a new tensor (not in place): the saved copy still comes back."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny.ensure_tiny_model(), dtype=torch.float32),
                           LoraConfig(r=R, lora_alpha=ALPHA, target_modules=LORA_TARGETS, use_dora=True,
                                      init_lora_weights=False))
    before = [p.detach().clone() for p in model.parameters()]
    ids = torch.tensor([[5, 9, 12, 3]])
    with torch.no_grad():
        unmerged = model(input_ids=ids).logits
        for _ in range(3):
            with merged_adapter(model):
                torch.testing.assert_close(model(input_ids=ids).logits, unmerged, rtol=0, atol=1e-5)
    assert _restored(model, before)


def test_tied_embedding_is_not_merged():
    """A LoRA on an embedding whose weight is also lm_head's (tied): merging it would change lm_head as well, so that
    layer stays unmerged and the merged model's logits equal the unmerged model's."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny.ensure_tiny_model(), dtype=torch.float32)
    base.lm_head.weight = base.model.embed_tokens.weight  # tied by hand, as SmolLM2's are
    model = get_peft_model(base, LoraConfig(r=R, lora_alpha=ALPHA, target_modules=["q_proj", "embed_tokens"],
                                            init_lora_weights=False))
    before = [p.detach().clone() for p in model.parameters()]
    ids = torch.tensor([[5, 9, 12, 3]])
    with torch.no_grad():
        unmerged = model(input_ids=ids).logits
        with merged_adapter(model) as merged:
            assert merged == 2  # q_proj of the 2 layers; embed_tokens left unmerged
            torch.testing.assert_close(model(input_ids=ids).logits, unmerged, rtol=0, atol=1e-5)
    assert _restored(model, before)


def test_a_failed_merge_leaves_the_base_as_it_was():
    """lora_bias on layers without a bias: PEFT's merge raises at the first such layer (o_proj), after merging the
    layers before it (the tiny Qwen2's q/k/v projections have a bias)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny.ensure_tiny_model(), dtype=torch.float32),
                           LoraConfig(r=R, lora_alpha=ALPHA, target_modules=LORA_TARGETS, lora_bias=True,
                                      init_lora_weights=False))
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(RuntimeError, match="lora_bias"), merged_adapter(model):
        pass
    assert _restored(model, before)
    assert not any(layer.merged for layer in _lora_layers(model))
