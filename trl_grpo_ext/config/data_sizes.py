"""Sizes of the embedded datasets' splits, known without building them (torch-free, for ``plan``)."""

from __future__ import annotations

#: Default test split size of each embedded task [prompts] (``eval_num_prompts`` overrides it).
EMBEDDED_TEST_SIZES = {"embedded:count-char": 64, "embedded:arithmetic": 500}
