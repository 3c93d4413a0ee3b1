"""Prompt datasets for the recipes: the embedded task and GSM8K-format rows mapped to chat prompts."""

from __future__ import annotations

import re

from . import tiny

GSM8K_SYSTEM_PROMPT = (
    "Solve the math problem step by step. Put your reasoning between <think> and </think>, then give the final "
    "number between <answer> and </answer>."
)
_GSM8K_ANSWER = re.compile(r"####\s*(.+?)\s*$", re.S)


def gsm8k_final_answer(answer: str) -> str:
    """The final answer of a GSM8K ``answer`` field: the text after ``####``, without thousands separators.

    >>> gsm8k_final_answer("Natalia sold 48/2 = <<48/2=24>>24 clips ...\\n#### 72")
    '72'

    Raises:
        ValueError: the field has no ``####`` marker (not GSM8K format).
    """
    match = _GSM8K_ANSWER.search(answer)
    if match is None:
        raise ValueError(f"GSM8K answer has no '#### <number>' line: {answer[-80:]!r}")
    return match.group(1).replace(",", "").strip()


def gsm8k_to_prompt(row: dict, system_prompt: str | None = GSM8K_SYSTEM_PROMPT) -> dict:
    """Map one GSM8K row ``{"question", "answer"}`` to ``{"prompt": [chat messages], "answer": final number}``.

    The ``answer`` column is what the ``accuracy`` / ``numeric_match`` rewards compare against.
    """
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    messages.append({"role": "user", "content": row["question"]})
    return {"prompt": messages, "answer": gsm8k_final_answer(row["answer"])}


def load_prompt_dataset(script_args, seed: int = 0):
    """The training prompts for a recipe, as a `datasets.Dataset` with a ``prompt`` column.

    Args:
        script_args (`RecipeArguments`): ``dataset_name`` (``"embedded:count-char"`` or a Hub id / local path),
            ``dataset_config``, ``dataset_train_split``, ``dataset_format`` (``"gsm8k"`` or ``"prompt"``: rows
            already hold a ``prompt`` column), ``embedded_num_prompts``, ``embedded_target``, ``system_prompt``.
        seed (`int`): seed of the embedded task's rows.
    """
    name = script_args.dataset_name
    if tiny.is_embedded(name):
        if name != tiny.TINY_DATASET_ID:
            raise ValueError(f"dataset_name={name!r}: the only embedded dataset is {tiny.TINY_DATASET_ID!r}.")
        return tiny.count_char_dataset(script_args.embedded_num_prompts, target=script_args.embedded_target, seed=seed)
    from datasets import load_dataset

    dataset = load_dataset(name, name=script_args.dataset_config, split=script_args.dataset_train_split)
    if script_args.dataset_format == "gsm8k":
        system_prompt = script_args.system_prompt or GSM8K_SYSTEM_PROMPT
        dataset = dataset.map(lambda row: gsm8k_to_prompt(row, system_prompt), remove_columns=dataset.column_names)
    elif "prompt" not in dataset.column_names:
        raise ValueError(
            f"dataset {name!r} has no 'prompt' column (columns: {dataset.column_names}). Set dataset_format: gsm8k "
            "for question/answer rows, or map your data to a 'prompt' column."
        )
    return dataset
