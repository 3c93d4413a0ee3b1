"""The embedded default: a tiny causal LM, its tokenizer and a synthetic task, built locally.

Nothing here touches the network. The model is a randomly initialised Qwen2-shaped causal LM (fixed seed) and the
tokenizer a character-level tokenizer built with the `tokenizers` library, with a ChatML chat template and
``<|endoftext|>`` as pad/eos. Both are written once into a cache directory and reused:
``$TRL_GRPO_EXT_CACHE`` or ``~/.cache/trl_grpo_ext``.

The synthetic task ("count-char") asks the model to write a target character as often as it can; the verifiable reward
is the fraction of completion characters equal to that target (see :func:`trl_grpo_ext.rewards`' ``char_fraction``).
A random model writes the target in about 1/len(vocab) of positions; a policy that learned the task writes it
everywhere, so progress is visible within a few hundred optimizer steps on a CPU.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import string
from pathlib import Path

from ...config.checks import check_choice
from ..cache import cache_dir, save_atomically

#: Prefix of a ``model_name_or_path`` / ``dataset_name`` value that selects the embedded default.
EMBEDDED_PREFIX = "embedded:"
#: The embedded model name.
TINY_MODEL_ID = "embedded:tiny-qwen2"
#: The embedded dataset name.
TINY_DATASET_ID = "embedded:count-char"

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ALPHABET = string.ascii_lowercase + string.digits + " .,:;!?'\n-+*/=#()"

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

#: Shape of the tiny model (Qwen2 architecture): 81,472 parameters with the 56-token vocabulary (3 special tokens +
#: 53 characters): embeddings and lm_head 56 × 64 each (7,168), per block 37,120 (attention 12,416 with the q/k/v
#: biases, MLP 24,576, two norms 128) × 2, final norm 64. tests/test_tiny.py counts them on the built model.
TINY_CONFIG = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
    "tie_word_embeddings": False,
    "rope_theta": 10000.0,
}


def is_embedded(name: str | None) -> bool:
    """Whether ``name`` selects the embedded default (it starts with ``"embedded:"``)."""
    return isinstance(name, str) and name.startswith(EMBEDDED_PREFIX)


def build_tokenizer():
    """Build the character-level tokenizer (a :class:`transformers.PreTrainedTokenizerFast`).

    Every character of :data:`ALPHABET` is one token; ``<|endoftext|>`` is pad and eos, ``<|im_start|>`` /
    ``<|im_end|>`` delimit chat turns. Decoding concatenates characters, so spaces and newlines survive a round trip.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + list(ALPHABET))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<|endoftext|>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens(SPECIAL_TOKENS)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        unk_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def _fingerprint(seed: int) -> str:
    blob = json.dumps({"config": TINY_CONFIG, "alphabet": ALPHABET, "seed": seed, "v": 1}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:10]


def ensure_tiny_model(seed: int = 0, directory: str | os.PathLike | None = None) -> Path:
    """Create (once) and return the directory holding the tiny model and its tokenizer.

    Args:
        seed (`int`, defaults to `0`): seed of the random initialisation; a different seed is a different directory.
        directory (`str` or `Path`, *optional*): where to write; defaults to ``cache_dir() / "tiny-qwen2-<hash>"``.

    Returns:
        `Path` of a directory loadable with ``AutoModelForCausalLM.from_pretrained`` and
        ``AutoTokenizer.from_pretrained`` (no network needed).

    The directory is written to a temporary sibling and renamed, so concurrent processes (``torchrun``) never see a
    half-written model.
    """
    target = Path(directory) if directory is not None else cache_dir() / f"tiny-qwen2-{_fingerprint(seed)}"
    if (target / "config.json").exists() and (target / "tokenizer.json").exists():
        return target
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    tokenizer = build_tokenizer()
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **TINY_CONFIG,
    )
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return save_atomically(model, tokenizer, target)


def load_tokenizer(path: str | os.PathLike):
    """Load the tiny tokenizer from ``path`` as a plain fast tokenizer.

    ``AutoTokenizer`` / ``AutoProcessor`` would pick ``Qwen2Tokenizer`` from the model's ``config.json``, which
    silently drops spaces and newlines from this character vocabulary, so embedded runs always load it through here.
    """
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(str(path))


def resolve_model_path(name: str, seed: int = 0) -> str:
    """Map an embedded model (``embedded:tiny-qwen2``, ``embedded:smollm2-135m-instruct``) to its local directory,
    creating it once; return any other name unchanged."""
    if name == TINY_MODEL_ID:
        return str(ensure_tiny_model(seed))
    from . import smollm2

    if name == smollm2.SMOLLM2_MODEL_ID:
        return str(smollm2.ensure_smollm2())
    if is_embedded(name):
        raise ValueError(f"model_name_or_path={name!r} is not an embedded model; use one of {list(EMBEDDED_MODELS)}.")
    return name


#: The embedded models, by ``model_name_or_path``.
EMBEDDED_MODELS = (TINY_MODEL_ID, "embedded:smollm2-135m-instruct")


def count_char_rows(num_prompts: int, target: str = "a", seed: int = 0) -> list[dict]:
    """Rows of the synthetic ``count-char`` task: a conversational prompt and the ``target`` column.

    Args:
        num_prompts (`int`): number of distinct prompts (rows).
        target (`str`, defaults to ``"a"``): the character the model is rewarded for writing.
        seed (`int`, defaults to `0`): seed of the random filler words, so two calls give the same rows.

    Returns:
        A list of ``{"prompt": [{"role": "user", "content": ...}], "target": target}`` dicts.
    """
    check_choice("target", target, tuple(ALPHABET), error=ValueError, fix="(one character of the tiny alphabet)")
    rng = random.Random(seed)
    rows = []
    for _ in range(num_prompts):
        filler = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(3, 8)))
        content = f"{filler}: write {target} {target} {target}"
        rows.append({"prompt": [{"role": "user", "content": content}], "target": target})
    return rows


def count_char_dataset(num_prompts: int = 512, target: str = "a", seed: int = 0):
    """The synthetic task as a :class:`datasets.Dataset` (see :func:`count_char_rows`)."""
    from datasets import Dataset

    return Dataset.from_list(count_char_rows(num_prompts, target=target, seed=seed))
