"""FusedLinear: one matmul for several projections, on the engine's panel GEMM (csrc/gemm.c),
oneDNN's packed linear or F.linear; one row on the split-k GEMV (csrc/gemv.c)."""

import pytest
import torch
import torch.nn.functional as F

from engine.cpu import linear
from engine.cpu.linear import FusedLinear
from engine.loader import transpose_linear_weights


def _linears(bias: list[bool], dtype=torch.float32, sizes=(24, 8, 8), in_features=32):
    torch.manual_seed(0)
    return [
        torch.nn.Linear(in_features, n, bias=b).to(dtype) for n, b in zip(sizes, bias, strict=True)
    ]


@pytest.fixture(params=["AVX2", "AVX512"])
def cpu_capability(request, monkeypatch):
    """The CPU as torch's dispatch sees it: AVX2 at best or AVX-512."""
    monkeypatch.setattr(linear.torch.backends.cpu, "get_cpu_capability", lambda: request.param)
    return request.param


@pytest.mark.parametrize("pack", [True, False])
@pytest.mark.parametrize("bias", [[False] * 3, [True] * 3, [True, False, True]])
@pytest.mark.parametrize("sizes", [(24, 8, 8), (32, 16, 16)])  # 40 out: not whole panels
def test_fused_equals_the_separate_linears(pack, bias, sizes, cpu_capability):
    mods = _linears(bias, sizes=sizes)
    fused = FusedLinear(mods, pack=pack)
    if not pack:
        assert fused.backend == "torch"
    elif linear.panel_gemm() is not None and sum(sizes) % linear.panel_width() == 0:
        assert fused.backend == "panels"  # float32 at either level
    else:
        assert fused.backend == ("onednn" if linear.can_pack(mods[0].weight) else "torch")
    assert fused.sizes == list(sizes) and (fused.out_features, fused.in_features) == (
        sum(sizes),
        32,
    )
    x = torch.randn(5, 32)
    with torch.inference_mode():
        want = torch.cat([m(x) for m in mods], dim=-1)
        got = fused(x)
        residual = torch.randn(5, sum(sizes))
        summed = fused.add(x, residual)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(summed, want + residual, rtol=1e-5, atol=1e-5)


def test_the_panel_gemm_is_built_on_this_x86_machine():
    """The suite runs on x86-64 machines with AVX2 and FMA, where gcc builds gemm.c for the
    widest vectors there (32-column panels with AVX-512, 16 with AVX2): the panel tests below
    then test it rather than pass by a fallback."""
    level = torch.backends.cpu.get_cpu_capability()
    if level in ("AVX2", "AVX512"):
        assert linear.panel_gemm() is not None
        assert linear.panel_width() == {"AVX2": 16, "AVX512": 32}[level]


# tiles of 6 (AVX2) and 12 rows (AVX-512), their tails, blocks of rows
@pytest.mark.parametrize("rows", [1, 2, 5, 6, 7, 12, 13, 25, 64, 193, 400])
@pytest.mark.parametrize("in_features", [8, 320, 700])  # AVX2: one k range, exactly one, three
@pytest.mark.parametrize("bias", [False, True])
def test_panels_equal_f_linear_over_tiles_tails_and_k_ranges(rows, in_features, bias):
    mods = _linears([bias, False], sizes=(64, 32), in_features=in_features)
    fused = FusedLinear(mods)
    assert fused.backend == "panels"
    torch.manual_seed(rows)
    x = torch.randn(rows, 2 * in_features)[:, ::2]  # a strided input is made contiguous
    residual = torch.randn(rows, 96)
    with torch.inference_mode():
        want = torch.cat([m(x) for m in mods], dim=-1)
        got, summed = fused(x), fused.add(x, residual)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=2e-5)
    torch.testing.assert_close(summed, want + residual, rtol=1e-5, atol=2e-5)


