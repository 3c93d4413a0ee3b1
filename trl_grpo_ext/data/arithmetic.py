"""The embedded arithmetic task: seeded one- and two-step grade-school word problems, built locally.

``embedded:arithmetic`` gives rows in GSM8K's own shape, ``{"question": str, "answer": "<worked solution>\\n#### N"}``,
so the same mapping as GSM8K (:func:`trl_grpo_ext.data.load.gsm8k_to_prompt`) turns them into chat prompts, and the same
rewards score them. Problems use whole numbers; every intermediate and final answer is a non-negative integer.

Splits are disjoint by construction: a problem is a deterministic function of ``(seed, split, index)``, and a
question that already appeared in the train split is never put in the test split (see :func:`arithmetic_rows`).
"""

from __future__ import annotations

import random

from ..config.checks import Range

#: ``dataset_name`` that selects this task.
ARITHMETIC_DATASET_ID = "embedded:arithmetic"
#: Largest split this task builds [problems] (the generator has far more distinct problems).
MAX_PROBLEMS = 50_000
#: Splits this task offers, with their default sizes [problems].
ARITHMETIC_SPLITS = {"train": 2000, "test": 500}

_NAMES = ["Ava", "Ben", "Chloe", "Dan", "Emma", "Finn", "Grace", "Hugo", "Isla", "Jack", "Lena", "Max", "Nora",
          "Omar", "Priya", "Sam", "Tara", "Theo", "Uma", "Zoe"]
_ITEMS = ["apples", "stickers", "marbles", "pencils", "cookies", "cards", "books", "shells", "coins", "stamps"]
_CONTAINERS = ["boxes", "bags", "packs", "jars", "baskets"]


def _one_step(rng: random.Random) -> tuple[str, str, int]:
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    kind = rng.choice(["add", "sub", "mul"])
    if kind == "add":
        a, b = rng.randint(2, 60), rng.randint(2, 40)
        q = f"{name} has {a} {item}. {name} gets {b} more {item}. How many {item} does {name} have now?"
        return q, f"{name} has {a} + {b} = {a + b} {item}.", a + b
    if kind == "sub":
        a = rng.randint(10, 90)
        b = rng.randint(1, a - 1)
        q = f"{name} had {a} {item} and gave away {b} of them. How many {item} does {name} have left?"
        return q, f"{name} has {a} - {b} = {a - b} {item} left.", a - b
    a, b = rng.randint(2, 9), rng.randint(2, 12)
    box = rng.choice(_CONTAINERS)
    q = f"{name} buys {a} {box} of {item}. Each of the {box} holds {b} {item}. How many {item} does {name} buy?"
    return q, f"{name} buys {a} * {b} = {a * b} {item}.", a * b


def _two_step(rng: random.Random) -> tuple[str, str, int]:
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    kind = rng.choice(["add_sub", "mul_sub", "mul_add"])
    if kind == "add_sub":
        a, b = rng.randint(5, 50), rng.randint(2, 30)
        c = rng.randint(1, a + b - 1)
        q = (f"{name} has {a} {item}. {name} gets {b} more and then gives {c} to a friend. "
             f"How many {item} does {name} have now?")
        sol = f"{name} has {a} + {b} = {a + b} {item}, then {a + b} - {c} = {a + b - c} {item}."
        return q, sol, a + b - c
    a, b = rng.randint(2, 9), rng.randint(2, 10)
    box = rng.choice(_CONTAINERS)
    if kind == "mul_sub":
        c = rng.randint(1, a * b - 1)
        q = (f"{name} has {a} {box} with {b} {item} in each. {name} uses {c} {item}. "
             f"How many {item} are left?")
        sol = f"{name} has {a} * {b} = {a * b} {item}, then {a * b} - {c} = {a * b - c} {item} are left."
        return q, sol, a * b - c
    c = rng.randint(1, 30)
    q = (f"{name} has {a} {box} with {b} {item} in each and {c} loose {item}. "
         f"How many {item} does {name} have in total?")
    sol = f"{name} has {a} * {b} = {a * b} {item} in {box}, then {a * b} + {c} = {a * b + c} {item}."
    return q, sol, a * b + c


def arithmetic_problem(seed: int, split: str, index: int, two_step_fraction: float = 0.5) -> dict:
    """One problem of the task, a pure function of its arguments.

    Args:
        seed (`int`): the task's seed.
        split (`str`): ``"train"`` or ``"test"``.
        index (`int`): position in the split.
        two_step_fraction (`float`, defaults to `0.5`): probability that the problem needs two operations.

    Returns:
        `dict`: ``{"question": str, "answer": "<solution>\\n#### N", "steps": 1 | 2}``.
    """
    rng = random.Random(f"{seed}/{split}/{index}")
    two = rng.random() < two_step_fraction
    question, solution, value = (_two_step if two else _one_step)(rng)
    return {"question": question, "answer": f"{solution}\n#### {value}", "steps": 2 if two else 1}


def arithmetic_rows(split: str = "train", num_problems: int | None = None, seed: int = 0,
                    two_step_fraction: float = 0.5) -> list[dict]:
    """Rows of one split of the task, GSM8K-shaped.

    Args:
        split (`str`, defaults to ``"train"``): ``"train"`` or ``"test"``.
        num_problems (`int`, *optional*): rows to return [problems]; defaults to :data:`ARITHMETIC_SPLITS` [split].
        seed (`int`, defaults to `0`): the task's seed (the same seed gives the same rows).
        two_step_fraction (`float`, defaults to `0.5`): share of two-step problems, in [0, 1].

    Returns:
        `list[dict]` of ``{"question", "answer", "steps"}``; questions are unique within the split, and a test
        question never equals a train question of the same seed (train questions are drawn from indices
        ``0 .. 4 * ARITHMETIC_SPLITS["train"]``, which the test split skips).

    Raises:
        ValueError: an unknown split, a non-positive ``num_problems`` or a fraction outside [0, 1].
    """
    if split not in ARITHMETIC_SPLITS:
        raise ValueError(f"dataset split {split!r} of {ARITHMETIC_DATASET_ID!r} does not exist; use one of "
                         f"{sorted(ARITHMETIC_SPLITS)}.")
    n = ARITHMETIC_SPLITS[split] if num_problems is None else num_problems
    field_name = "embedded_num_prompts" if split == "train" else "eval_num_prompts"
    n = Range(low=1, high=MAX_PROBLEMS, integer=True, fix=f"the most {ARITHMETIC_DATASET_ID!r} holds is {MAX_PROBLEMS}."
          ).check(field_name, n, error=ValueError)
    Range(low=0, high=1, fix="a fraction, e.g. 0.3.").check("two_step_fraction", two_step_fraction, error=ValueError)
    excluded: set[str] = set()
    if split == "test":
        pool = 4 * ARITHMETIC_SPLITS["train"]
        excluded = {arithmetic_problem(seed, "train", i, two_step_fraction)["question"] for i in range(pool)}
    rows, seen, index = [], set(), 0
    while len(rows) < n:
        row = arithmetic_problem(seed, split, index, two_step_fraction)
        index += 1
        if row["question"] in seen or row["question"] in excluded:
            continue
        seen.add(row["question"])
        rows.append(row)
        if index > 100 * n:  # pragma: no cover - the generator has far more distinct problems than any split
            raise ValueError(f"could not draw {n} distinct problems for split {split!r}.")
    return rows
