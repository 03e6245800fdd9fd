"""ModelRunner: packs one step's scheduled tokens and runs ONE forward over the paged KV pool.

Two runners share one interface, `execute(scheduled, blocks_to_copy) -> (logits, sampled)`:
`ModelRunner` (kv_backend="paged") and `HFCacheRunner` (kv_backend="hf_cache", in
hf_cache_runner.py), the simple per-sequence baseline kept for comparison. The paged runner's
forward is the engine's own `NativeDecoder` (model_impl="native": fused, pre-packed
projections) or the model's transformers modules (model_impl="transformers"), which is what
torch_compile compiles: one graph, compiled when the runner is made (a minute or two on a
small CPU; later runners on the same model reuse it).
"""

import os

import torch
import torch.fx.experimental._config as fx_config

from engine.attention import (
    AttentionContext,
    DecodeGroup,
    PrefillChunk,
    PrefillTables,
    attention_context,
)
from engine.cpu import paged_kernel
from engine.cpu.kv_pool import ResidentBlocks, zeroed
from engine.cpu.native_model import NativeDecoder
from engine.scheduler import ScheduledSequence
from engine.sequence import Sequence

CPU_KV_CAP_BYTES = 2 * 2**30  # never take more than this for the pool on a CPU
KV_MEMORY_FRACTION = 0.3  # of the free memory, when num_kv_blocks is None
# What one more decode group costs (an SDPA call and two gathers per layer), in gathered blocks
DECODE_GROUP_COST = 16


def split_by_length(num_blocks: list[int], group_cost: int = DECODE_GROUP_COST) -> list[int]:
    """Split decodes, sorted by context length (in blocks, non-increasing), into groups that
    each pad to their first member; returns each group's end index. Minimises the blocks
    gathered plus `group_cost` per group, exactly (dynamic programming over the points where
    the length changes)."""
    n = len(num_blocks)
    cuts = [i for i in range(n) if i == 0 or num_blocks[i] != num_blocks[i - 1]]
    best = {n: (0, n)}  # start -> (cost of everything from start, end of its group)
    for i in reversed(range(len(cuts))):
        start = cuts[i]
        best[start] = min(
            (group_cost + (end - start) * num_blocks[start] + best[end][0], end)
            for end in [*cuts[i + 1 :], n]
        )
    ends, start = [], 0
    while start < n:
        start = best[start][1]
        ends.append(start)
    return ends


def kv_geometry(model_config) -> tuple[int, int, int]:
    """(num_layers, num_kv_heads, head_dim) of a decoder config."""
    c = model_config.get_text_config()
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    num_kv_heads = getattr(c, "num_key_value_heads", None) or c.num_attention_heads
    return c.num_hidden_layers, num_kv_heads, head_dim


