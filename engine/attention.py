"""Paged attention, plugged into unmodified transformers models.

`register()` adds the attention implementation "paged" to transformers' AttentionInterface
(and a mask function to AttentionMaskInterface). Inside an engine step the model runner sets
an AttentionContext; every attention layer then writes this step's K/V into the paged pool
through `slot_mapping` and attends each sequence over its own blocks. Outside a step (no
context) both functions defer to transformers' stock SDPA, so the same model object still
works with `generate` and with the per-sequence `hf_cache` runner.

Packed layout of one step: `[1, T]` tokens, the decodes first (one token each, longest
context first), then one chunk per prefilling sequence. Attention runs on one of two backends
(EngineConfig.attention_backend): "paged_kernel", one call of the engine's C decode kernel for
every decode and one of its prefill kernel for every prefill chunk (paged_kernel.py), which
read each sequence's blocks in place, each to its own length; or "sdpa": decodes in a few
groups of similar context length, each gathered into a contiguous buffer and attended with one
SDPA call, so short contexts are not padded to the longest one, and each prefill chunk with
an SDPA call of its own (its past gathered).

Under torch.compile (EngineConfig.torch_compile) the work is the custom op `paged_attention`,
which the compiler does not trace into: the step's layout changes every step, and one graph
serves them all.
"""

from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

ATTN_IMPLEMENTATION = "paged"


@dataclass(slots=True)
class PrefillChunk:
    start: int  # first packed token of the chunk
    end: int
    context_blocks: torch.Tensor | None  # (nb,) blocks of num_computed + chunk; None: no past
    context_len: int  # num_computed + chunk
    mask: torch.Tensor | None  # (chunk, context_len) additive (0 / -inf), causal with an offset


@dataclass(slots=True)
class DecodeGroup:
    start: int  # packed tokens start..end are decodes, one per sequence
    end: int
    blocks: torch.Tensor  # (B, nb) block table of each decode, 0-padded
    context_lens: torch.Tensor  # (B,) keys of each decode, this step's included
    mask: torch.Tensor | None  # (B, 1, 1, nb * bs) additive: 0 = attend, -inf = padding; None
    # with the decode kernel, which reads each context to its own length


@dataclass(slots=True)
class PrefillTables:
    """Every prefill chunk of the step, for the prefill kernel."""

    block_tables: torch.Tensor  # (C, nb) blocks of each chunk's sequence, 0-padded
    chunks: torch.Tensor  # (C, 3) first packed token, number of tokens, context length


@dataclass(slots=True)
class AttentionContext:
    kv_caches: list[tuple[torch.Tensor, torch.Tensor]]  # per layer: K, V (blocks, bs, Hkv, D)
    slot_mapping: torch.Tensor  # (T,) pool row (block * bs + offset) of each packed token
    decodes: list[DecodeGroup]
    prefills: list[PrefillChunk]
    # where gathered K and V blocks go, reused by every layer: (rows, block row) each, with
    # rows >= every gather of the step. CPU tensors are not cached by torch's allocator, and a
    # fresh multi-MB buffer per layer would cost page faults in every layer of every step.
    gather_buffers: tuple[torch.Tensor, torch.Tensor]
    # the paged decode kernel (paged_kernel.py), or None: gather the blocks, then SDPA
    decode_kernel: Callable | None = None
    # the paged prefill kernel and its tables (None without prefills), or None: SDPA per chunk
    prefill_kernel: Callable | None = None
    prefill_tables: PrefillTables | None = None


_context: AttentionContext | None = None


@contextmanager
def attention_context(ctx: AttentionContext):
    global _context
    _context = ctx
    try:
        yield ctx
    finally:
        _context = None


def paged_attention_forward(module, query, key, value, attention_mask, scaling=None, **kwargs):
    if torch.compiler.is_compiling():  # the engine's compiled forward: one opaque op per layer
        return paged_attention(query, key, value, module.layer_idx, scaling), None
    if _context is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, scaling=scaling, **kwargs
        )
    return _paged_attention(query, key, value, module.layer_idx, scaling), None


@torch.library.custom_op("cb_playground::paged_attention", mutates_args=())
def paged_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    layer_idx: int,
    scaling: float | None,
) -> torch.Tensor:
    """`_paged_attention` as an op torch.compile does not trace into: the step's layout (the
    AttentionContext) changes every step and stays out of the compiled graph. It writes the
    KV pool, which is no argument; nothing in the graph reads the pool."""
    if _context is None:
        raise RuntimeError("the compiled paged attention runs only inside an engine step")
    return _paged_attention(query, key, value, layer_idx, scaling)


@paged_attention.register_fake
def _(query, key, value, layer_idx, scaling):
    batch, num_heads, num_tokens, head_dim = query.shape
    return query.new_empty(batch, num_tokens, num_heads, head_dim)


def _paged_attention(query, key, value, layer_idx: int, scaling: float | None) -> torch.Tensor:
    """(1, H, T, D) queries of the packed step, as transformers' layers give them: (1, T, H, D)."""
    q = query[0].transpose(0, 1)  # (T, H, D)
    k = key[0].transpose(0, 1)  # (T, Hkv, D)
    v = value[0].transpose(0, 1)
    return packed_attention(q, k, v, layer_idx, scaling).unsqueeze(0)


def packed_attention(q, k, v, layer_idx: int, scaling: float | None) -> torch.Tensor:
    """One layer of the packed step: write this step's K/V into the pool, attend every
    sequence over its own blocks. q (T, H, D), k and v (T, Hkv, D) -> (T, H, D)."""
    write_kv(k, v, *step_kv(layer_idx))
    return attend(q, k, v, layer_idx, scaling)


