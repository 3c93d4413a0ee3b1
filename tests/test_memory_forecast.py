"""`plan.memory`: the memory forecast's parts on hand-computed values for two shapes (the embedded tiny model and
Qwen2.5-1.5B's config.json), the fix it names, and `trl-grpo-ext plan --device-memory`."""

import json
from pathlib import Path

import pytest

from trl_grpo_ext.plan.memory import GiB, MemorySettings, ModelShape, forecast_memory, memory_fix, parse_memory

#: Qwen/Qwen2.5-1.5B-Instruct's config.json (the values the forecast reads), written by hand: no download.
QWEN25_15B = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "hidden_size": 1536,
              "num_hidden_layers": 28, "num_attention_heads": 12, "num_key_value_heads": 2,
              "intermediate_size": 8960, "vocab_size": 151936, "tie_word_embeddings": True}


def tiny_shape() -> ModelShape:
    from trl_grpo_ext.models.memory_shape import model_shape

    return model_shape("embedded:tiny-qwen2")


def test_tiny_shape_counts_the_parameters_of_the_built_model():
    # embeddings and lm_head 56 × 64 each; per layer q 64·64 + k, v 64·32 each + o 64·64 + 3 · 64·128 = 36,864 linear,
    # biases 64 + 32 + 32 = 128, norms 2 · 64; final norm 64 (tiny.py: 81,472)
    shape = tiny_shape()
    assert shape.linear_params == 2 * (64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 128) == 73_728
    assert shape.num_parameters == 2 * 56 * 64 + 2 * (36_864 + 128 + 128) + 64 == 81_472


def test_tiny_forecast_parts_by_hand():
    # the benchmark's tiny setup: float32 on a CPU, LoRA r 16 on the 7 linear layers, no dropout, no checkpointing
    s = MemorySettings(micro_batch_size=16, generation_batch=16, max_prompt_length=40, max_completion_length=64,
                       compute_bytes=4, weight_bytes=4, use_peft=True, lora_r=16, lora_targets="all-linear",
                       lora_dropout=0.0, adapter_bytes=4, gradient_checkpointing=False, compact_head=False)
    f = forecast_memory(tiny_shape(), s)
    assert f.part("weights").bytes == 81_472 * 4 == 325_888
    # r (in + out) per module: q 128, k 96, v 96, o 128, gate 192, up 192, down 192 = 1,024; × 16 × 2 layers = 32,768
    assert f.part("adapter + grad + AdamW").bytes == 32_768 * 4 * 4 == 524_288
    # 2 (K, V) × 2 layers × 2 KV heads × head dim 16 × 4 B × 16 completions × (40 + 64) tokens
    assert f.part("KV cache").bytes == 2 * 2 * 2 * 16 * 4 * 16 * 104 == 851_968
    assert f.part("generation logits").bytes == 16 * 56 * 4 * 2 == 7_168
    # per token per layer: norms' float32 inputs 2·64·4 = 512; (2·64 + 3·64 + 2·64 + 4·128) · 4 B = 3,840; logsumexp
    # 4 heads · 4 B = 16; lora_B inputs 7 modules · 16 · 4 B = 448 -> 4,816 B; mask 16 · 104² bytes
    assert f.part("activations").bytes == 2 * (16 * 104) * 4_816 + 16 * 104 ** 2 == 16_200_704
    # CPU: every position scored, 16 × 103 = 1,648 tokens; tile 1,648 × 32,768 × 4 B; the backward's 7 float32
    # temporaries and a boolean mask of 1,648 × 56; hidden-state gradient 1,648 × 64 × (4 + 4) B
    assert f.part("log-prob buffers").bytes == 1_648 * 32_768 * 4 + 1_648 * 56 * 29 + 1_648 * 64 * 8 \
        == 219_526_784
    assert f.peak_phase == "training"
    assert f.peak_bytes == 325_888 + 524_288 + 16_200_704 + 219_526_784


