"""models.settings: the dtype rules a CPU run depends on."""

import pytest

from trl_grpo_ext.models.settings import cpu_bf16_warning


@pytest.mark.parametrize("dtype", ["float32", "float16", "auto"])
def test_no_warning_unless_the_run_computes_in_bf16(dtype):
    assert cpu_bf16_warning(dtype, bf16=False, bf16_supported=False) is None


@pytest.mark.parametrize("dtype, bf16, named", [("bfloat16", False, "dtype=bfloat16"), ("float32", True, "bf16=true"),
                                                ("auto", True, "bf16=true")])
def test_bf16_warns_only_on_a_cpu_without_bf16_instructions(dtype, bf16, named):
    assert cpu_bf16_warning(dtype, bf16, bf16_supported=True) is None
    warning = cpu_bf16_warning(dtype, bf16, bf16_supported=False)
    assert warning.startswith(f"{named} on a CPU without bf16 instructions")
    assert warning.endswith("Fix: --bf16 false --dtype float32.")


def test_the_default_asks_onednn(monkeypatch):
    import torch

    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False, raising=False)
    assert cpu_bf16_warning("bfloat16", bf16=False) is not None
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True, raising=False)
    assert cpu_bf16_warning("bfloat16", bf16=False) is None
