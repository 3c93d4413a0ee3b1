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
import math
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
    """How many rollouts in a row each prompt's group was uniform (its *streak*), and the skip decisions the current
    epoch has taken so far.

    Attributes:
        streaks (`dict[int, int]`): `prompt_key` -> consecutive uniform rollouts (0 after an informative one; absent
            = never rolled out).
        observed (`int`): generation batches recorded by `observe` so far (the run's, not the seed's).
        decisions (`tuple[int, int, list[dict]] | None`): ``(epoch, observed at the epoch's first decision, [skipped
            row -> row generated in its place, per generation batch])``, in the order the sampler decided them; saved
            with checkpoints, so that a run resumed inside an epoch replays the uninterrupted run's decisions (each was
            taken from the streaks of its time).
    """

    def __init__(self):
        self.streaks: dict[int, int] = {}
        self.observed = 0
        self.decisions: tuple[int, int, list[dict[int, int]]] | None = None

    def seed(self, seed: HistorySeed, keys: list[int], num_generations: int) -> tuple[int, int]:
        """Start the streaks of the prompts ``keys`` (the training set's) from ``seed``: streak 1 for each uniform one.

        Returns:
            `tuple[int, int]`: (prompts of ``keys`` the seed evaluated, of them starting with a uniform streak).

        Raises:
            ValueError: the seed evaluated none of ``keys`` (another dataset, split or system prompt), or starts none
                of them uniform (it would change nothing)."""
        known = {key for key in keys if key in seed.prompts}
        uniform = known & seed.uniform
        where, fix = f"skip_history_file={seed.path!r}", _seed_fix(seed.path, num_generations, seed.config)
        if not known:
            raise ValueError(f"{where} evaluated none of the {len(set(keys))} training prompts (another dataset, split "
                             f"or system prompt). {fix}")
        if not uniform:
            raise ValueError(f"{where} starts none of the {len(known)} training prompts it evaluated uniform (each "
                             "one's samples differed), so it would change nothing. Fix: remove skip_history_file "
                             "(skip then acts from the second epoch on).")
        self.streaks.update(dict.fromkeys(uniform, 1))
        return len(known), len(uniform)

    def observe(self, keys: list[int], uniform: list[bool]) -> None:
        """Record one generation batch: ``keys[i]``'s group was uniform iff ``uniform[i]`` (in order, so a prompt
        drawn twice in a batch counts twice)."""
        for key, is_uniform in zip(keys, uniform):
            self.streaks[key] = self.streaks.get(key, 0) + 1 if is_uniform else 0
        self.observed += 1

    def epoch_decisions(self, epoch: int) -> list[dict[int, int]]:
        """The decisions epoch ``epoch`` has taken, to replay and append to: the restored ones if a checkpoint of this
        epoch was loaded, else a new empty list (the previous epoch's are dropped; every batch of it was observed)."""
        if self.decisions is None or self.decisions[0] != epoch:
            self.decisions = (epoch, self.observed, [])
        return self.decisions[2]

    def observed_in_epoch(self) -> int:
        """Generation batches of the current epoch (`epoch_decisions`) observed so far; the later ones it decided
        are still to be rolled out."""
        return self.observed - self.decisions[1] if self.decisions is not None else 0

    def state_dict(self) -> dict:
        """JSON-ready state (keys as strings)."""
        decisions = None if self.decisions is None else {
            "epoch": self.decisions[0], "observed_before": self.decisions[1],
            "batches": [{str(row): sub for row, sub in batch.items()} for batch in self.decisions[2]]}
        return {"streaks": {str(k): v for k, v in self.streaks.items()}, "observed": self.observed,
                "decisions": decisions}

    def load_state_dict(self, state: dict) -> None:
        """Restore `state_dict`'s output. A checkpoint of an earlier version (epoch-start streaks, no decisions)
        restores the streaks; the rest of its epoch is then decided anew."""
        self.streaks = {int(k): int(v) for k, v in state["streaks"].items()}
        self.observed = int(state.get("observed", 0))
        decisions = state.get("decisions")
        self.decisions = None if decisions is None else (
            int(decisions["epoch"]), int(decisions.get("observed_before", self.observed)),
            [{int(row): int(sub) for row, sub in batch.items()} for batch in decisions["batches"]])


