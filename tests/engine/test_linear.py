"""FusedLinear: one matmul for several projections, packed for oneDNN or through F.linear."""

import pytest
import torch

from engine import linear
from engine.linear import FusedLinear


def _linears(bias: list[bool], dtype=torch.float32):
    torch.manual_seed(0)
    sizes = [24, 8, 8]
    return [torch.nn.Linear(32, n, bias=b).to(dtype) for n, b in zip(sizes, bias, strict=True)]


@pytest.mark.parametrize("pack", [True, False])
@pytest.mark.parametrize("bias", [[False] * 3, [True] * 3, [True, False, True]])
def test_fused_equals_the_separate_linears(pack, bias):
    mods = _linears(bias)
    fused = FusedLinear(mods, pack=pack)
    assert fused.is_packed == (pack and linear.can_pack(mods[0].weight))
    assert fused.sizes == [24, 8, 8] and (fused.out_features, fused.in_features) == (40, 32)
    x = torch.randn(5, 32)
    with torch.inference_mode():
        want = torch.cat([m(x) for m in mods], dim=-1)
        got = fused(x)
        residual = torch.randn(5, 40)
        summed = fused.add(x, residual)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(summed, want + residual, rtol=1e-5, atol=1e-5)


def test_packed_and_plain_paths_agree_in_bfloat16():
    mods = _linears([False] * 3, torch.bfloat16)
    x = torch.randn(7, 32, dtype=torch.bfloat16)
    with torch.inference_mode():
        packed, plain = FusedLinear(mods, pack=True)(x), FusedLinear(mods, pack=False)(x)
    assert packed.dtype == plain.dtype == torch.bfloat16
    torch.testing.assert_close(packed.float(), plain.float(), rtol=2e-2, atol=2e-2)


def test_weights_are_copied_not_shared():
    mods = _linears([False] * 3)
    fused = FusedLinear(mods, pack=False)
    with torch.no_grad():
        mods[0].weight.zero_()  # the model's own module changes; the fused copy does not
    assert fused.weight[:24].abs().sum() > 0


def test_no_packing_where_onednn_is_missing(monkeypatch):
    monkeypatch.setattr(linear.torch.backends.mkldnn, "is_available", lambda: False)
    assert not FusedLinear(_linears([False] * 3), pack=True).is_packed


def test_bfloat16_takes_the_float32_kernels_where_onednn_has_no_bfloat16_ones(monkeypatch):
    """An AVX2-only CPU: oneDNN refuses to pack a bfloat16 weight, so its exact float32 upcast
    is packed; the output is bfloat16 and equals F.linear's within bfloat16 rounding."""
    monkeypatch.setattr(linear.torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)
    for bias in ([False] * 3, [True, False, True]):
        mods = _linears(bias, torch.bfloat16)
        fused = FusedLinear(mods, pack=True)
        assert fused.upcast == fused.is_packed == linear.can_pack(torch.empty(0))
        assert fused.upcast or fused.weight.dtype == torch.bfloat16  # no oneDNN: F.linear
        for rows in (3, 1):  # a batch, and one row (the bf16 GEMV)
            x = torch.randn(rows, 32, dtype=torch.bfloat16)
            with torch.inference_mode():
                want = torch.cat([m(x) for m in mods], dim=-1)
                got = fused(x)
                residual = torch.randn(rows, 40, dtype=torch.bfloat16)
                summed = fused.add(x, residual)
            assert got.dtype == summed.dtype == torch.bfloat16
            torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2)
            torch.testing.assert_close(summed, residual + got)


def test_no_upcast_where_onednn_has_bfloat16_kernels_or_for_float32(monkeypatch):
    monkeypatch.setattr(linear.torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True)
    assert not FusedLinear(_linears([False] * 3, torch.bfloat16), pack=False).upcast
    monkeypatch.setattr(linear.torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)
    assert not FusedLinear(_linears([False] * 3), pack=True).upcast
    assert not FusedLinear(_linears([False] * 3, torch.bfloat16), pack=False).upcast
