"""benchmarks/skip_revisits.py splits skip's groups after the first epoch by visit (docs/benchmarks-history.md, 192 problems)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from skip_revisits import revisits, uniform  # noqa: E402


def test_groups_after_the_first_epoch_are_split_into_first_rollouts_and_repeats_by_hand():
    same, mixed = [0.2, 0.2, 0.2], [1.2, 0.2, 0.2]
    rollouts = [  # [generation call, prompt, weighted totals, first reward]; 2 steps an epoch
        [0, "A", same, None], [1, "B", mixed, None],  # epoch 0: not counted, but remembered
        [2, "A", same, None], [2, "A", same, None],  # epoch 1: A first (uniform), A again right after a uniform one
        [3, "B", mixed, None], [3, "B", same, None],  # B first (informative), B again after an informative one
    ]
    assert revisits(rollouts, 2) == {"first": [1, 2], "repeat": [2, 2], "repeat_after_uniform": [1, 1],
                                     "repeat_after_informative": [1, 1]}
    assert uniform([None, 1.0]) and uniform([0.5, 0.5]) and not uniform([0.5, None, 1.0])