def auto_num_kv_blocks(model, block_size: int) -> int:
    """Size the pool from free memory (capped on CPU); at least enough for a few requests."""
    num_layers, num_kv_heads, head_dim = kv_geometry(model.config)
    param = next(model.parameters())
    bytes_per_block = 2 * num_layers * block_size * num_kv_heads * head_dim * param.element_size()
    if param.device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(param.device)
        budget = free * 0.5
    else:
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        budget = min(available * KV_MEMORY_FRACTION, CPU_KV_CAP_BYTES)
    return max(16, int(budget // bytes_per_block))


def _compiled(model):
    """`model` through torch.compile, as one graph for every step's shape: dynamic sizes, and
    no graph of its own for a size of 1 (a batch-1 decode, a single sampled token); each graph
    costs a minute or more of compiling on a small CPU. The step's layout never enters the
    graph (the attention is an opaque op that reads it), and `model` itself stays eager."""
    compiled = torch.compile(model, dynamic=True, fullgraph=True)  # no silent eager parts

    def forward(**kwargs):
        with fx_config.patch(backed_size_oblivious=True, use_duck_shape=False):
            return compiled(**kwargs)

    return forward


def transformers_forward(model):
    """The model's own modules, called as NativeDecoder is: (input_ids (T,), positions (T,),
    logits_to_keep (S,)) -> logits (S, vocab)."""

    def forward(input_ids, positions, logits_to_keep):
        out = model(
            input_ids=input_ids.unsqueeze(0),  # (1, T)
            position_ids=positions.unsqueeze(0),
            use_cache=False,
            logits_to_keep=logits_to_keep,
        )
        return out.logits[0]

    return forward


class ModelRunner:
    def __init__(
        self,
        model,
        block_size: int,
        num_blocks: int,
        torch_compile: bool = False,
        model_impl: str = "transformers",
        attention_backend: str = "sdpa",
    ):
        self.model = model
        self.block_size = block_size
        self.num_blocks = num_blocks
        param = next(model.parameters())
        self.device, self.dtype = param.device, param.dtype
        num_layers, num_kv_heads, head_dim = kv_geometry(model.config)
        # vLLM's layout: a block is one contiguous row, gathered with one memcpy
        shape = (num_blocks, block_size, num_kv_heads, head_dim)
        try:
            self.kv_caches = [
                (zeroed(shape, self.dtype, self.device), zeroed(shape, self.dtype, self.device))
                for _ in range(num_layers)
            ]
        except (RuntimeError, MemoryError, OSError) as exc:  # torch's OOM is a RuntimeError
            size = 2 * num_layers * torch.Size(shape).numel() * param.element_size() / 2**30
            raise ValueError(
                f"num_kv_blocks={num_blocks} needs {size:.1f} GiB of KV cache on "
                f"{self.device}, which could not be allocated ({type(exc).__name__}); use fewer "
                f"blocks, or None to size the pool from free memory"
            ) from exc
        # pages mapped in bulk ahead of use, not faulted in one by one in the steps
        self._resident = ResidentBlocks([t for kv in self.kv_caches for t in kv])
        self._row_size = block_size * num_kv_heads * head_dim
        # "paged_kernel": every decode in one call, every prefill chunk in another, both
        # reading the blocks in place
        self._decode_kernel = self._prefill_kernel = None
        if attention_backend == "paged_kernel":
            self._decode_kernel = paged_kernel.load()
            self._prefill_kernel = paged_kernel.load_prefill()
        self._gather_buffers = self._new_gather_buffers(0)
        # (input_ids (T,), positions (T,), logits_to_keep (S,)) -> logits (S, vocab)
        if model_impl == "native":
            self.forward = NativeDecoder(model)
        else:
            self.forward = transformers_forward(_compiled(model) if torch_compile else model)
        if torch_compile:
            self._warm_up()

    def free(self, seq: Sequence) -> None:
        pass  # the block manager owns the pool's bookkeeping

    def fork(self, parent: Sequence, child: Sequence) -> None:
        pass

    @torch.inference_mode()
    def execute(
        self, scheduled: list[ScheduledSequence], blocks_to_copy: list[tuple[int, int]]
    ) -> tuple[torch.Tensor, list[ScheduledSequence]]:
        """One forward for every scheduled token. Returns the logits (num_sampled, vocab) of
        the sequences whose last token was computed, in the order of `sampled`."""
        self._copy_blocks(blocks_to_copy)
        decodes = sorted((s for s in scheduled if s.is_decode), key=lambda s: -s.seq.num_tokens)
        prefills = [s for s in scheduled if not s.is_decode]
        packed = decodes + prefills
        bs = self.block_size
        input_ids, positions, slots, keep = [], [], [], []
        for s in packed:
            seq, start = s.seq, s.seq.num_computed_tokens
            end = start + s.num_new_tokens
            tokens = [seq.last_token_id] if s.is_decode else seq.all_token_ids[start:end]
            input_ids += tokens
            positions += range(start, end)
            table = seq.block_table
            slots += [table[p // bs] * bs + p % bs for p in range(start, end)]
            if s.samples:
                keep.append(len(input_ids) - 1)
        if slots and not self._resident.complete:  # once all is mapped, nothing to look at
            self._resident.cover(max(slots) // bs + 1)
        decode_groups = self._decode_groups(decodes)
        prefill_chunks, offset = [], len(decodes)
        for s in prefills:
            prefill_chunks.append(self._prefill_chunk(s, offset))
            offset += s.num_new_tokens
        ctx = AttentionContext(
            kv_caches=self.kv_caches,
            slot_mapping=self._tensor(slots),
            decodes=decode_groups,
            prefills=prefill_chunks,
            gather_buffers=self._reserve(decode_groups, prefill_chunks),
            decode_kernel=self._decode_kernel,
            prefill_kernel=self._prefill_kernel,
            prefill_tables=self._prefill_tables(prefills, prefill_chunks),
        )
        logits = self._forward(ctx, input_ids, positions, keep)
        return logits, [s for s in packed if s.samples]

    def _forward(self, ctx: AttentionContext, input_ids, positions, keep) -> torch.Tensor:
        """The model over one packed step; the logits (len(keep), vocab) of tokens `keep`."""
        with attention_context(ctx):
            return self.forward(
                self._tensor(input_ids), self._tensor(positions), self._tensor(keep)
            )

    @torch.inference_mode()
    def _warm_up(self) -> None:
        """Compile now, with a 2-token prompt in block 0 (free: nothing is cached yet), so the
        first real step is not the one that waits for the compiler."""
        ctx = AttentionContext(
            kv_caches=self.kv_caches,
            slot_mapping=self._tensor([0, 1]),
            decodes=[],
            prefills=[PrefillChunk(0, 2, None, 2, None)],
            gather_buffers=self._gather_buffers,
            decode_kernel=self._decode_kernel,
            prefill_kernel=self._prefill_kernel,
            prefill_tables=PrefillTables(self._tensor([[0]]), self._tensor([[0, 2, 2]])),
        )
        try:
            self._forward(ctx, [0, 0], [0, 1], [1])
        except Exception as exc:
            name = type(self.model).__name__
            raise RuntimeError(f"torch_compile=True: {name} could not be compiled: {exc}") from exc

    def _decode_groups(self, decodes: list[ScheduledSequence]) -> list[DecodeGroup]:
        """Decodes (longest context first) in groups of similar length, see split_by_length;
        one group and no mask for the kernel, which reads each context to its own length."""
        bs = self.block_size
        lens = [s.seq.num_tokens for s in decodes]  # context includes this step's token
        num_blocks = [-(-n // bs) for n in lens]
        if self._decode_kernel is None:
            ends = split_by_length(num_blocks)
        else:
            ends = [len(decodes)] if decodes else []
        groups, start = [], 0
        for end in ends:
            nb = num_blocks[start]
            tables = self._padded([s.seq.block_table[:nb] for s in decodes[start:end]])
            group_lens = self._tensor(lens[start:end])
            mask = None
            if self._decode_kernel is None:
                allowed = torch.arange(nb * bs, device=self.device) < group_lens.unsqueeze(1)
                mask = self._additive(allowed)[:, None, None, :]  # (B, 1, 1, nb * bs)
            groups.append(DecodeGroup(start, end, tables, group_lens, mask))
            start = end
        return groups

    def _prefill_chunk(self, s: ScheduledSequence, start: int) -> PrefillChunk:
        end = start + s.num_new_tokens
        past = s.seq.num_computed_tokens
        total = past + s.num_new_tokens
        if past == 0 or self._prefill_kernel is not None:  # the kernel reads the past in place
            return PrefillChunk(start, end, None, total, None)
        blocks = self._tensor(s.seq.block_table[: -(-total // self.block_size)])
        q_pos = torch.arange(past, total, device=self.device).unsqueeze(1)
        mask = torch.arange(total, device=self.device).unsqueeze(0) <= q_pos  # (t, L)
        return PrefillChunk(start, end, blocks, total, self._additive(mask))

    def _prefill_tables(self, prefills: list[ScheduledSequence], chunks: list[PrefillChunk]):
        """The prefill kernel's tables of the step's chunks, or None."""
        if self._prefill_kernel is None or not prefills:
            return None
        bs, pairs = self.block_size, zip(prefills, chunks, strict=True)
        tables = [s.seq.block_table[: -(-c.context_len // bs)] for s, c in pairs]
        rows = [(c.start, c.end - c.start, c.context_len) for c in chunks]
        return PrefillTables(self._padded(tables), self._tensor(rows))

    def _padded(self, tables: list[list[int]]) -> torch.Tensor:
        """Block tables as one (len(tables), longest) tensor, 0-padded (padding is never read)."""
        nb = max(map(len, tables))
        return self._tensor([t + [0] * (nb - len(t)) for t in tables])

    def _additive(self, allowed: torch.Tensor) -> torch.Tensor:
        """A bool mask as SDPA's additive float mask (0 or -inf), made once per step: given a
        bool mask, SDPA would convert it again in every layer."""
        mask = torch.zeros(allowed.shape, dtype=self.dtype, device=self.device)
        return mask.masked_fill_(~allowed, float("-inf"))

    def _reserve(self, decodes: list[DecodeGroup], prefills: list[PrefillChunk]):
        """Gather buffers with rows for the step's largest gather; they only ever grow."""
        rows = [p.context_blocks.numel() for p in prefills if p.context_blocks is not None]
        if self._decode_kernel is None:  # the kernel reads decodes' blocks in place
            rows += [d.blocks.numel() for d in decodes]
        if max(rows, default=0) > self._gather_buffers[0].shape[0]:
            self._gather_buffers = self._new_gather_buffers(max(rows))
        return self._gather_buffers

    def _new_gather_buffers(self, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
        shape = (rows, self._row_size)
        return (torch.empty(shape, dtype=self.dtype, device=self.device),
                torch.empty(shape, dtype=self.dtype, device=self.device))  # fmt: skip

    def _copy_blocks(self, blocks_to_copy: list[tuple[int, int]]) -> None:
        if not blocks_to_copy:
            return
        src = self._tensor([b for b, _ in blocks_to_copy])
        dst = self._tensor([b for _, b in blocks_to_copy])
        for k_cache, v_cache in self.kv_caches:
            k_cache[dst] = k_cache[src]
            v_cache[dst] = v_cache[src]

    def _tensor(self, values) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.long, device=self.device)
