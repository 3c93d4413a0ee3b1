"""Skip's groups after the first epoch, split by visit: a prompt's first rollout of an epoch, and its repeats in the
same epoch (`SkippingRepeatSampler` fills a skipped slot with another prompt; until 2026-12-06 it decided a whole
epoch at its start, since then each generation batch when drawn), each repeat by how the prompt's previous rollout
came out. Reads one arm's result of `real_model_vs_trl.py` (its ``rollouts``).

    python benchmarks/skip_revisits.py outputs/bench-vs-trl/skip-seed3.json 64   # 64 = steps per epoch
"""

import argparse
import json

from skip_predictors import minority  # benchmarks/ is on the path: the script's folder


def uniform(totals: list) -> bool:
    """Whether a group's weighted totals are uniform, as `skip_predictors.minority` counts them (no completion off the
    most common total; fewer than 2 scored completions)."""
    return minority(totals) == 0


def revisits(rollouts: list, steps_per_epoch: int) -> dict[str, list[int]]:
    """``{kind: [uniform groups, groups]}`` over the groups after the first epoch (one generation call per step)."""
    last, seen = {}, {}
    counts = {"first": [0, 0], "repeat": [0, 0], "repeat_after_uniform": [0, 0], "repeat_after_informative": [0, 0]}
    for call, key, totals, _ in rollouts:
        epoch, now = call // steps_per_epoch, uniform(totals)
        if epoch > 0:
            kind = "repeat" if key in seen.get(epoch, ()) else "first"
            buckets = [kind] + ([f"repeat_after_{'uniform' if last[key] else 'informative'}"] if kind == "repeat" else [])
            for bucket in buckets:
                counts[bucket][0] += now
                counts[bucket][1] += 1
        seen.setdefault(epoch, set()).add(key)
        last[key] = now
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("result", help="an arm's JSON written by real_model_vs_trl.py")
    parser.add_argument("steps_per_epoch", type=int, help="training problems / prompts per step")
    args = parser.parse_args()
    with open(args.result, encoding="utf-8") as f:
        rollouts = json.load(f)["rollouts"]
    for kind, (n_uniform, n) in revisits(rollouts, args.steps_per_epoch).items():
        print(f"{kind:26s} groups {n:4d}  uniform {n_uniform:4d} ({n_uniform / max(n, 1):.2f})")


if __name__ == "__main__":
    main()
