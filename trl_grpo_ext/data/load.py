"""Prompt datasets for the recipes: the embedded task and GSM8K-format rows mapped to chat prompts."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..config.checks import Range, check_choice
from ..config.data_sizes import EMBEDDED_TEST_SIZES
from ..models.embedded import tiny
from .arithmetic import ARITHMETIC_DATASET_ID, arithmetic_rows
from .checks import (
    DatasetError,
    check_empty_prompts,
    check_not_empty,
    check_prompt_kinds,
    check_prompt_rows,
    describe,
    read_dataset,
)

GSM8K_SYSTEM_PROMPT = (
    "Solve the math problem step by step. Put your reasoning between <think> and </think>, then give the final "
    "number between <answer> and </answer>."
)
_MAX_PROMPT_LENGTH = Range(low=1, integer=True, fix="use e.g. 512 [tokens], or remove it to keep every prompt.")
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


#: System prompt of the embedded arithmetic task: the format its rewards (``numeric_match`` and
#: ``answer_phrase_format`` with ``answer_phrase: The answer is``) read.
ARITHMETIC_SYSTEM_PROMPT = "Solve the problem. End your reply with: The answer is N."
#: The embedded datasets, by ``dataset_name``.
EMBEDDED_DATASETS = (tiny.TINY_DATASET_ID, ARITHMETIC_DATASET_ID)



def to_chat_prompt(prompt, system_prompt: str | None = None) -> list[dict]:
    """A prompt as chat messages, with ``system_prompt`` first (open-r1's ``make_conversation``).

    A text prompt becomes ``[system?, {"role": "user", "content": prompt}]``; a list of messages gets the system
    message prepended unless it already starts with one (which is kept: the dataset's own wins).

    >>> to_chat_prompt("2+2?", "Be brief.")
    [{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': '2+2?'}]
    """
    if isinstance(prompt, str):
        messages = [{"role": "user", "content": prompt}]
    elif isinstance(prompt, list) and all(isinstance(m, dict) and "role" in m for m in prompt):
        messages = list(prompt)
    else:
        raise ValueError(f"a prompt must be text or a list of chat messages, got {type(prompt).__name__}: "
                         f"{str(prompt)[:80]!r}")
    if system_prompt and not (messages and messages[0].get("role") == "system"):
        messages.insert(0, {"role": "system", "content": system_prompt})
    return messages


def apply_prompt_settings(dataset, prompt_column: str = "prompt", system_prompt: str | None = None):
    """Put the prompts of ``prompt_column`` under ``prompt``, as chat messages with ``system_prompt`` first.

    Unchanged when ``prompt_column`` is ``"prompt"`` and there is no system prompt (text prompts stay text). The other
    columns stay (the rewards read them). Raises ValueError naming the columns when ``prompt_column`` is missing.
    """
    if prompt_column == "prompt" and not system_prompt:
        return dataset
    if prompt_column not in dataset.column_names:
        raise ValueError(
            f"dataset_prompt_column={prompt_column!r} is not a column of the dataset (columns: "
            f"{dataset.column_names}). Set dataset_prompt_column to the column holding the prompts.")
    return dataset.map(lambda row: {"prompt": to_chat_prompt(row[prompt_column], system_prompt)})


def load_prompt_dataset(script_args, seed: int | None = None, split: str = "train"):
    """The prompts of one split of a recipe's dataset, as a `datasets.Dataset` with a ``prompt`` column.

    Args:
        script_args (`RecipeArguments`): ``dataset_name`` (``"embedded:count-char"``, ``"embedded:arithmetic"`` or a
            Hub id / local path), ``dataset_config``, ``dataset_train_split`` / ``dataset_test_split``,
            ``dataset_format`` (``"gsm8k"`` or ``"prompt"``: rows already hold a ``prompt`` column),
            ``dataset_prompt_column``, ``embedded_num_prompts``, ``eval_num_prompts`` (test split of an embedded
            task), ``embedded_target``, ``system_prompt`` (applies to every dataset, `apply_prompt_settings`; GSM8K
            and the arithmetic task use their own default when it is unset).
        seed (`int`, *optional*): seed of an embedded task's rows (default: ``script_args.embedded_seed``, else 0; the
            test split of an embedded task never repeats a training prompt).
        split (`str`, defaults to ``"train"``): ``"train"`` reads ``dataset_train_split``; ``"test"`` reads
            ``dataset_test_split``.

    Raises:
        ValueError: an unknown embedded dataset, or rows without a usable prompt column: the first problem
            :func:`read_prompt_split` finds.
    """
    found = read_prompt_split(script_args, seed, split)
    if found.problems:
        raise found.problems[0]
    return found.dataset


@dataclass
class PromptSplit:
    """What :func:`read_prompt_split` found in one split.

    Attributes:
        dataset (`datasets.Dataset` or `None`): the prompts (mapped as `load_prompt_dataset` maps them) when there
            is no problem; the rows as read when only their prompts have problems (the reward checks can still read
            their columns); ``None`` when the split could not be read, is empty or is GSM8K rows with problems.
        rows (`int` or `None`): rows read (``None``: not read).
        problems (`list[ValueError]`): every problem found (`DatasetError` and the prompt-column `ValueError`), in
            the order found.
        where (`str`): how the messages name the split (`describe`).
    """

    dataset: Any = None
    rows: int | None = None
    problems: list = field(default_factory=list)
    where: str = ""


def read_prompt_split(script_args, seed: int | None = None, split: str = "train") -> PromptSplit:
    """One split of a recipe's dataset read and checked as :func:`load_prompt_dataset` does, every problem of its
    rows collected instead of the first raised: unreadable, empty, no prompt column, prompts of another kind,
    empty prompts, GSM8K rows without ``question`` / ``answer`` or without ``####`` (arguments: see
    :func:`load_prompt_dataset`). Never raises `ValueError`: returns a :class:`PromptSplit`."""
    name = script_args.dataset_name
    column = getattr(script_args, "dataset_prompt_column", "prompt")
    system_prompt = getattr(script_args, "system_prompt", None)
    if split not in ("train", "test") or getattr(script_args, "dataset_streaming", False) or tiny.is_embedded(name):
        try:
            dataset = _embedded_split(script_args, seed, split)
        except ValueError as err:
            return PromptSplit(problems=[err], where=f"dataset_name={name!r}")
        return PromptSplit(dataset, len(dataset), [], f"dataset_name={name!r} ({split!r} split)")
    split_field = "dataset_train_split" if split == "train" else "dataset_test_split"
    split_name = getattr(script_args, split_field)
    where = describe(name, split_name)
    try:
        dataset = read_dataset(name, script_args.dataset_config, split_name, split_field)
        check_not_empty(dataset, where)
    except ValueError as err:
        return PromptSplit(problems=[err], where=where)
    found = PromptSplit(dataset, len(dataset), [], where)

    def attempt(check, *args, **kwargs) -> None:
        try:
            check(*args, **kwargs)
        except ValueError as err:
            found.problems.append(err)

    if script_args.dataset_format == "gsm8k":
        attempt(check_gsm8k_columns, dataset, where)
        if not found.problems:
            attempt(check_prompt_kinds, dataset, where, "question", chat=False)
            if not found.problems:  # a question of another kind is not also called empty
                attempt(check_empty_prompts, dataset, where, "question")
            attempt(check_gsm8k_answers, dataset, where)
        if found.problems:
            found.dataset = None  # the rewards read the mapped rows (prompt, answer): the config rules check those
            return found
        gsm8k_system = system_prompt or GSM8K_SYSTEM_PROMPT
        found.dataset = dataset.map(lambda row: gsm8k_to_prompt(row, gsm8k_system), remove_columns=dataset.column_names)
        return found
    if column == "prompt" and "prompt" not in dataset.column_names:
        found.problems.append(ValueError(
            f"dataset {name!r} has no 'prompt' column (columns: {dataset.column_names}). Set dataset_prompt_column "
            "to the column holding the prompts, or dataset_format: gsm8k for question/answer rows."))
    elif column in dataset.column_names:
        attempt(check_prompt_kinds, dataset, where, column)
        if not found.problems:
            attempt(check_empty_prompts, dataset, where, column)
    if not found.problems:
        try:
            found.dataset = apply_prompt_settings(dataset, column, system_prompt)
        except ValueError as err:
            found.problems.append(err)
    return found


def _embedded_split(script_args, seed: int | None, split: str):
    """The rows of an embedded task's split (raises `ValueError` for another split, streaming, or an unknown name)."""
    name = script_args.dataset_name
    seed = getattr(script_args, "embedded_seed", 0) if seed is None else seed
    check_choice("split", split, ("train", "test"), error=ValueError)
    if getattr(script_args, "dataset_streaming", False):
        raise ValueError("dataset_streaming=True is not supported by the recipe: the plan counts the prompts. Remove it "
                         "(the dataset is downloaded once and cached).")
    if name not in EMBEDDED_DATASETS:
        raise ValueError(f"dataset_name={name!r} is not an embedded dataset; use one of {list(EMBEDDED_DATASETS)}.")
    if split == "train":
        num = script_args.embedded_num_prompts
    else:
        num = getattr(script_args, "eval_num_prompts", None) or EMBEDDED_TEST_SIZES[name]
    if name == tiny.TINY_DATASET_ID:
        # The test split draws its filler words from another seed: other prompts, the same task.
        dataset = tiny.count_char_dataset(num, target=script_args.embedded_target,
                                          seed=seed if split == "train" else seed + 10_000)
        return apply_prompt_settings(dataset, "prompt", getattr(script_args, "system_prompt", None))
    from datasets import Dataset

    rows = arithmetic_rows(split, num, seed=seed)
    system_prompt = getattr(script_args, "system_prompt", None) or ARITHMETIC_SYSTEM_PROMPT
    return Dataset.from_list([gsm8k_to_prompt(row, system_prompt) for row in rows])


def check_gsm8k_rows(dataset, where: str) -> None:
    """Refuse GSM8K-format rows without ``question`` / ``answer`` columns, with empty questions, or with answers that
    have no ``#### <number>`` line (`data_checks.DatasetError` naming the split, the column and the rows)."""
    check_gsm8k_columns(dataset, where)
    check_prompt_rows(dataset, where, "question", chat=False)
    check_gsm8k_answers(dataset, where)


def check_gsm8k_columns(dataset, where: str) -> None:
    """Refuse GSM8K-format rows without a ``question`` or an ``answer`` column (`DatasetError`)."""
    missing = [c for c in ("question", "answer") if c not in dataset.column_names]
    if missing:
        raise DatasetError(f"{where} has no {' or '.join(map(repr, missing))} column (columns: {dataset.column_names}); "
                           "dataset_format: gsm8k reads question and answer rows. Fix: set dataset_format: prompt "
                           "with dataset_prompt_column, or rename the columns.")


def check_gsm8k_answers(dataset, where: str) -> None:
    """Refuse GSM8K-format answers without a ``#### <number>`` line (`DatasetError` naming the rows)."""
    bad = [i for i, answer in enumerate(dataset["answer"]) if not isinstance(answer, str) or not _GSM8K_ANSWER.search(answer)]
    if bad:
        rows = ", ".join(map(str, bad[:5])) + (", ..." if len(bad) > 5 else "")
        raise DatasetError(f"{where}: {len(bad)} of {len(dataset)} answers have no '#### <number>' line (rows {rows}, "
                           "counted from 0), so no reward could score them. Fix: end each answer with '#### N', or "
                           "use dataset_format: prompt with an answer column the rewards read.")


def load_eval_dataset(script_args, seed: int | None = None, split: str = "test", num_prompts: int | None = None,
                      fix: str = "name a split that exists, or set eval_strategy: no and final_eval: none.",
                      size_field: str = "eval_num_prompts"):
    """The held-out prompts of a run: :func:`load_prompt_dataset` of ``split``, cut to its first ``num_prompts``.
    ``fix``: the advice for a split that does not exist (the default is a training run's); ``size_field``: what set
    ``num_prompts`` (a field, or `eval`'s ``--num-prompts``), named by a refusal.

    Raises:
        ValueError: the split cannot be loaded, is empty, or has fewer than ``num_prompts`` rows.
    """
    try:
        dataset = load_prompt_dataset(script_args, seed=seed, split=split)
    except DatasetError as err:
        if err.missing_split:  # a split the dataset lacks: the caller's advice (trl-grpo-ext eval has --split)
            raise DatasetError(f"{err.missing_split} Fix: {fix}") from None
        raise
    except ValueError as err:
        if "split" not in str(err).lower() or tiny.is_embedded(script_args.dataset_name):
            raise
        field_name = "dataset_test_split" if split == "test" else "dataset_train_split"
        reason = " ".join(str(err).split()).rstrip(".")
        raise ValueError(f"{field_name}={getattr(script_args, field_name)!r}: {reason}. Fix: {fix}") from None
    if len(dataset) == 0:
        raise ValueError(f"the {split!r} split of dataset {script_args.dataset_name!r} is empty.")
    if num_prompts is not None:
        if num_prompts > len(dataset):
            change = f"pass {size_field} {len(dataset)}" if size_field.startswith("--") else \
                f"set {size_field}: {len(dataset)}"
            raise ValueError(f"{size_field}={num_prompts} exceeds the {len(dataset)} prompts of the {split!r} split "
                             f"of {script_args.dataset_name!r}. Fix: {change} or lower.")
        dataset = dataset.select(range(num_prompts))
    return dataset


def prompt_length(prompt, tokenizer) -> int:
    """Tokens of one prompt as the trainer sees it: chat messages through the chat template (with the generation
    prompt), text as it is."""
    if isinstance(prompt, str):
        return len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
    ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True)
    return len(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)


def drop_long_prompts(dataset, tokenizer, max_prompt_length: int):
    """:func:`prompts_within`, printing how many prompts went."""
    kept = prompts_within(dataset, tokenizer, max_prompt_length)
    if len(kept) < len(dataset):
        print(f"max_prompt_length={max_prompt_length}: dropped {len(dataset) - len(kept)} of {len(dataset)} prompts "
              "that are longer.")
    return kept


def prompts_within(dataset, tokenizer, max_prompt_length: int):
    """The rows whose prompt has at most ``max_prompt_length`` tokens (`prompt_length`).

    ``max_prompt_length`` was a `GRPOConfig` field until TRL 1.16 removed it; TRL then cut over-long prompts from
    the left (losing the system prompt and the start of the question). Dropping them keeps every prompt the model
    sees whole; the plan counts the rows that remain.

    Raises:
        ValueError: ``max_prompt_length`` < 1, or no prompt fits.
    """
    _MAX_PROMPT_LENGTH.check("max_prompt_length", max_prompt_length, error=ValueError)
    lengths = [prompt_length(prompt, tokenizer) for prompt in dataset["prompt"]]
    if lengths and min(lengths) > max_prompt_length:
        raise ValueError(f"max_prompt_length={max_prompt_length}: every prompt of the training split is longer (the "
                         f"shortest has {min(lengths)} tokens). Fix: raise max_prompt_length to at least "
                         f"{min(lengths)}, or remove it.")
    return dataset.select([i for i, n in enumerate(lengths) if n <= max_prompt_length])