def skip_substitutes(rows: list[int], prompt_keys: list[int], streaks: dict[int, int], probability: float,
                     seed: int, epoch: int, batch: int, pending=frozenset()) -> dict[int, int]:
    """One generation batch's skip decisions: which of its dataset rows are skipped before rollout, and which row is
    generated in each one's place, from the streaks as they are now.

    Row r of ``rows`` (streak k) is kept with probability ``probability``^k (always when k = 0). Each skipped row's
    slot goes to the next row of a seeded permutation of the whole dataset that passes the same draw (streak k': kept
    with probability p^k') and whose prompt is not in the batch already; rows whose prompt is ``pending`` (in a batch
    decided but not rolled out yet, so its streak is stale) come after all others. When no row passes, the skipped
    row keeps its slot. So each step still trains ``prompts_per_step`` distinct prompts, and once a uniform rollout
    of a prompt is recorded it fills a slot with probability p^k only, as it keeps its own. Deterministic in
    (``seed``, ``epoch``, ``batch``), the streaks and ``pending``.

    Args:
        rows (`list[int]`): the batch's dataset rows in sampler order, each once.
        prompt_keys (`list[int]`): `prompt_key` of every dataset row (indexed by row).
        streaks (`dict`): `PromptHistory.streaks`, read as they are at the decision.
        probability (`float`): ``skip_exploration_probability`` p, in (0, 1].
        seed (`int`), epoch (`int`), batch (`int`): the run's seed, the 0-based epoch and generation batch in it.
        pending (`set[int]`, defaults to none): `prompt_key` of the prompts of batches decided but not yet observed.

    Returns:
        `dict[int, int]`: skipped row -> the row generated in its place (empty: nothing skipped).

    Raises:
        ValueError: ``probability`` outside (0, 1].

    >>> skip_substitutes([3, 1], [0, 10, 20, 30], {}, 0.5, seed=0, epoch=1, batch=0)
    {}
    >>> skip_substitutes([3, 1], [0, 10, 20, 30], {10: 60}, 0.5, seed=0, epoch=1, batch=0)[1] in (0, 2)  # p^60
    True
    """
    probability = _PROBABILITY.check("skip_exploration_probability", probability, error=ValueError)
    digest = hashlib.sha1(f"{int(seed)}/{int(epoch)}/{int(batch)}".encode()).digest()
    generator = torch.Generator().manual_seed(int.from_bytes(digest[:8], "big") >> 1)
    draws = torch.rand(len(rows), generator=generator, dtype=torch.float64).tolist()
    skipped = [row for row, draw in zip(rows, draws) if draw >= probability ** streaks.get(prompt_keys[row], 0)]
    if not skipped:
        return {}
    taken, pending = {prompt_keys[row] for row in rows}, set(pending)
    order = torch.randperm(len(prompt_keys), generator=generator)
    candidate_draws = torch.rand(len(prompt_keys), generator=generator, dtype=torch.float64)
    fresh, stale = [], []  # rows that pass the draw: not pending, pending (taken only when too few fresh ones pass)
    for start in range(0, len(prompt_keys), 256):
        for row, draw in zip(order[start:start + 256].tolist(), candidate_draws[start:start + 256].tolist()):
            key = prompt_keys[row]
            if key in taken or draw >= probability ** streaks.get(key, 0):
                continue
            taken.add(key)
            (stale if key in pending else fresh).append(row)
            if len(fresh) == len(skipped):
                return dict(zip(skipped, fresh))
    return dict(zip(skipped, fresh + stale))


@dataclass(frozen=True)
class HistorySeed:
    """Skip's starting streaks, read from an ``eval --split train --k K --output FILE`` result (`read_history_seed`).

    Attributes:
        path (`str`): ``skip_history_file``. config (`str | None`): the run's ``--config`` (named by refusals).
        num_samples (`int`): K, samples per prompt in the file.
        prompts (`frozenset[int]`): the `prompt_key` of every prompt the file evaluated.
        uniform (`frozenset[int]`): those whose K sampled rewards were uniform (`groups.zero_variance_group_mask`
            over the K, the filter's own definition): each starts with streak 1, as after one uniform rollout.
    """

    path: str
    config: str | None
    num_samples: int
    prompts: frozenset
    uniform: frozenset


