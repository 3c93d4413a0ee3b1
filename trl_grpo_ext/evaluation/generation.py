"""Generate and score completions of held-out prompts the way TRL's ``GRPOTrainer`` does (used by
:mod:`trl_grpo_ext.evaluation.evaluate`).

For a conversational dataset the prompt messages are rendered with the tokenizer's chat template
(``add_generation_prompt=True``), left-padded, and the new tokens decoded without special tokens; rewards receive
``prompts``, ``completions`` (conversational when the prompts are), ``completion_ids`` and every other dataset
column, one value per completion.
"""

from __future__ import annotations

import math
from typing import Any


def _batches(items: list, size: int):
    for start in range(0, len(items), size):
        yield items[start : start + size]


def generate_completions(
    model, tokenizer, prompts: list, *, max_new_tokens: int, num_return_sequences: int = 1,
    temperature: float | None = None, top_p: float = 1.0, top_k: int = 0, batch_size: int = 32,
) -> tuple[list[list[str]], list[list[int]]]:
    """Generate completions for each prompt, as TRL's trainer would.

    Args:
        model: a causal LM (plain or PEFT), in eval mode.
        tokenizer: its tokenizer, with a chat template for conversational prompts.
        prompts (`list`): each a list of chat messages, or a plain string.
        max_new_tokens (`int`): ``max_completion_length`` [tokens].
        num_return_sequences (`int`, defaults to `1`): completions per prompt.
        temperature (`float`, *optional*): ``None`` or 0 → greedy decoding; otherwise sampling at that temperature.
        top_p (`float`), top_k (`int`): sampling filters (as in the run).
        batch_size (`int`, defaults to `32`): completions generated per ``generate`` call.

    Returns:
        `(texts, token_ids)`: ``texts[i][j]`` is the j-th completion of prompt i, ``token_ids[i][j]`` its token ids
        (up to and including the first eos).
    """
    greedy = not temperature
    texts: list[list[str]] = [[] for _ in prompts]
    ids: list[list[list[int]]] = [[] for _ in prompts]
    rendered = [
        tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True) if isinstance(p, list) else p
        for p in prompts
    ]
    per_call = max(1, batch_size // num_return_sequences)
    eos = tokenizer.eos_token_id
    device = next(model.parameters()).device
    order = list(range(len(prompts)))
    padding_side, tokenizer.padding_side = tokenizer.padding_side, "left"  # decoder-only: pad on the left
    try:
        _generate_chunks(model, tokenizer, rendered, order, per_call, device, greedy, max_new_tokens,
                         num_return_sequences, temperature, top_p, top_k, eos, texts, ids)
    finally:
        tokenizer.padding_side = padding_side
    return texts, ids


def _generate_chunks(model, tokenizer, rendered, order, per_call, device, greedy, max_new_tokens,
                     num_return_sequences, temperature, top_p, top_k, eos, texts, ids) -> None:
    import torch

    for chunk in _batches(order, per_call):
        enc = tokenizer([rendered[i] for i in chunk], return_tensors="pt", padding=True, add_special_tokens=False)
        enc = {k: v.to(device) for k, v in enc.items()}
        kwargs: dict[str, Any] = {"max_new_tokens": max_new_tokens, "pad_token_id": tokenizer.pad_token_id}
        if greedy:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        else:
            kwargs.update(do_sample=True, temperature=temperature, top_p=top_p, top_k=top_k or None,
                          num_return_sequences=num_return_sequences)
        with torch.no_grad():
            out = model.generate(**enc, **kwargs)
        new = out[:, enc["input_ids"].shape[1]:].tolist()
        per = 1 if greedy else num_return_sequences
        for row, tokens in enumerate(new):
            if eos in tokens:
                tokens = tokens[: tokens.index(eos) + 1]
            i = chunk[row // per]
            ids[i].append(tokens)
            texts[i].append(tokenizer.decode(tokens, skip_special_tokens=True))


def score_completions(
    reward_funcs: list, prompts: list, completions: list[str], completion_ids: list[list[int]], columns: dict[str, list]
) -> list[list[float | None]]:
    """Score completions with each reward function the way TRL calls them.

    Args:
        reward_funcs (`list`): callables ``f(prompts=, completions=, completion_ids=, **columns)``.
        prompts (`list`): the prompt of each completion (repeated per completion).
        completions (`list[str]`): completion texts; wrapped as ``[{"role": "assistant", "content": text}]`` when
            the prompts are conversational, as TRL does.
        completion_ids (`list[list[int]]`): token ids of each completion.
        columns (`dict[str, list]`): every other dataset column, one value per completion.

    Returns:
        ``scores[f][i]``: reward f of completion i (``None`` where the reward skipped it).
    """
    conversational = bool(prompts) and isinstance(prompts[0], list)
    wrapped = [[{"role": "assistant", "content": c}] for c in completions] if conversational else completions
    scores = []
    for func in reward_funcs:
        values = func(prompts=prompts, completions=wrapped, completion_ids=completion_ids, trainer_state=None,
                      **columns)
        scores.append([None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v) for v in values])
    return scores