def _bf16_panels_built() -> bool:
    return linear.panel_gemm_bf16() is not None


def test_the_bf16_panel_gemm_is_built_where_the_cpu_has_avx512_bf16():
    """gcc builds gemm_bf16.c's kernel with -march=native on a CPU with AVX512_BF16: where
    the suite's machine has it, the bfloat16 panel tests below test it."""
    avx512_bf16 = torch.backends.cpu.get_cpu_capability() == "AVX512" and (
        torch.cpu._is_avx512_bf16_supported()
    )
    assert _bf16_panels_built() == avx512_bf16


@pytest.mark.parametrize("rows", [2, 11, 12, 13, 64, 192, 193, 400])  # tiles, tails, row blocks
@pytest.mark.parametrize("in_features", [2, 64, 700])
@pytest.mark.parametrize("bias", [False, True])
def test_bf16_panels_equal_float32_sums_rounded_once(rows, in_features, bias):
    """y = x W^T + b from bfloat16 x and W: float32 sums, rounded to bfloat16 once, on the
    bfloat16 panels where the CPU has AVX512_BF16 (whichever kernel serves elsewhere)."""
    mods = _linears([bias, False], torch.bfloat16, sizes=(64, 32), in_features=in_features)
    fused = FusedLinear(_loader_layout(mods))
    assert (fused.backend == "bf16_panels") == _bf16_panels_built()
    torch.manual_seed(rows)
    x = torch.randn(rows, 2 * in_features, dtype=torch.bfloat16)[:, ::2]  # made contiguous
    with torch.inference_mode():
        got = fused(x)
        residual = torch.randn(rows, 96)  # float32: added to the bfloat16 output
        summed = fused.add(x, residual)
    wide = [m.weight.float().t() for m in mods]  # the loader's layout: (in, out)
    want = x.float() @ torch.cat(wide, dim=1)
    if bias:
        want[:, :64] += mods[0].bias.float()
    assert got.dtype == torch.bfloat16 and got.shape == (rows, 96)
    torch.testing.assert_close(got, want.to(torch.bfloat16))
    torch.testing.assert_close(summed, residual + got.float())


def test_bf16_panels_take_any_input_layout_and_dtype():
    """A row stride the kernel cannot read in pairs (odd) is copied; a float32 x is rounded
    to bfloat16 on the way in and the output comes back in float32."""
    mods = _linears([True], torch.bfloat16, sizes=(64,), in_features=64)
    fused = FusedLinear(mods)
    torch.manual_seed(1)
    base = torch.randn(5, 65, dtype=torch.bfloat16)
    with torch.inference_mode():
        odd_stride = fused(base[:, :64])
        contiguous = fused(base[:, :64].contiguous())
        wide = fused(base[:, :64].float())
    assert torch.equal(odd_stride, contiguous)
    assert wide.dtype == torch.float32
    if fused.backend == "bf16_panels":  # a float32 x rounded to bfloat16 on the way in
        assert torch.equal(wide, contiguous.float())
    else:  # the float32-sum panels of an AVX2 CPU take a float32 x as it is
        assert fused.backend == "panels"
        torch.testing.assert_close(wide, contiguous.float(), rtol=1.6e-2, atol=1e-2)