def test_modules_to_save_copies_are_trained_in_full():
    # the demo's lora_modules_to_save [lm_head]: PEFT trains a full copy of the LM head, 56 × 64 = 3,584 parameters, in
    # the adapter's float32 with its gradient and Adam moments; norms are not counted
    s = MemorySettings(micro_batch_size=16, generation_batch=16, max_prompt_length=40, max_completion_length=64,
                       compute_bytes=4, weight_bytes=4, use_peft=True, lora_r=16, lora_targets="all-linear",
                       lora_dropout=0.0, adapter_bytes=4, modules_to_save=("lm_head", "norm"))
    part = forecast_memory(tiny_shape(), s).part("adapter + grad + AdamW")
    assert part.bytes == (32_768 + 56 * 64) * 4 * 4 == 581_632
    assert "3,584 of modules_to_save copies" in part.formula


def test_qwen25_15b_shape_and_forecast_of_the_shipped_recipe_by_hand():
    shape = ModelShape.from_config(QWEN25_15B)
    # per layer: q 1536² + k, v 1536·256 each + o 1536² + 3 · 1536·8960 = 46,792,704; × 28
    assert shape.linear_params == 28 * 46_792_704 == 1_310_195_712
    # embeddings 151,936 · 1536 (tied: no lm_head); per layer q/k/v biases (12 + 2 + 2) · 128 + norms 2 · 1536
    assert shape.other_params == 233_373_696 + 28 * (2_048 + 3_072) + 1_536 == 233_518_592
    assert shape.num_parameters == 1_543_714_304
    # recipes/configs/qwen2.5-1.5b-instruct_gsm8k.yaml: NF4 + double quant, float32 load (ModelConfig's dtype), bf16
    # autocast, LoRA r 16 on 7 modules with dropout 0.05 and float32 adapters, micro 8, G 8 × 8 prompts,
    # 384 completion tokens; prompts up to 256 tokens; gradient checkpointing; CUDA
    s = MemorySettings(micro_batch_size=8, generation_batch=64, max_prompt_length=256, max_completion_length=384,
                       compute_bytes=2, weight_bytes=4, load_in_4bit=True, double_quant=True, use_peft=True,
                       lora_r=16, lora_targets="all-linear", lora_dropout=0.05, adapter_bytes=4)
    f = forecast_memory(shape, s)
    # NF4: 0.5 B per linear weight + one 1-byte absmax per 64 + one float32 per 256 absmax; the rest in float32
    assert f.part("weights").bytes == 1_310_195_712 // 2 + 20_471_808 + 79_968 * 4 + 233_518_592 * 4 \
        == 1_609_963_904
    # r (in + out): q 3,072, k 1,792, v 1,792, o 3,072, gate, up, down 10,496 each = 41,216; × 16 × 28 layers
    assert f.part("adapter + grad + AdamW").bytes == 18_464_768 * 16
    assert f.part("KV cache").bytes == 2 * 28 * 2 * 128 * 2 * 64 * 640 == 1_174_405_120
    # checkpointed: 28 layer inputs of 5,120 tokens × 1536 × 2 B, plus one layer recomputed: per token
    # 2·1536·4 + (2·1536 + 3·1536 + 2·1536 + 4·8960)·2 + 12·4 = 12,288 + 93,184 + 48 = 105,520 B, and LoRA:
    # lora_A's float32 input copy + dropout mask per module (1536 · 5 + 1536 + 8960 = 18,176 inputs) · 5 B,
    # lora_B inputs 7 · 16 · 4 B -> 105,520 + 90,880 + 448 = 196,848 B; mask 8 · 640²
    per_layer = 105_520 + 18_176 * 5 + 448
    assert per_layer == 196_848
    assert f.part("activations (checkpointed)").bytes == 28 * 5_120 * 1_536 * 2 + 5_120 * per_layer + 8 * 640 ** 2
    # CUDA: only completion tokens scored, 8 × 384 = 3,072; tile 3,072 × 32,768 × 2 B; gradient 3,072 × 1536 × 6 B
    assert f.part("log-prob buffers").bytes == 3_072 * 32_768 * 2 + 3_072 * 1_536 * 6 == 229_638_144
    assert f.peak_phase == "training"


