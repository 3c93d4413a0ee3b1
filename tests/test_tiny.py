"""The embedded default: tokenizer round trips, the model loads offline, the task is deterministic."""

import pytest

from trl_grpo_ext.models.embedded import tiny


def test_tokenizer_round_trips_spaces_and_newlines(tiny_tokenizer):
    text = "ab c\n: a a"
    ids = tiny_tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(text)  # one token per character
    assert tiny_tokenizer.decode(ids) == text


def test_chat_template_and_special_tokens(tiny_tokenizer):
    rendered = tiny_tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert rendered == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tiny_tokenizer.pad_token == tiny_tokenizer.eos_token == "<|endoftext|>"


def test_model_loads_offline_with_expected_shape(tiny_model_dir, tiny_tokenizer):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert model.config.model_type == "qwen2"
    assert model.config.vocab_size == len(tiny_tokenizer) == len(tiny.SPECIAL_TOKENS) + len(tiny.ALPHABET)
    # embeddings 56x64 + lm_head 64x56 + 2 blocks of 37,120 + final norm 64 (the sum in tiny.TINY_CONFIG's comment)
    assert sum(p.numel() for p in model.parameters()) == 81_472


def test_cache_is_reused(tiny_model_dir):
    before = (tiny_model_dir / "model.safetensors").stat().st_mtime_ns
    assert tiny.ensure_tiny_model() == tiny_model_dir
    assert (tiny_model_dir / "model.safetensors").stat().st_mtime_ns == before


def test_count_char_rows_are_deterministic_and_checked():
    rows = tiny.count_char_rows(3, target="b", seed=1)
    assert rows == tiny.count_char_rows(3, target="b", seed=1)
    assert all(r["target"] == "b" and r["prompt"][0]["content"].endswith("write b b b") for r in rows)
    with pytest.raises(ValueError, match="target='ab'"):
        tiny.count_char_rows(1, target="ab")


def test_resolve_model_path():
    assert tiny.resolve_model_path("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"
    with pytest.raises(ValueError, match="embedded:tiny-qwen2"):
        tiny.resolve_model_path("embedded:nope")
