"""Shared by the GPU benchmarks (`adapter_precision.py`, `generation.py`): a randomly initialised model with a real
Qwen2.5 shape, the LoRA targets of the recipes, and a reward that such a model can learn.

Imported by those scripts (run as ``python benchmarks/<name>.py``, so this folder is on ``sys.path``).
"""

from __future__ import annotations

#: The linear layers the recipes put LoRA on (attention and MLP projections of Qwen2 / Llama).
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def even_token_ids(completions, completion_ids, **kwargs) -> list[float]:
    """Reward for a random model: fraction of a completion's token ids that are even (0..1)."""
    return [sum(1 for i in ids if i % 2 == 0) / max(1, len(ids)) for ids in completion_ids]


def build_qwen2_shaped(directory: str, device: str, shape: dict):
    """Save a randomly initialised (seed 0) bfloat16 ``Qwen2ForCausalLM`` of ``shape`` (`Qwen2Config` fields) with the
    embedded tiny tokenizer into ``directory``; returns the model. Built on ``device``: initialising 0.5B–1.5B
    parameters takes seconds on a GPU, minutes on 2 CPU cores."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from trl_grpo_ext.models.embedded import tiny

    tokenizer = tiny.load_tokenizer(tiny.ensure_tiny_model())
    config = Qwen2Config(**shape, bos_token_id=None, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return model