def test_beta_keeps_a_reference_model_only_without_an_adapter():
    shape = ModelShape.from_config(QWEN25_15B)
    base = MemorySettings(micro_batch_size=1, generation_batch=8, max_prompt_length=64, max_completion_length=64,
                          beta=0.04)
    assert forecast_memory(shape, base).part("reference model").bytes == 1_543_714_304 * 2
    assert "reference model" not in [p.name for p in forecast_memory(shape, MemorySettings(
        micro_batch_size=1, generation_batch=8, max_prompt_length=64, max_completion_length=64, beta=0.04,
        use_peft=True)).parts]


def test_the_fix_lowers_the_phase_that_overflows_to_the_largest_value_that_fits():
    shape = ModelShape.from_config(QWEN25_15B)
    s = MemorySettings(micro_batch_size=8, generation_batch=64, max_prompt_length=256, max_completion_length=384,
                       compute_bytes=2, weight_bytes=4, load_in_4bit=True, double_quant=True, use_peft=True,
                       lora_r=16, lora_targets="all-linear", adapter_bytes=4, gradient_checkpointing=False)
    # no checkpointing: about 29 GiB of activations; checkpointing alone brings the peak to about 3.5 GiB
    assert memory_fix(shape, s, 6 * GiB, 64, 8) == "gradient_checkpointing: true (TRL's default)"
    on = MemorySettings(**{**s.__dict__, "gradient_checkpointing": True})
    assert memory_fix(shape, on, 6 * GiB, 64, 8) is None
    # 3.2 GiB: the training phase still overflows; micro-batches of 4 fit and 8 do not
    device = int(3.2 * GiB)
    peak = {m: forecast_memory(shape, MemorySettings(**{**on.__dict__, "micro_batch_size": m})).peak_bytes
            for m in (4, 8)}
    assert peak[4] <= device < peak[8]
    assert memory_fix(shape, on, device, 64, 8).startswith("micro_batch_size: 4 (from 8;")


def test_a_kv_cache_that_overflows_lowers_prompts_per_step():
    shape = ModelShape.from_config(QWEN25_15B)
    s = MemorySettings(micro_batch_size=1, generation_batch=512, max_prompt_length=1024, max_completion_length=2048,
                       load_in_4bit=True, double_quant=True, use_peft=True, lora_targets="all-linear")
    f = forecast_memory(shape, s)
    # 2 × 28 × 2 × 128 × 2 B = 28,672 B per token; × 512 completions × 3,072 tokens = 42 GiB
    assert f.part("KV cache").bytes == 28_672 * 512 * 3_072 == 42 * GiB
    assert f.peak_phase == "generation"
    fix = memory_fix(shape, s, 24 * GiB, 512, 8)
    # always: NF4 weights 1,142,926,720 B (16-bit others) + adapter 18,464,768 × 16 B = 1,438,363,008 B; per prompt
    # 8 completions × (3,072 × 28,672 B of KV + 2 × 151,936 × 4 B of logits) = 714,366,976 B;
    # (24 GiB − 1,438,363,008 B) / 714,366,976 B = 34.06 -> 34 prompts
    assert f.phase_bytes("always") == 1_142_926_720 + 18_464_768 * 16 == 1_438_363_008
    assert fix.startswith("prompts_per_step: 34 (from 64;")
    assert forecast_memory(shape, MemorySettings(**{**s.__dict__, "generation_batch": 34 * 8})).peak_bytes <= 24 * GiB
    assert forecast_memory(shape, MemorySettings(**{**s.__dict__, "generation_batch": 35 * 8})).peak_bytes > 24 * GiB


@pytest.mark.parametrize(("text", "expected"), [("24GB", 24 * GiB), ("24 GiB", 24 * GiB), ("80G", 80 * GiB),
                                                ("512MiB", 512 * 2**20), ("1.5", int(1.5 * GiB))])
def test_parse_memory(text, expected):
    assert parse_memory(text) == expected


@pytest.mark.parametrize("text", ["abc", "-1GB", "0", "inf"])
def test_parse_memory_refuses(text):
    with pytest.raises(ValueError, match="memory size"):
        parse_memory(text)


