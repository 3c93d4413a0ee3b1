"""Merged export (trl_grpo_ext.hub.merge) on a real 4-bit NF4 + LoRA run of the tiny model.

Reference: the logits of the 4-bit base + adapter through the training forward (hub_testing.trained_logits).
Measured with this fixture (benchmarks/merge_tolerance.py; max |logit difference|, largest |logit| 1.5, CPU):
float32 7.2e-7, bfloat16 1.1e-2, float16 1.4e-3; merging into the original (not quantized) base instead: 9.7e-2.
"""

import json
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import torch  # noqa: E402
from hub_testing import PROMPTS, make_finished_run, quantized_base, trained_logits  # noqa: E402

from trl_grpo_ext.hub import merge as hub_merge  # noqa: E402
from trl_grpo_ext.models.embedded import tiny  # noqa: E402


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return make_finished_run(tmp_path_factory.mktemp("run") / "output")


def merged_logits(path, dtype):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    tokenizer = tiny.load_tokenizer(path)
    return model, trained_logits(model, tokenizer)


def test_merged_float32_reloads_without_peft_and_matches_trained_model(run, tmp_path):
    output_dir, reference, _ = run
    dest = hub_merge.export_merged(output_dir, tmp_path / "merged", dtype="float32")
    config = json.loads((dest / "config.json").read_text())
    assert "quantization_config" not in config
    assert (dest / "model.safetensors").is_file()
    model, logits = merged_logits(dest, torch.float32)
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert not any("lora" in name or "modules_to_save" in name for name, _ in model.named_parameters())
    assert {type(m).__name__ for m in model.modules()}.isdisjoint({"Linear4bit", "LoraLayer"})
    assert (logits - reference).abs().max().item() <= 1e-5


def test_merged_bfloat16_within_stated_tolerance(run, tmp_path):
    from safetensors import safe_open

    output_dir, reference, _ = run
    dest = hub_merge.export_merged(output_dir, tmp_path / "merged", dtype="bfloat16")
    with safe_open(dest / "model.safetensors", "pt") as f:
        assert {f.get_tensor(key).dtype for key in f.keys()} == {torch.bfloat16}
    _, logits = merged_logits(dest, torch.bfloat16)
    # bfloat16 keeps 8 significant bits: weights are rounded by up to 2^-9 relative; measured 1.1e-2 here
    # (bfloat16 weights and bfloat16 compute).
    assert (logits - reference).abs().max().item() <= 3e-2


def test_dequantized_method_beats_merging_into_the_original_weights(run, tmp_path):
    output_dir, reference, _ = run
    dequantized = hub_merge.export_merged(output_dir, tmp_path / "a", dtype="float32", method="dequantized")
    original = hub_merge.export_merged(output_dir, tmp_path / "b", dtype="float32", method="original")
    error_a = (merged_logits(dequantized, torch.float32)[1] - reference).abs().max().item()
    error_b = (merged_logits(original, torch.float32)[1] - reference).abs().max().item()
    # The original weights differ from what training saw by the NF4 rounding error; measured 9.7e-2 vs 7.2e-7.
    assert error_b > 1e-3
    assert error_b > 100 * error_a


def test_adapter_reloads_onto_its_4bit_base_with_peft(run):
    from peft import PeftModel

    output_dir, reference, base_path = run
    model = PeftModel.from_pretrained(quantized_base(base_path), output_dir)
    logits = trained_logits(model, tiny.load_tokenizer(output_dir))
    assert (logits - reference).abs().max().item() <= 1e-6


def test_tokenizer_and_merge_info_travel_with_the_export(run, tmp_path):
    output_dir, _, base_path = run
    dest = hub_merge.export_merged(output_dir, tmp_path / "merged", dtype="float16")
    assert tiny.load_tokenizer(dest)(PROMPTS[1]).input_ids == tiny.load_tokenizer(base_path)(PROMPTS[1]).input_ids
    info = json.loads((dest / hub_merge.MERGE_INFO_FILE).read_text())
    assert info["method"] == "dequantized" and info["dtype"] == "float16"
    assert info["base_model"] == str(base_path)
    assert info["base_quantization"]["bnb_4bit_quant_type"] == "nf4"
    assert {"model.safetensors", "config.json", "tokenizer.json"} <= set(info["files"])
    assert hub_merge.merged_export_is_current(output_dir, dest, "float16", "dequantized")
    assert not hub_merge.merged_export_is_current(output_dir, dest, "bfloat16", "dequantized")


def test_export_is_stale_once_the_adapter_changes(run, tmp_path):
    import shutil

    output_dir, _, _ = run
    copy = tmp_path / "copy"
    shutil.copytree(output_dir, copy)
    dest = hub_merge.export_merged(copy, tmp_path / "merged", dtype="float32")
    assert hub_merge.merged_export_is_current(copy, dest, "float32", "dequantized")
    weights = copy / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b"\x00")
    assert not hub_merge.merged_export_is_current(copy, dest, "float32", "dequantized")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"dtype": "float8"}, "dtype='float8'"), ({"method": "requantize"}, "method='requantize'")],
)
def test_bad_settings_raise_value_error_naming_the_field(run, tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        hub_merge.export_merged(run[0], tmp_path / "merged", **kwargs)


def test_directory_without_adapter_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="holds no PEFT adapter"):
        hub_merge.export_merged(tmp_path, tmp_path / "merged")
    # a path that is no folder at all (a typo): said so, not "no PEFT adapter"
    with pytest.raises(ValueError, match=r"output_dir='.*outptus' is no folder\. Fix: pass the output_dir"):
        hub_merge.check_adapter_dir(tmp_path / "outptus")