def _seed_fix(path: str, num_generations: int, config: str | None = None) -> str:
    return (f"Fix: write it with trl-grpo-ext eval --config {config or '<this config>'} --split train --k "
            f"{num_generations} --output {path} (with this run's --key value overrides).")


def _rewards_record(specs) -> list[list]:
    """Sorted [name, weight, kwargs as sorted JSON] of each reward (`RewardSpec` or its ``to_dict()``), for
    comparison: a registered reward under its canonical name (an alias is the same function) with its parameters'
    defaults filled in; the order of the rewards does not change their weighted total."""
    from ..rewards.registry import UnknownRewardError, get_reward_info

    out = []
    for row in (spec if isinstance(spec, dict) else spec.to_dict() for spec in specs):
        name, kwargs = row.get("name"), dict(row.get("kwargs") or {})
        try:
            info = get_reward_info(str(name))
            name, kwargs = info.name, {**{p.name: p.default for p in info.parameters or () if not p.required}, **kwargs}
        except UnknownRewardError:  # an import path: as written
            pass
        out.append([name, float(row.get("weight", 1.0)), json.dumps(kwargs, sort_keys=True, default=str)])
    return sorted(out)


def run_expectations(specs, max_completion_length: int, model, temperature) -> dict:
    """What a ``skip_history_file`` must have been sampled under (`read_history_seed`'s ``expect``): the reward
    specs as ``eval`` records them (run defaults filled; None without specs), the model if named (a folder that exists
    as its absolute path, as ``eval`` records it), the temperature and the completion length [tokens]."""
    from ..rewards.spec import with_run_defaults

    return {"rewards": with_run_defaults(list(specs), max_completion_length) if specs else None,
            "model": model_record(model) if isinstance(model, str) else None, "temperature": temperature,
            "max_completion_length": max_completion_length}


def model_record(model: str) -> str:
    """A model as a ``skip_history_file`` records it: an existing folder as its absolute path (the same folder from
    any working directory), anything else (a Hub id, ``embedded:...``) as given."""
    folder = Path(model).expanduser()
    return str(folder.resolve()) if folder.is_dir() else model


def _run_mismatch(result: dict, expect: dict) -> str | None:
    """What the file was sampled under that the run differs in (its rewards, model, temperature), or None. A key
    the file or ``expect`` lacks is not compared (a file written by hand, a run whose rewards are Python objects)."""
    found = []
    if result.get("rewards") is not None and expect.get("rewards") is not None:
        recorded, run = _rewards_record(result["rewards"]), _rewards_record(expect["rewards"])
        if recorded != run:
            same = [n for n, w, _ in recorded] == [n for n, w, _ in run] and \
                [w for _, w, _ in recorded] == [w for _, w, _ in run]
            show = (lambda rows: "; ".join(f"{n} {k}" for n, _, k in rows)) if same else \
                (lambda rows: ", ".join(f"{n} x {w:g}" for n, w, _ in rows))
            found.append(f"rewards ({'kwargs ' if same else ''}{show(recorded)}; the run: {show(run)})")
    for key in ("model", "temperature", "max_completion_length"):
        if result.get(key) is not None and expect.get(key) is not None and result[key] != expect[key]:
            found.append(f"{key} {result[key]!r} (the run: {expect[key]!r})")
    return "; ".join(found) or None


