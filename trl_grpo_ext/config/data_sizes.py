"""Sizes of the embedded datasets' splits, known without building them (torch-free, for ``plan``)."""

from __future__ import annotations

#: Default test split size of each embedded task [prompts] (``eval_num_prompts`` overrides it).
EMBEDDED_TEST_SIZES = {"embedded:count-char": 64, "embedded:arithmetic": 500}


def embedded_test_size(dataset_name) -> int | None:
    """The default test split size of an embedded task, or ``None`` for any other dataset (unknown before loading)."""
    return EMBEDDED_TEST_SIZES.get(dataset_name) if isinstance(dataset_name, str) else None
