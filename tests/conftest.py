"""Shared fixtures: everything runs offline on the CPU; the embedded tiny model is built once per machine."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def tiny_model_dir():
    """Directory of the embedded tiny model and tokenizer (created on first use, then cached)."""
    from trl_grpo_ext.models.embedded import tiny

    return tiny.ensure_tiny_model()


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir):
    from trl_grpo_ext.models.embedded import tiny

    return tiny.load_tokenizer(tiny_model_dir)