def test_bf16_panels_keep_out_of_amx_avx2_and_other_shapes(monkeypatch):
    monkeypatch.setattr(linear, "panel_gemm_bf16", lambda: lambda *a: None)  # as if built
    monkeypatch.setattr(linear.torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    monkeypatch.setattr(linear, "has_amx", lambda: False)
    weight = torch.empty(64, 8, dtype=torch.bfloat16)
    assert linear.backend(weight) == "bf16_panels"
    assert linear.backend(weight.float()) != "bf16_panels"
    assert linear.backend(torch.empty(48, 8, dtype=torch.bfloat16)) != "bf16_panels"  # 32 | out
    assert linear.backend(torch.empty(64, 7, dtype=torch.bfloat16)) != "bf16_panels"  # odd in
    assert linear.backend(weight.to("meta")) == "torch"
    monkeypatch.setattr(linear, "has_amx", lambda: True)  # oneDNN's AMX kernels
    assert linear.backend(weight) != "bf16_panels"
    monkeypatch.setattr(linear, "has_amx", lambda: False)
    monkeypatch.setattr(linear.torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    assert linear.backend(weight) != "bf16_panels"


@pytest.mark.parametrize("rows", [1, 7, 200])
def test_bfloat16_panels_sum_as_the_float32_panels_on_the_upcast(rows, monkeypatch):
    """The bfloat16 panels widen each weight exactly as they load it: the same float32 sums,
    in the same order, as the float32 panels on the upcast weight, so the same bits."""
    monkeypatch.setattr(linear.torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    mods = _linears([True, False], torch.bfloat16, sizes=(64, 32), in_features=700)
    upcast = [torch.nn.Linear(700, m.out_features, bias=m.bias is not None) for m in mods]
    with torch.no_grad():
        for wide, m in zip(upcast, mods, strict=True):
            wide.weight.copy_(m.weight.float())
            if m.bias is not None:
                wide.bias.copy_(m.bias.float())
    narrow, wide = FusedLinear(mods), FusedLinear(upcast)
    assert narrow.backend == wide.backend == "panels"
    assert narrow.weight.dtype == torch.bfloat16 and wide.weight.dtype == torch.float32
    x = torch.randn(rows, 700, dtype=torch.bfloat16)
    with torch.inference_mode():
        assert torch.equal(narrow(x), wide(x.float()).to(torch.bfloat16))


def test_panels_serve_float32_with_avx2_or_avx512_and_bfloat16_with_avx2_only(monkeypatch):
    """With AVX-512 a bfloat16 weight goes to the bfloat16 panels (AVX512_BF16) or oneDNN's
    bfloat16 kernels, not to float32 sums."""
    width = linear.panel_width()
    weight = torch.empty(width, 8)
    monkeypatch.setattr(linear.torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    assert linear.backend(weight) == "panels"
    assert linear.backend(weight.to(torch.bfloat16)) == "panels"
    assert linear.backend(weight.to(torch.float64)) != "panels"
    assert linear.backend(torch.empty(width + 8, 8)) != "panels"  # not whole panels
    assert linear.backend(torch.empty(width, 8, device="meta")) == "torch"
    monkeypatch.setattr(linear.torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    assert linear.backend(weight) == "panels"
    assert linear.backend(weight.to(torch.bfloat16)) != "panels"  # no float32 sums
    monkeypatch.setattr(linear.torch.backends.cpu, "get_cpu_capability", lambda: "DEFAULT")
    assert linear.backend(weight) == ("onednn" if linear.can_pack(weight) else "torch")


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


def test_no_packing_where_onednn_and_the_panels_are_missing(monkeypatch):
    monkeypatch.setattr(linear.torch.backends.mkldnn, "is_available", lambda: False)
    monkeypatch.setattr(linear, "panel_gemm", lambda: None)
    assert FusedLinear(_linears([False] * 3, sizes=(32, 16, 16))).backend == "torch"


@pytest.mark.parametrize("sizes", [(24, 8, 8), (32, 16, 16)])
def test_bfloat16_where_onednn_has_no_bfloat16_kernels(sizes, cpu_capability, monkeypatch):
    """An AVX2-only CPU: oneDNN refuses to pack a bfloat16 weight. The panels take the
    bfloat16 weight as it is; where they cannot, oneDNN's float32 kernels take its exact
    upcast. The output is bfloat16 and equals F.linear's within bfloat16 rounding."""
    monkeypatch.setattr(linear.torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)
    monkeypatch.setattr(linear, "panel_gemm_bf16", lambda: None)  # nor AVX512_BF16
    for bias in ([False] * 3, [True, False, True]):
        mods = _linears(bias, torch.bfloat16, sizes)
        fused = FusedLinear(mods, pack=True)
        assert fused.backend == linear.backend(mods[0].weight, torch.float32)
        assert fused.upcast == (fused.weight.dtype == torch.float32)
        if not fused.upcast:  # the AVX2 panels: half the bytes of the upcast
            assert fused.backend == "panels" and cpu_capability == "AVX2"
        for rows in (3, 1):  # a batch, and one row (the upcast's bf16 GEMV)
            x = torch.randn(rows, 32, dtype=torch.bfloat16)
            with torch.inference_mode():
                want = torch.cat([m(x) for m in mods], dim=-1)
                got = fused(x)
                residual = torch.randn(rows, sum(sizes), dtype=torch.bfloat16)
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


def _loader_layout(mods: list[torch.nn.Linear]) -> list[torch.nn.Linear]:
    """The weights as the loader stores them: each the transpose of a contiguous (in, out)."""
    transpose_linear_weights(torch.nn.ModuleList(mods))
    return mods


def test_the_one_row_gemv_is_built_on_this_machine():
    """The suite's machines build the C library: the one-row tests below test csrc/gemv.c
    rather than pass by a fallback."""
    assert linear.gemv_split_k() is not None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    ("sizes", "in_features"),
    [
        ((64, 32, 32), 64),  # a tiny model's q, k, v
        ((48,), 8),  # fewer rows than one piece
        ((16, 32), 700),  # pieces and a short last one
        ((20480,), 40),  # wide: two tiles of columns, four rows at a time, a tail of rows
    ],
)
@pytest.mark.parametrize("bias", [False, True])
def test_one_row_equals_f_linear(dtype, sizes, in_features, bias):
    mods = _loader_layout(_linears([bias] * len(sizes), dtype, sizes, in_features))
    one_row = linear.OneRowLinear.create(mods)
    assert one_row is not None and one_row.out_features == sum(sizes)
    fused_bias = torch.cat([m.bias for m in mods]) if bias else None
    torch.manual_seed(len(sizes))
    x = torch.randn(1, 2 * in_features, dtype=dtype)[:, ::2]  # strided: made contiguous
    residual = torch.randn(1, sum(sizes))
    with torch.inference_mode():
        want = torch.cat([F.linear(x.float(), m.weight.float()) for m in mods], dim=-1)
        if bias:
            want = want + fused_bias.float()
        got = one_row(x, fused_bias)
        summed = one_row(x, fused_bias, residual)
    assert got.dtype == dtype and got.shape == (1, sum(sizes))
    if dtype == torch.float32:
        torch.testing.assert_close(got, want, rtol=1e-5, atol=2e-5)
        torch.testing.assert_close(summed, want + residual, rtol=1e-5, atol=2e-5)
    else:  # float32 sums (in another order than F.linear's), rounded to bfloat16 once
        torch.testing.assert_close(got, want.to(dtype))
        torch.testing.assert_close(summed, (want + residual).to(dtype))


@pytest.mark.parametrize(
    ("dtype", "kernel"),
    [(torch.float32, "onednn"), (torch.bfloat16, "onednn"), (torch.bfloat16, "bf16_panels")],
)
def test_fused_linear_takes_one_row_to_the_gemv_and_agrees_with_the_batch_kernel(
    dtype, kernel, monkeypatch
):
    monkeypatch.setattr(linear.torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    if kernel == "onednn":  # where the panels are not built
        monkeypatch.setattr(linear, "panel_gemm_bf16", lambda: None)
        monkeypatch.setattr(linear, "panel_gemm", lambda: None)
    elif not _bf16_panels_built():  # a CPU without AVX512_BF16: oneDNN serves
        kernel = "onednn"
    mods = _linears([True, False, True], dtype, sizes=(64, 32, 32), in_features=64)
    if not linear.can_pack(mods[0].weight.float()):
        pytest.fail("oneDNN's packed linear is missing: the suite's machines have it")
    if dtype == torch.bfloat16 and not linear.can_pack(mods[0].weight) and not _bf16_panels_built():
        _one_bf16_row_without_bf16_kernels(mods, monkeypatch)  # an AVX2 CPU
        return
    assert FusedLinear(mods).one_row is None  # transformers' (out, in) layout: no GEMV
    fused = FusedLinear(_loader_layout(mods))
    assert fused.backend == kernel and fused.one_row is not None
    calls = []
    real = linear.gemv_split_k()
    monkeypatch.setattr(linear, "gemv_split_k", lambda: lambda *a: calls.append(a) or real(*a))
    x = torch.randn(3, 64, dtype=dtype)
    residual = torch.randn(3, 128, dtype=dtype)  # the model's dtype, as in the forward
    with torch.inference_mode():
        rows = torch.cat([fused(x[i : i + 1]) for i in range(3)])
        assert len(calls) == 3
        batch = fused(x)  # three rows: the batch kernel
        assert len(calls) == 3
        summed = torch.cat([fused.add(x[i : i + 1], residual[i : i + 1]) for i in range(3)])
        summed_batch = fused.add(x, residual)
    tolerance = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {}
    torch.testing.assert_close(rows, batch, **tolerance)
    if dtype == torch.float32:  # the residual is fused in float32 only
        assert len(calls) == 6
        torch.testing.assert_close(summed, summed_batch, **tolerance)


def _one_bf16_row_without_bf16_kernels(mods, monkeypatch):
    """No bfloat16 kernels of oneDNN's nor the bfloat16 panels: the weight is upcast for the
    batch kernel, and one row goes to torch's bfloat16 GEMV on the model's own weight, not
    the engine's GEMV; a row equals the batch's within bfloat16 rounding."""
    fused = FusedLinear(_loader_layout(mods))
    assert fused.upcast and fused.backend != "bf16_panels"
    calls = []
    monkeypatch.setattr(linear, "gemv_split_k", lambda: lambda *a: calls.append(a))
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    with torch.inference_mode():
        rows = torch.cat([fused(x[i : i + 1]) for i in range(3)])
        batch = fused(x)
    assert not calls and rows.dtype == batch.dtype == torch.bfloat16
    torch.testing.assert_close(rows, batch)


def test_the_float32_panels_take_one_row_themselves(monkeypatch):
    """One row on the float32 panels streams the packed weight as fast as the GEMV streams
    the model's own (bench/RESULTS.md): no GEMV there, and a row equals the batch's."""
    mods = _loader_layout(_linears([True, False], sizes=(64, 32), in_features=700))
    fused = FusedLinear(mods)
    assert fused.backend == "panels" and fused.one_row is None
    monkeypatch.setattr(linear, "gemv_split_k", lambda: pytest.fail("the GEMV ran"))
    x, residual = torch.randn(3, 700), torch.randn(3, 96)
    with torch.inference_mode():
        rows = torch.cat([fused.add(x[i : i + 1], residual[i : i + 1]) for i in range(3)])
        torch.testing.assert_close(rows, fused.add(x, residual), rtol=0, atol=0)


def test_no_one_row_gemv_where_it_cannot_serve(monkeypatch):
    def one_row(sizes=(32, 16), dtype=torch.float32):
        mods = _linears([False] * len(sizes), dtype, sizes)
        return linear.OneRowLinear.create(_loader_layout(mods))

    assert one_row() is not None
    assert one_row(sizes=(32, 24)) is None  # a width not a multiple of 16
    assert one_row(sizes=(16,) * 5) is None  # more parts than the kernel takes
    assert one_row(dtype=torch.float64) is None
    monkeypatch.setattr(linear, "gemv_split_k", lambda: None)
    assert one_row() is None