def step_kv(layer_idx: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """This step's pool of one layer and where its tokens go: k_cache, v_cache, slot_mapping."""
    k_cache, v_cache = _context.kv_caches[layer_idx]
    return k_cache, v_cache, _context.slot_mapping


def write_kv(k, v, k_cache, v_cache, slots) -> None:
    """k and v (T, Hkv, D) into the pool rows `slots` (T,) of k_cache, v_cache."""
    num_kv_heads, head_dim = k.shape[1:]
    k_cache.view(-1, num_kv_heads, head_dim).index_copy_(0, slots, k.to(k_cache.dtype))
    v_cache.view(-1, num_kv_heads, head_dim).index_copy_(0, slots, v.to(v_cache.dtype))


def attend(q, k, v, layer_idx: int, scaling: float | None) -> torch.Tensor:
    """Every sequence of the step over its own blocks, this step's K/V already in the pool.
    q (T, H, D), k and v (T, Hkv, D) (a prefill without past reads them here) -> (T, H, D)."""
    ctx = _context
    k_cache, v_cache = ctx.kv_caches[layer_idx]
    assert q.shape[0] == ctx.slot_mapping.shape[0], (q.shape, ctx.slot_mapping.shape)
    num_tokens, num_heads, head_dim = q.shape
    num_kv_heads = k.shape[1]
    group = num_heads // num_kv_heads
    k_buf, v_buf = ctx.gather_buffers
    if len(ctx.decodes) == 1 and not ctx.prefills:  # all decodes in one SDPA: no output copy
        return _decode(q, k_cache, v_cache, ctx.decodes[0], k_buf, v_buf, group, scaling)
    out = q.new_empty(num_tokens, num_heads, head_dim)  # (T, H, D)
    for d in ctx.decodes:
        out[d.start : d.end] = _decode(q, k_cache, v_cache, d, k_buf, v_buf, group, scaling)
    if ctx.prefill_kernel is not None:  # every chunk in one call, its rows of out written
        if ctx.prefills:
            t = ctx.prefill_tables
            ctx.prefill_kernel(q, k_cache, v_cache, t.block_tables, t.chunks, scaling, out)
        return out
    for p in ctx.prefills:
        qp = q[p.start : p.end].transpose(0, 1).unsqueeze(0)  # (1, H, t, D)
        if p.context_blocks is None:  # no past: the chunk's own K/V
            kp = k[p.start : p.end].transpose(0, 1).unsqueeze(0)  # (1, Hkv, t, D)
            vp = v[p.start : p.end].transpose(0, 1).unsqueeze(0)
        else:
            blocks = p.context_blocks.unsqueeze(0)
            kp = _gather(k_cache, blocks, k_buf)[..., : p.context_len, :]  # (1, Hkv, L, D)
            vp = _gather(v_cache, blocks, v_buf)[..., : p.context_len, :]
        op = F.scaled_dot_product_attention(
            qp, kp, vp, attn_mask=p.mask, is_causal=p.mask is None, scale=scaling, enable_gqa=True
        )  # (1, H, t, D)
        out[p.start : p.end] = op[0].transpose(0, 1)
    return out


def _decode(q, k_cache, v_cache, d: DecodeGroup, k_buf, v_buf, group: int, scaling):
    """One decode group's attention: (B, H, D) for queries d.start..d.end."""
    if _context.decode_kernel is not None:
        return _context.decode_kernel(
            q[d.start : d.end], k_cache, v_cache, d.blocks, d.context_lens, scaling
        )
    b, num_heads, head_dim = d.end - d.start, q.shape[1], q.shape[2]
    # Query heads of one KV head stand in for the query length: one SDPA, no repeat_kv.
    qd = q[d.start : d.end].reshape(b, num_heads // group, group, head_dim)  # (B, Hkv, G, D)
    kd = _gather(k_cache, d.blocks, k_buf)  # (B, Hkv, S, D), strided: one copy
    vd = _gather(v_cache, d.blocks, v_buf)
    od = F.scaled_dot_product_attention(qd, kd, vd, attn_mask=d.mask, scale=scaling)
    return od.reshape(b, num_heads, head_dim)


def _gather(cache: torch.Tensor, blocks: torch.Tensor, buffer: torch.Tensor) -> torch.Tensor:
    """(B, nb) block tables -> (B, Hkv, nb * bs, D), in `buffer`. Whole blocks are contiguous
    rows of the pool, so this is one memcpy per block; heads stay innermost and SDPA reads
    them strided."""
    num_blocks, block_size, num_kv_heads, head_dim = cache.shape
    rows = buffer[: blocks.numel()]
    torch.index_select(cache.view(num_blocks, -1), 0, blocks.flatten(), out=rows)
    return rows.view(blocks.shape[0], -1, num_kv_heads, head_dim).transpose(1, 2)


def paged_mask(*args, **kwargs):
    """No mask inside a step (the context carries the layout); stock SDPA masks outside. Only
    the engine's step is ever compiled with this implementation."""
    if torch.compiler.is_compiling() or _context is not None:
        return None
    return sdpa_mask(*args, **kwargs)


def register() -> None:
    AttentionInterface.register(ATTN_IMPLEMENTATION, paged_attention_forward)
    AttentionMaskInterface.register(ATTN_IMPLEMENTATION, paged_mask)


def unsupported_reason(config) -> str | None:
    """Why the paged runner cannot serve this model exactly, or None if it can."""
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    if getattr(text_config, "sliding_window", None) and getattr(
        text_config, "use_sliding_window", True
    ):
        return "sliding-window attention"
    if "sliding_attention" in (getattr(text_config, "layer_types", None) or ()):
        return "sliding-window attention"
    if getattr(text_config, "attn_logit_softcapping", None):
        return "attention logit soft-capping"
    if getattr(text_config, "is_encoder_decoder", False):
        return "encoder-decoder"
    return None