def read_history_seed(path: str, num_generations: int, tolerance: float = 0.0, config: str | None = None,
                      expect: dict | None = None) -> HistorySeed:
    """Skip's starting streaks from an evaluation of the training split with K samples per prompt.

    Args:
        path (`str`): ``skip_history_file``: the JSON ``trl-grpo-ext eval --split train --k K --output FILE`` writes
            (one model's result: ``prompt_keys`` and ``sample_totals``, the K weighted total rewards of each prompt).
        num_generations (`int`): G; K must be at least G (fewer samples than a group predict less than a rollout).
        tolerance (`float`, defaults to `0.0`): ``zero_variance_tolerance`` [reward units].
        config (`str`, *optional*): the run's ``--config``, named in the fix (default ``<this config>``).
        expect (`dict`, *optional*): the run's ``rewards`` (`RewardSpec` list, run defaults filled), ``model``
            (``model_name_or_path``) and ``temperature``, compared with those the file records.

    Returns:
        `HistorySeed`.

    Raises:
        ValueError: no such file, not such a result, K < G, or sampled under other rewards, another model or
            temperature; the message names ``skip_history_file`` and the fix.
    """
    from .groups import zero_variance_group_mask

    where, fix = f"skip_history_file={path!r}", _seed_fix(path, num_generations, config)
    if not str(path).strip():
        raise ValueError(f"{where} names no file. Fix: give the path of an eval --split train --k {num_generations} "
                         "result, or remove skip_history_file.")
    try:
        result = json.loads(Path(path).expanduser().read_text(encoding="utf-8"))
    except OSError as err:
        raise ValueError(f"{where} cannot be read ({err.strerror or err}). {fix}") from None
    except ValueError:
        raise ValueError(f"{where} is not JSON. {fix}") from None
    if isinstance(result, dict) and "adapter" in result and "base" in result:
        raise ValueError(f"{where} holds two models' results (eval --compare-base). {fix[:-1]}, of the model you train "
                         "from alone.")
    result = result if isinstance(result, dict) else {}
    keys, totals, k = result.get("prompt_keys"), result.get("sample_totals"), result.get("num_samples")
    if not keys or not isinstance(keys, list) or not isinstance(totals, list) or type(k) is not int or k < 1:
        raise ValueError(f"{where} holds no sampled rewards per prompt (an eval result without --k, or not an eval "
                         f"result). {fix}")
    if len(totals) != len(keys):
        raise ValueError(f"{where} lists {len(keys)} prompt_keys but {len(totals)} rows of sample_totals: one row per "
                         f"prompt (the file was cut or edited). {fix}")
    if k < num_generations:
        raise ValueError(f"{where} has {k} samples per prompt, fewer than num_generations={num_generations}: they "
                         f"predict less than one rollout. {fix}")
    if any(type(key) is not int for key in keys) or any(
            not isinstance(row, list) or len(row) != k or any(v is not None and (type(v) not in (int, float) or not math.isfinite(v)) for v in row)
            for row in totals):
        raise ValueError(f"{where}: each prompt needs an integer key and its {k} sampled rewards as finite numbers (or "
                         f"null) in sample_totals. {fix}")
    if (mismatch := _run_mismatch(result, expect or {})) is not None:
        raise ValueError(f"{where} was sampled under other settings than this run's: {mismatch}, so its uniform "
                         f"groups predict nothing about this run's. {fix}")
    if len(set(keys)) != len(keys):
        raise ValueError(f"{where} lists a prompt key more than once (eval writes each prompt once). {fix}")
    rewards = torch.tensor([[float("nan") if v is None else float(v) for v in row] for row in totals],
                           dtype=torch.float32).flatten()
    prompts = list(keys)
    uniform = zero_variance_group_mask(rewards, k, tolerance)[::k].tolist()
    return HistorySeed(path=path, config=config, num_samples=k, prompts=frozenset(prompts),
                       uniform=frozenset(key for key, flag in zip(prompts, uniform) if flag))


def start_history(settings, num_generations: int, prompts, resuming: bool = False, config: str | None = None,
                  expect: dict | None = None) -> tuple[PromptHistory | None, tuple[int, int] | None]:
    """Skip's history seeded from ``skip_history_file`` for the training ``prompts``, or ``(None, None)`` without one
    or when ``resuming`` a checkpoint (which holds the history the run continues: the file is not read).

    Args:
        settings (`ZeroVarianceSettings`): reads ``zero_variance_filter``, ``skip_history_file``,
            ``zero_variance_tolerance``. num_generations (`int`): G. prompts (callable): () -> the training prompts
            (called only with a file). expect (`dict`, *optional*): as `read_history_seed`.

    Returns:
        `(PromptHistory, (prompts evaluated, of them starting uniform))` (`PromptHistory.seed`).

    Raises:
        ValueError: as `read_history_seed` and `PromptHistory.seed`."""
    if settings.zero_variance_filter != "skip" or settings.skip_history_file is None or resuming:
        return None, None
    seed = read_history_seed(settings.skip_history_file, num_generations, settings.zero_variance_tolerance, config,
                             expect)
    history = PromptHistory()
    return history, history.seed(seed, [prompt_key(prompt) for prompt in prompts()], num_generations)
