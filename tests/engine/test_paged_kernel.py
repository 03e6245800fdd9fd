"""The paged decode kernel: the same attention as SDPA over the gathered blocks, its build
cache, and the engine's choice of backend when it cannot be built."""

import pytest
import torch
import torch.nn.functional as F

from engine import EngineConfig, FieldError, SamplingParams, native_build, paged_kernel
from tests.engine.checks import GreedyChecker
from tests.tiny_models import make_engine

# (seqs, query heads, KV heads, head_dim, block size): GQA groups of 1-4, head_dim on the
# unrolled paths (64, 128) and the generic one (16, 32, 48: an odd number of bf16 32-pairs),
# blocks of 1 token to 32 (two tiles of 16 keys each); few sequences split their KV heads
# across threads, many do not
SHAPES = [
    (1, 9, 3, 64, 16),
    (2, 4, 4, 16, 4),
    (5, 8, 2, 128, 16),
    (64, 9, 3, 64, 16),
    (3, 6, 1, 32, 1),
    (7, 12, 3, 48, 8),
    (3, 8, 2, 64, 32),
]


def _reference(q, k_cache, v_cache, block_tables, context_lens, scale):
    """Each sequence alone: its blocks in order, cut to its length, SDPA with repeated KV."""
    out = []
    num_heads, num_kv_heads = q.shape[1], k_cache.shape[2]
    for b in range(q.shape[0]):
        n = int(context_lens[b])
        k = k_cache[block_tables[b]].flatten(0, 1)[:n].transpose(0, 1)  # (Hkv, n, D)
        v = v_cache[block_tables[b]].flatten(0, 1)[:n].transpose(0, 1)
        k = k.repeat_interleave(num_heads // num_kv_heads, 0).float()
        v = v.repeat_interleave(num_heads // num_kv_heads, 0).float()
        o = F.scaled_dot_product_attention(q[b, :, None].float(), k, v, scale=scale)
        out.append(o[:, 0])
    return torch.stack(out)


def _case(shape, dtype, seed):
    num_seqs, num_heads, num_kv_heads, head_dim, block_size = shape
    gen = torch.Generator().manual_seed(seed)
    num_blocks, max_blocks = 96, 7
    pool = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = torch.randn(pool, generator=gen).to(dtype)
    v_cache = torch.randn(pool, generator=gen).to(dtype)
    tables = torch.stack(
        [torch.randperm(num_blocks, generator=gen)[:max_blocks] for _ in range(num_seqs)]
    )
    lens = torch.randint(1, max_blocks * block_size + 1, (num_seqs,), generator=gen)
    lens[0] = max_blocks * block_size  # one context fills its last block
    if num_seqs > 1:
        lens[1] = 1  # one has a single key
    q = torch.randn(num_seqs, num_heads, head_dim, generator=gen).to(dtype)
    return q, k_cache, v_cache, tables, lens


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_kernel_equals_sdpa_over_each_sequences_blocks(shape, dtype, threads, monkeypatch):
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
    q, k_cache, v_cache, tables, lens = _case(shape, dtype, seed=sum(shape))
    scale = 0.7 * shape[3] ** -0.5
    got = paged_kernel.load()(q, k_cache, v_cache, tables, lens, scale)
    want = _reference(q, k_cache, v_cache, tables, lens, scale)
    assert got.dtype == dtype and got.shape == q.shape
    if dtype == torch.float32:
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    else:  # float32 inside; one rounding to bfloat16 at the end
        torch.testing.assert_close(got.float(), want.to(dtype).float(), rtol=1e-2, atol=1e-2)


def test_the_kernel_reads_only_each_sequences_keys():
    """Padding blocks and keys past a sequence's length are never read: poisoning them with
    NaN changes nothing."""
    q, k_cache, v_cache, tables, lens = _case((4, 4, 2, 64, 4), torch.float32, seed=1)
    want = paged_kernel.load()(q, k_cache, v_cache, tables, lens, None)
    used = {(int(tables[b, p // 4]), p % 4) for b in range(4) for p in range(int(lens[b]))}
    for block in range(k_cache.shape[0]):
        for offset in range(4):
            if (block, offset) not in used:
                k_cache[block, offset] = v_cache[block, offset] = float("nan")
    tables[3, -(-int(lens[3]) // 4) :] = 10**9  # padding entries of the table too
    got = paged_kernel.load()(q, k_cache, v_cache, tables, lens, None)
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_unsupported_pools_are_named():
    assert paged_kernel.unsupported_reason(torch.device("cpu"), torch.float32, 64) is None
    assert "CPU only" in paged_kernel.unsupported_reason(torch.device("cuda"), torch.float32, 64)
    assert "float16" in paged_kernel.unsupported_reason(torch.device("cpu"), torch.float16, 64)
    assert "head_dim 40" in paged_kernel.unsupported_reason(torch.device("cpu"), torch.float32, 40)


def test_auto_falls_back_to_sdpa_and_an_explicit_kernel_names_the_field(
    llama_pair, tokenizer, monkeypatch
):
    model, reference = llama_pair
    assert make_engine(model, tokenizer).config.attention_backend == "paged_kernel"
    gone = paged_kernel.KernelUnavailable("no working C compiler 'cc'")
    monkeypatch.setattr(native_build, "_library", lambda: gone)
    engine = make_engine(model, tokenizer)
    assert engine.config.attention_backend == "sdpa"
    params = SamplingParams(max_tokens=12, temperature=0, ignore_eos=True)
    prompt = tokenizer.encode("Blocks of the pool")
    GreedyChecker(reference).check(prompt, engine.generate([prompt], params)[0].token_ids, 12)
    with pytest.raises(FieldError, match="^attention_backend.*no working C compiler"):
        make_engine(model, tokenizer, attention_backend="paged_kernel")
    hf = make_engine(model, tokenizer, kv_backend="hf_cache")
    assert hf.config.attention_backend == "sdpa"
    assert EngineConfig(attention_backend="sdpa").attention_backend == "sdpa"