def test_plan_reports_the_overflowing_part_and_the_fix(tmp_path, capsys, monkeypatch):
    from trl_grpo_ext.cli import plan as plan_cli

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    model = tmp_path / "qwen2.5-1.5b"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(QWEN25_15B))
    recipe = Path(__file__).resolve().parents[1] / "recipes/configs/qwen2.5-1.5b-instruct_gsm8k.yaml"
    argv = ["--config", str(recipe), "--dataset-size", "7473", "--model_name_or_path", str(model),
            "--max_prompt_length", "256", "--gradient_checkpointing", "false"]
    assert plan_cli.main([*argv, "--device-memory", "24GB"]) == 0
    out, err = capsys.readouterr()
    assert "memory forecast" not in out  # stdout: the table the run prints; the forecast goes to stderr
    assert "memory forecast per device (1,543,714,304 parameters; CUDA;" in err
    assert "KV cache                      1.09 GiB  generation = 2 × 28 layers × 2 KV heads × 128 × 2 B × 64 " \
           "completions × 640 tokens" in err
    # no checkpointing: 28 × 5,120 tokens × 196,848 B + 8 × 640² B = 26.29 GiB of activations
    # always: weights 1,609,963,904 B + adapter 295,436,288 B = 1.77 GiB; training 26.29 GiB + 229,638,144 B of
    # log-prob buffers = 26.50 GiB -> 28.27 GiB
    assert "the forecast peak 28.27 GiB does not fit 24.00 GiB (--device-memory): the training phase overflows, " \
           "its largest part activations 26.29 GiB; lower first: gradient_checkpointing: true (TRL's default)" in err
    assert plan_cli.main([*argv[:-1], "true", "--device-memory", "24GB"]) == 0
    out, err = capsys.readouterr()
    assert "fits 24.00 GiB (--device-memory): forecast peak 3.34 GiB" in err
    assert "does not fit" not in err


def test_when_no_micro_batch_fits_the_fix_shortens_the_completions_at_micro_batch_1():
    shape = ModelShape.from_config(QWEN25_15B)
    s = MemorySettings(micro_batch_size=2, generation_batch=16, max_prompt_length=512, max_completion_length=8192,
                       load_in_4bit=True, double_quant=True, use_peft=True, lora_targets="all-linear")

    def peak(**change):
        return forecast_memory(shape, MemorySettings(**{**s.__dict__, **change})).peak_bytes

    assert peak(micro_batch_size=1) > 4 * GiB  # 5.08 GiB: a smaller micro-batch alone is not enough
    fix = memory_fix(shape, s, 4 * GiB, 16, 8)
    assert fix == "max_completion_length: 5632 (from 8192) with micro_batch_size: 1"
    # the largest length that fits, rounded down to a multiple of 64: 5632 fits, 5696 does not
    assert peak(micro_batch_size=1, max_completion_length=5632) <= 4 * GiB < peak(micro_batch_size=1,
                                                                                     max_completion_length=5696)


def test_plan_prints_the_forecast_when_asked_or_with_a_device(tmp_path, capsys, monkeypatch):
    from trl_grpo_ext.cli import plan as plan_cli

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setattr(plan_cli, "_present_gpu_bytes", lambda: None)  # this machine: no GPU
    assert plan_cli.main(["--config", "tiny_cpu"]) == 0
    assert "memory forecast" not in capsys.readouterr().err  # neither asked nor a device: the plan as before
    assert plan_cli.main(["--config", "tiny_cpu", "--memory-forecast"]) == 0
    err = capsys.readouterr().err
    # tiny_cpu: NF4 with double quantisation, float32 elsewhere, LoRA r 8 on 7 modules, CPU
    assert "memory forecast per device (81,472 parameters; CPU, max_prompt_length unset: 512 prompt tokens assumed" in err
    # tiny_cpu: LoRA r 8 on 7 modules × 2 layers = 16,384 parameters, and the lm_head copy (modules_to_save) 56 × 64
    assert ("adapter + grad + AdamW      312.00 KiB  always     = (16,384 LoRA parameters (r 8, 7 modules × 2 layers) "
            "+ 3,584 of modules_to_save copies)") in err
    assert "fits" not in err and "does not fit" not in err  # no device memory stated, none judged
    assert "longest-first probe: off (memory_probe: auto); set memory_probe: on" in err
