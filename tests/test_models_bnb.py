"""bitsandbytes' CPU inference repacking is kept off while training (an evaluation must not break the next step)."""

import pytest
import torch


def _layer():
    import bitsandbytes as bnb

    torch.manual_seed(0)
    layer = bnb.nn.Linear4bit(64, 32, bias=True, compute_dtype=torch.float32, quant_type="nf4")
    layer.load_state_dict({"weight": torch.randn(32, 64) * 0.02, "bias": torch.zeros(32)}, strict=False)
    return layer.to("cpu")


def test_keep_4bit_training_layout_stops_the_eval_time_repacking():
    from trl_grpo_ext.models.loading import keep_4bit_training_layout

    layer = _layer()
    if not getattr(layer, "support_avx512bf16_for_cpu", False):
        pytest.skip("this CPU has no AVX512-BF16: bitsandbytes never repacks here, so there is nothing to keep off")
    model = torch.nn.Sequential(layer)
    assert keep_4bit_training_layout(model) == 1
    model.eval()
    with torch.no_grad():
        model(torch.randn(2, 64))
    assert not getattr(layer.weight.quant_state, "packing_format_for_cpu", False)
    model.train()
    x = torch.randn(2, 64, requires_grad=True)
    model(x).sum().backward()  # the training path still works after an evaluation
    assert x.grad is not None


def test_without_it_bitsandbytes_repacks_in_eval_mode():
    """Pins the bitsandbytes behaviour the helper exists for: if this starts failing, the workaround may go."""
    layer = _layer()
    if not getattr(layer, "support_avx512bf16_for_cpu", False):
        pytest.skip("this CPU has no AVX512-BF16: bitsandbytes never repacks here")
    layer.eval()
    with torch.no_grad():
        layer(torch.randn(2, 64))
    assert getattr(layer.weight.quant_state, "packing_format_for_cpu", False)
