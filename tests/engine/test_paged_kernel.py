"""The paged decode kernel: the same attention as SDPA over the gathered blocks, its build
cache, and the engine's choice of backend when it cannot be built."""

import pytest
import torch
import torch.nn.functional as F

from engine import EngineConfig, FieldError, SamplingParams
from engine.cpu import native_build, paged_kernel
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


# -- the prefill kernel
# (query heads, KV heads, head_dim, block size, chunks as (past keys, new tokens)): GQA groups
# of 1-4; head_dim on the unrolled paths (64, 128) and the generic one (16, 48); chunks of one
# token to several tiles of queries (48 rows), with and without a past, ending inside a block
# and on its edge; one chunk or many in one call
PREFILL_SHAPES = [
    (9, 3, 64, 16, [(0, 157)]),
    (9, 3, 64, 16, [(0, 30), (60, 100), (40, 1), (0, 16), (17, 47)]),
    (4, 4, 16, 4, [(0, 5), (3, 60)]),
    (8, 2, 128, 16, [(0, 70), (33, 20)]),
    (6, 1, 32, 1, [(5, 9), (0, 50)]),
    (12, 3, 48, 8, [(0, 33), (21, 64)]),
    (8, 2, 64, 32, [(31, 2), (0, 97)]),
]


def _prefill_case(shape, dtype, seed):
    """A pool, each chunk's sequence's blocks (shuffled), the step's packed q (rows of a wider
    qkv, as the runner's view) with two rows of decodes in front, and the kernel's tables."""
    num_heads, num_kv_heads, head_dim, block_size, spans = shape
    gen = torch.Generator().manual_seed(seed)
    lens = [past + new for past, new in spans]
    max_blocks = max(-(-n // block_size) for n in lens)
    num_blocks = len(spans) * max_blocks + 3
    pool = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = torch.randn(pool, generator=gen).to(dtype)
    v_cache = torch.randn(pool, generator=gen).to(dtype)
    order = torch.randperm(num_blocks, generator=gen)
    tables = order[: len(spans) * max_blocks].view(len(spans), max_blocks).contiguous()
    num_tokens = 2 + sum(new for _, new in spans)
    qkv = torch.randn(num_tokens, num_heads + 2 * num_kv_heads, head_dim, generator=gen)
    q = qkv.to(dtype)[:, :num_heads]  # rows (H + 2 Hkv) * D apart
    chunks, start = [], 2
    for (_, new), n in zip(spans, lens, strict=True):
        chunks.append((start, new, n))
        start += new
    return q, k_cache, v_cache, tables, torch.tensor(chunks)


def _prefill_reference(q, k_cache, v_cache, tables, chunks, scale):
    """Each chunk alone: its blocks in order, cut to its length, causal SDPA with repeated KV."""
    want = {}
    group = q.shape[1] // k_cache.shape[2]
    for c, (start, new, n) in enumerate(chunks.tolist()):
        k = k_cache[tables[c]].flatten(0, 1)[:n].transpose(0, 1).float()  # (Hkv, n, D)
        v = v_cache[tables[c]].flatten(0, 1)[:n].transpose(0, 1).float()
        k, v = k.repeat_interleave(group, 0), v.repeat_interleave(group, 0)
        queries = q[start : start + new].transpose(0, 1).float()  # (H, new, D)
        allowed = torch.arange(n)[None, :] <= torch.arange(n - new, n)[:, None]
        o = F.scaled_dot_product_attention(queries, k, v, attn_mask=allowed, scale=scale)
        want[start] = o.transpose(0, 1)  # (new, H, D)
    return want


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", PREFILL_SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_prefill_kernel_equals_causal_sdpa_over_each_chunks_blocks(
    shape, dtype, threads, monkeypatch
):
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
    q, k_cache, v_cache, tables, chunks = _prefill_case(shape, dtype, seed=shape[2] + len(shape[4]))
    scale = 0.7 * shape[2] ** -0.5
    out = torch.full((q.shape[0], *q.shape[1:]), 7.0, dtype=dtype)
    paged_kernel.load_prefill()(q, k_cache, v_cache, tables, chunks, scale, out)
    assert (out[:2] == 7.0).all()  # the decodes' rows are not the kernel's
    for start, want in _prefill_reference(q, k_cache, v_cache, tables, chunks, scale).items():
        got = out[start : start + want.shape[0]]
        if dtype == torch.float32:
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        else:  # bfloat16 weights (as SDPA's bfloat16 kernels), one rounding at the end
            torch.testing.assert_close(got.float(), want.to(dtype).float(), rtol=2e-2, atol=2e-2)


def test_the_prefill_kernel_reads_only_keys_up_to_each_query():
    """Keys after a chunk's last, the rest of its last block and padding entries of its table
    are never read, and no query sees a later key: poisoning them with NaN changes nothing."""
    shape = (4, 2, 64, 4, [(3, 6), (0, 5)])
    q, k_cache, v_cache, tables, chunks = _prefill_case(shape, torch.float32, seed=3)
    kernel, scale = paged_kernel.load_prefill(), 0.125
    want = torch.zeros(q.shape)
    kernel(q, k_cache, v_cache, tables, chunks, scale, want)
    used = set()
    for c, (_, _, n) in enumerate(chunks.tolist()):
        used |= {(int(tables[c, p // 4]), p % 4) for p in range(n)}
    for block in range(k_cache.shape[0]):
        for offset in range(4):
            if (block, offset) not in used:
                k_cache[block, offset] = v_cache[block, offset] = float("nan")
    tables[1, 2:] = 10**9  # the second chunk's 5 keys fill 2 blocks: the rest is padding
    got = torch.zeros(q.shape)
    kernel(q, k_cache, v_cache, tables, chunks, scale, got)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    # a later key of the same chunk changes no earlier query's output
    start, new, n = chunks[0].tolist()
    last = n - 1
    k_cache[tables[0, last // 4], last % 4] += 5.0
    again = torch.zeros(q.shape)
    kernel(q, k_cache, v_cache, tables, chunks, scale, again)
    torch.testing.assert_close(again[start : start + new - 1], want[start : start + new - 1])
    assert not torch.equal(again[start + new - 1], want[start + new - 1])
