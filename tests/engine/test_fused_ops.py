"""The fused C ops give TorchOps' numbers (the transformers modules' maths), in float32 and
bfloat16, on one thread and on several."""

import pytest
import torch
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

from engine.cpu import native_build
from engine.cpu.fused_ops import FusedOps, TorchOps, select

DTYPES = [torch.float32, torch.bfloat16]
# (tokens, hidden): one decode; a batch of decodes; a prefill chunk (split over threads)
ROWS = [(1, 576), (64, 576), (300, 960)]


@pytest.fixture(scope="module")
def fused() -> FusedOps:
    return FusedOps(native_build.library())


def assert_matches(got: torch.Tensor, want: torch.Tensor):
    """float32: equal up to rounding. bfloat16: the same bits, but for the odd value one
    unit apart, where float32 sums in another order land either side of a rounding edge."""
    assert got.dtype == want.dtype and got.shape == want.shape
    if got.dtype == torch.float32:
        torch.testing.assert_close(got, want, rtol=2e-5, atol=2e-5)
        return
    ulps = (got.view(torch.int16).int() - want.view(torch.int16).int()).abs()
    ulps[got == want] = 0  # +0 and -0
    assert ulps.max() <= 1, ulps.max()
    assert (ulps > 0).float().mean() < 0.01, (ulps > 0).float().mean()


@pytest.fixture(params=[1, 2], ids=["1-thread", "2-threads"])
def threads(request, monkeypatch):
    monkeypatch.setattr(torch, "get_num_threads", lambda: request.param)
    return request.param


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows, cols", ROWS)
def test_rms_norm(fused, dtype, rows, cols, threads):
    torch.manual_seed(rows)
    x = (torch.randn(rows, cols) * 3).to(dtype)
    weight = (torch.rand(cols) + 0.5).to(dtype)
    assert_matches(fused.rms_norm(x, weight, 1e-5), TorchOps.rms_norm(x, weight, 1e-5))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows, cols", ROWS)
def test_silu_and_mul(fused, dtype, rows, cols, threads):
    torch.manual_seed(rows)
    x = torch.randn(rows, 2 * cols) * 4
    x[0, :4] = torch.tensor([-100.0, 100.0, -88.5, 89.0])  # exp's clamps, both sides
    x = x.to(dtype)
    assert_matches(fused.silu_and_mul(x), TorchOps.silu_and_mul(x))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("head_dim", [16, 64, 128])
@pytest.mark.parametrize("num_tokens", [1, 37, 200])
def test_rope_and_cache(fused, dtype, head_dim, num_tokens, threads):
    """q and k as views of one packed projection, as the native forward has them; the pool's
    rows at `slots` get this step's (rotated) k and v, and no other row changes."""
    num_heads, num_kv_heads, num_slots = 6, 2, 512
    torch.manual_seed(num_tokens + head_dim)
    config = LlamaConfig(hidden_size=num_heads * head_dim, num_attention_heads=num_heads)
    positions = torch.randint(0, 1000, (1, num_tokens))
    qkv = torch.randn(num_tokens, (num_heads + 2 * num_kv_heads) * head_dim).to(dtype)
    cos, sin = LlamaRotaryEmbedding(config)(qkv, positions)
    cos, sin = cos[0], sin[0]  # (T, D), of qkv's dtype
    slots = torch.randperm(num_slots)[:num_tokens]
    results = []
    for ops in (fused, TorchOps):
        packed = qkv.clone().view(num_tokens, -1, head_dim)
        q, k, v = packed.split([num_heads, num_kv_heads, num_kv_heads], dim=1)
        pools = [torch.full((num_slots, num_kv_heads, head_dim), 7.0, dtype=dtype) for _ in "kv"]
        q, k = ops.rope_and_cache(q, k, v, cos, sin, *pools, slots)
        results.append((q, k, *pools))
    for got, want in zip(*results, strict=True):
        assert_matches(got, want)
    k_pool, v_pool = results[0][2:]
    untouched = torch.ones(num_slots, dtype=torch.bool).index_fill_(0, slots, False)
    assert (k_pool[untouched] == 7).all() and (v_pool[untouched] == 7).all()
    torch.testing.assert_close(v_pool[slots], qkv.view(num_tokens, -1, head_dim)[:, -2:])


def test_select_falls_back_to_torch_ops(monkeypatch):
    assert isinstance(select(torch.device("cpu"), torch.bfloat16), FusedOps)
    assert "float16" in native_build.unsupported_reason(torch.device("cpu"), torch.float16)
    assert isinstance(select(torch.device("cpu"), torch.float16), TorchOps)
    assert "CPU only" in native_build.unsupported_reason(torch.device("cuda"), torch.float32)
    gone = native_build.KernelUnavailable("no working C compiler 'cc'")
    monkeypatch.setattr(native_build, "_library", lambda: gone)
    assert isinstance(select(torch.device("cpu"), torch.float32), TorchOps)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", [1, 64])
def test_argmax_matches_torch_max_with_ties_infinities_and_nans(fused, dtype, rows):
    """The first of equal maxima, the first NaN where a row has one, as torch.max's indices;
    64 rows of a vocabulary-sized row split over threads."""
    torch.manual_seed(rows)
    x = torch.randn(rows, 49152).to(dtype)
    x[0, 7] = x[0, 30000] = x[0].max() + 1  # a tie: the first wins
    if rows > 1:
        x[1] = float("-inf")  # all -inf: index 0
        x[2, 100:200] = float("inf")
        x[3, 4000] = x[3, 5] = float("nan")  # NaN beats any number: the first NaN
        x[4, :] = x[4, 12345]  # a constant row
    want = TorchOps.argmax(x)
    assert torch.equal(fused.argmax(x), want)
    assert torch.equal(want, torch.argmax(x, dim=-1))  # the reference is argmax's pick
    assert torch.equal(fused.argmax(x[:, :1000]), TorchOps.argmax(x[:, :1000]))  # strided
