"""Skip before rollout (``zero_variance_filter: skip``): each prompt's reward history and the epoch's skip decisions.

GRESO (Zheng et al. 2025, "Act Only When It Pays", arXiv 2506.02177, Algorithm 1): a prompt whose group was uniform
at its last k rollouts in a row is skipped before rollout with probability 1 − p^k, p the exploration probability
(GRESO adapts p towards a target uniform share; here p is the fixed ``skip_exploration_probability``). Prompts are
identified by their text (`prompt_key`), so every process and every resumed run agrees on them. The streaks may start
from an ``eval --split train --k K`` result (`read_history_seed`), so that skipping acts in the first epoch too. See
docs/zero_variance.md.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import torch

from ..config.checks import Range

_PROBABILITY = Range(low=0, high=1, low_open=True, fix="use a probability in (0, 1], e.g. 0.25.")


def prompt_key(prompt) -> int:
    """A stable 63-bit id of a prompt (a string or a conversation), the same in every process and every run.

    >>> prompt_key("What is 2 + 2?") == prompt_key("What is 2 + 2?"), prompt_key("a") == prompt_key("b")
    (True, False)
    """
    text = json.dumps(prompt, sort_keys=True, ensure_ascii=False, default=str)
    return int.from_bytes(hashlib.sha1(text.encode("utf-8")).digest()[:8], "big") >> 1


class PromptHistory:
    """How many rollouts in a row each prompt's group was uniform (its *streak*), and the epoch-start snapshot the
    skip decisions of the current epoch were taken from.

    Attributes:
        streaks (`dict[int, int]`): `prompt_key` -> consecutive uniform rollouts (0 after an informative one; absent
            = never rolled out).
        epoch_start (`tuple[int, dict] | None`): ``(epoch, streaks at that epoch's start)``; saved with checkpoints
            so that a run resumed inside an epoch takes the uninterrupted run's decisions.
    """

    def __init__(self):
        self.streaks: dict[int, int] = {}
        self.epoch_start: tuple[int, dict[int, int]] | None = None

    def seed(self, seed: HistorySeed, keys: list[int]) -> tuple[int, int]:
        """Start the streaks of the prompts ``keys`` (the training set's) from ``seed``.

        Returns:
            `tuple[int, int]`: (prompts of ``keys`` the seed evaluated, of them starting with a uniform streak).

        Raises:
            ValueError: the seed evaluated none of ``keys`` (another dataset, split or system prompt)."""
        known = {key for key in keys if key in seed.prompts}
        if not known:
            raise ValueError(f"skip_history_file evaluated none of the {len(set(keys))} training prompts (another "
                             "dataset, split or system prompt). Fix: write it with trl-grpo-ext eval --config <this "
                             "config> --split train --k K --output FILE.")
        self.streaks.update({key: seed.streaks[key] for key in known if key in seed.streaks})
        return len(known), sum(1 for key in known if key in seed.streaks)

    def observe(self, keys: list[int], uniform: list[bool]) -> None:
        """Record one rollout per group: ``keys[i]``'s group was uniform iff ``uniform[i]`` (in order, so a prompt
        drawn twice in a batch counts twice)."""
        for key, is_uniform in zip(keys, uniform):
            self.streaks[key] = self.streaks.get(key, 0) + 1 if is_uniform else 0

    def begin_epoch(self, epoch: int) -> dict[int, int]:
        """The streaks epoch ``epoch``'s decisions use: the restored snapshot if a checkpoint of this epoch was
        loaded, else the current streaks (snapshotted)."""
        if self.epoch_start is None or self.epoch_start[0] != epoch:
            self.epoch_start = (epoch, dict(self.streaks))
        return self.epoch_start[1]

    def state_dict(self) -> dict:
        """JSON-ready state (keys as strings)."""
        start = None if self.epoch_start is None else {
            "epoch": self.epoch_start[0], "streaks": {str(k): v for k, v in self.epoch_start[1].items()}}
        return {"streaks": {str(k): v for k, v in self.streaks.items()}, "epoch_start": start}

    def load_state_dict(self, state: dict) -> None:
        self.streaks = {int(k): int(v) for k, v in state["streaks"].items()}
        start = state.get("epoch_start")
        self.epoch_start = None if start is None else (
            int(start["epoch"]), {int(k): int(v) for k, v in start["streaks"].items()})


def skip_substitutes(slots: list[int], keys: list[int], streaks: dict[int, int], probability: float,
                     seed: int, epoch: int) -> dict[int, int]:
    """The epoch's skip decisions: which dataset rows are skipped before rollout, and which row takes each one's slot.

    Row ``slots[i]`` (prompt ``keys[i]``, streak k) is kept with probability ``probability``^k (always when k = 0);
    the slots of skipped rows are filled, in order, from the kept rows in a seeded permutation (cycled), so each step
    still trains ``prompts_per_step`` groups and the epoch keeps its number of steps. Nothing is skipped when every
    row would be. Deterministic in (``seed``, ``epoch``) and the streaks.

    Args:
        slots (`list[int]`): the epoch's dataset rows in sampler order, each once. keys (`list[int]`): their
            `prompt_key`. streaks (`dict`): the epoch-start streaks (`PromptHistory.begin_epoch`).
        probability (`float`): ``skip_exploration_probability`` p, in (0, 1].
        seed (`int`), epoch (`int`): the run's seed and the 0-based epoch.

    Returns:
        `dict[int, int]`: skipped row -> the row generated in its place (empty: nothing skipped).

    Raises:
        ValueError: ``probability`` outside (0, 1].

    >>> skip_substitutes([3, 1, 2, 0], [30, 10, 20, 0], {}, 0.5, seed=0, epoch=1)
    {}
    >>> substitutes = skip_substitutes([3, 1, 2, 0], [30, 10, 20, 0], {10: 60}, 0.5, seed=0, epoch=1)  # p^60
    >>> list(substitutes), substitutes[1] in (3, 2, 0)
    ([1], True)
    """
    probability = _PROBABILITY.check("skip_exploration_probability", probability, error=ValueError)
    generator = torch.Generator().manual_seed(int(seed) * 1_000_003 + int(epoch))
    draws = torch.rand(len(slots), generator=generator, dtype=torch.float64).tolist()
    kept, skipped = [], []
    for row, key, draw in zip(slots, keys, draws):
        (kept if draw < probability ** streaks.get(key, 0) else skipped).append(row)
    if not kept or not skipped:
        return {}
    order = torch.randperm(len(kept), generator=generator).tolist()
    return {row: kept[order[i % len(kept)]] for i, row in enumerate(skipped)}


def check_history_file(view) -> None:
    """The rule ``skip_history_file`` (`validation.rules`): `read_history_seed` refuses the file, read with the run's
    G and tolerance (``view``: a `RunView`; skip only)."""
    if view.get("zero_variance_filter") == "skip" and view.get("skip_history_file") is not None:
        read_history_seed(view.get("skip_history_file"), view.batch["num_generations"],
                          float(view.get("zero_variance_tolerance") or 0.0))


@dataclass(frozen=True)
class HistorySeed:
    """Skip's starting streaks, read from an ``eval --split train --k K --output FILE`` result (`read_history_seed`).

    Attributes:
        num_samples (`int`): K, samples per prompt in the file.
        prompts (`frozenset[int]`): the `prompt_key` of every prompt the file evaluated.
        streaks (`dict[int, int]`): `prompt_key` -> K // G for each prompt whose K sampled rewards were uniform
            (`groups.zero_variance_group_mask` over the K, the filter's own definition): as if the prompt had
            been rolled out K // G times, uniform each time.
    """

    num_samples: int
    prompts: frozenset
    streaks: dict


def read_history_seed(path: str, num_generations: int, tolerance: float = 0.0) -> HistorySeed:
    """Skip's starting streaks from an evaluation of the training split with K samples per prompt.

    Args:
        path (`str`): ``skip_history_file``: the JSON ``trl-grpo-ext eval --split train --k K --output FILE`` writes
            (one model's result: ``prompt_keys`` and ``sample_totals``, the K weighted total rewards of each prompt).
        num_generations (`int`): G; K must be at least G.
        tolerance (`float`, defaults to `0.0`): ``zero_variance_tolerance`` [reward units].

    Returns:
        `HistorySeed`.

    Raises:
        ValueError: no such file, not such a result, or K < G; the message names ``skip_history_file`` and the fix.
    """
    from .groups import zero_variance_group_mask

    command = f"trl-grpo-ext eval --config <this config> --split train --k {num_generations} --output {path}"
    where = f"skip_history_file={path!r}"
    try:
        result = json.loads(Path(path).expanduser().read_text(encoding="utf-8"))
    except OSError as err:
        raise ValueError(f"{where} cannot be read ({err.strerror or err}). Fix: write it with {command}.") from None
    except ValueError:
        raise ValueError(f"{where} is not JSON. Fix: write it with {command}.") from None
    if isinstance(result, dict) and "adapter" in result and "base" in result:
        raise ValueError(f"{where} holds two models' results (eval --compare-base). Fix: write it with {command} "
                         "(the model you train from alone).")
    keys = result.get("prompt_keys") if isinstance(result, dict) else None
    totals = result.get("sample_totals") if isinstance(result, dict) else None
    k = result.get("num_samples") if isinstance(result, dict) else None
    if not keys or not isinstance(totals, list) or len(totals) != len(keys) or not isinstance(k, int) or k < 1:
        raise ValueError(f"{where} holds no sampled rewards per prompt (an eval result without --k, or not an "
                         f"eval result). Fix: write it with {command}.")
    if k < num_generations:
        raise ValueError(f"{where} has {k} samples per prompt, fewer than num_generations={num_generations}: no "
                         f"prompt would start with a uniform rollout. Fix: write it with {command} (or more).")
    if any(not isinstance(row, list) or len(row) != k for row in totals):
        raise ValueError(f"{where}: every prompt needs its {k} sampled rewards in sample_totals. Fix: write it with "
                         f"{command}.")
    rewards = torch.tensor([[float("nan") if v is None else float(v) for v in row] for row in totals],
                           dtype=torch.float32).flatten()
    uniform = zero_variance_group_mask(rewards, k, tolerance)[::k].tolist()
    streak = k // num_generations
    return HistorySeed(num_samples=k, prompts=frozenset(int(key) for key in keys),
                       streaks={int(key): streak for key, flag in zip(keys, uniform) if flag})
