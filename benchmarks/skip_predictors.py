"""Skip predictors judged offline on recorded trajectories (``make bench-vs-trl``'s ``rollouts``).

    python benchmarks/skip_predictors.py outputs/bench-vs-trl/results.json [--arms trl mask]

Every group a run generated after a prompt's first rollout is a test case: from the prompt's earlier groups, each
predictor gives the probability of keeping (rolling out) the prompt, and the group's own rewards say whether it came
out uniform (its G weighted totals equal; all-None uniform). Printed per predictor, over the arms' groups:

- kept: the expected share of those groups a predictor rolls out, Σ keep / n;
- uniform among kept: the expected share of the rolled-out groups that came out uniform, Σ keep × uniform / Σ keep
  (the issue's "completions spent on uniform groups", for groups of one size);
- informative kept: the expected share of the informative groups it rolls out (what skipping costs in signal).

Predictors: ``none`` (keep all); ``greso p`` (Zheng et al. 2025, arXiv 2506.02177: keep with p^k after k uniform
groups in a row, the shipped ``zero_variance_filter: skip``); ``minority m, p``: as greso, but a group whose
minority (completions off the group's most common total) was at most m also counts as uniform in the streak; ``oracle``
(keep exactly the informative groups: the floor of 0 uniform). Then the transition table behind them: the next group's
uniform share by the previous group's minority count (0 = uniform). The trajectories are the arms' own, so a
predictor's effect on training (which prompts the model then learns from) is not modelled.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def minority(totals: list) -> int:
    """Completions off the group's most common total (0: uniform). None totals count as one value; a group with
    fewer than two non-None totals is uniform (0)."""
    present = [t for t in totals if t is not None]
    if len(present) < 2:
        return 0
    counts = defaultdict(int)
    for t in present:
        counts[round(t, 6)] += 1
    return len(present) - max(counts.values())


def cases(rollouts: list[list]) -> list[tuple[list[int], int]]:
    """(the prompt's earlier minority counts, oldest first; this group's minority count) for every group of a prompt
    rolled out before, in generation order."""
    seen: dict[str, list[int]] = defaultdict(list)
    out = []
    for _, key, totals, _ in rollouts:
        m = minority(totals)
        if seen[key]:
            out.append((list(seen[key]), m))
        seen[key].append(m)
    return out


def streak(history: list[int], threshold: int) -> int:
    """Consecutive most recent groups whose minority count is at most ``threshold`` (0: uniform only)."""
    k = 0
    for m in reversed(history):
        if m > threshold:
            break
        k += 1
    return k


def judge(all_cases: list[tuple[list[int], int]], keep) -> tuple[float, float, float]:
    """(kept, uniform among kept, informative kept) of the predictor ``keep(history) -> probability``."""
    kept = uniform_kept = informative_kept = 0.0
    informative = sum(1 for _, m in all_cases if m > 0)
    for history, m in all_cases:
        p = keep(history)
        kept += p
        uniform_kept += p * (m == 0)
        informative_kept += p * (m > 0)
    n = len(all_cases)
    return kept / n, uniform_kept / kept if kept else float("nan"), informative_kept / informative if informative else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", help="results.json files (or single-arm JSONs) with rollouts")
    parser.add_argument("--arms", nargs="+", default=["trl", "mask"], help="arms whose trajectories are used")
    args = parser.parse_args(argv)
    all_cases = []
    for path in args.results:
        data = json.loads(Path(path).read_text())
        for run in data if isinstance(data, list) else [data]:
            if run["arm"] in args.arms and run.get("rollouts"):
                all_cases += cases(run["rollouts"])
    if not all_cases:
        raise SystemExit("no rollouts of those arms in the files (recorded since bench-vs-trl kept them)")
    predictors = {"none": lambda h: 1.0, "oracle": None}
    for p in (0.5, 0.25, 0.1):
        predictors[f"greso p={p}"] = lambda h, p=p: p ** streak(h, 0)
    for m in (1, 2):
        for p in (0.25, 0.1):
            predictors[f"minority<={m} p={p}"] = lambda h, m=m, p=p: p ** streak(h, m)
    print(f"{len(all_cases)} revisited groups, arms {', '.join(args.arms)}")
    print(f"{'predictor':22s} {'kept':>6s} {'uniform among kept':>19s} {'informative kept':>17s}")
    for name, keep in predictors.items():
        if keep is None:
            informative = sum(1 for _, m in all_cases if m > 0)
            print(f"{name:22s} {informative / len(all_cases):6.2f} {0.0:19.2f} {1.0:17.2f}")
            continue
        kept, uniform, informative = judge(all_cases, keep)
        print(f"{name:22s} {kept:6.2f} {uniform:19.2f} {informative:17.2f}")
    print("\nnext group uniform, by the previous group's minority count")
    table: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for history, m in all_cases:
        row = table[min(history[-1], 4)]
        row[0] += m == 0
        row[1] += 1
    for previous in sorted(table):
        u, n = table[previous]
        label = f"{previous}" if previous < 4 else "4+"
        print(f"  minority {label:>2s}: {u}/{n} = {u / n:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
