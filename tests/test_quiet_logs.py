"""The two log lines of optional packages that the package's ``__init__`` keeps off every CPU command's output."""

import importlib.util
import logging
from pathlib import Path

import pytest

import trl_grpo_ext  # noqa: F401  (its import installs the settings under test)

NOTICE = ("Skipping publisher trust check for 'kernels-community/quantization-bitsandbytes' because Hugging Face Hub is "
          "in offline mode.")


def test_the_offline_kernel_trust_notice_is_dropped_and_nothing_else(caplog):
    logger = logging.getLogger("kernels._internals.hf_hub")
    with caplog.at_level(logging.INFO, logger="kernels._internals.hf_hub"):
        logger.warning(NOTICE)
        logger.warning("Kernel revision main could not be resolved.")
    assert [record.getMessage() for record in caplog.records] == ["Kernel revision main could not be resolved."]


def test_bitsandbytes_cpu_hint_is_below_the_level_shown():
    assert logging.getLogger("bitsandbytes.backends.cpu.ops").getEffectiveLevel() == logging.ERROR


def test_the_installed_kernels_still_writes_the_notice_the_filter_drops():
    """Contract: kernels (a dependency of transformers >= 5.25) logs the notice from this logger with this text; if a
    release rewords it, the filter no longer matches and every offline command prints it again."""
    spec = importlib.util.find_spec("kernels")
    if spec is None:
        pytest.skip("kernels is not installed (transformers < 5.25): bitsandbytes prints no trust notice")
    source = (Path(spec.origin).parent / "_internals" / "hf_hub.py").read_text(encoding="utf-8")
    assert "logger = logging.getLogger(__name__)" in source
    assert 'f"Skipping publisher trust check for \'{repo_id}\' because Hugging Face Hub is in offline mode."' in source
