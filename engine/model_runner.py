"""ModelRunner: packs one step's scheduled tokens and runs ONE forward over the paged KV pool.

Two runners share one interface, `execute(scheduled, blocks_to_copy) -> (logits, sampled)`:
`ModelRunner` (kv_backend="paged") and `HFCacheRunner` (kv_backend="hf_cache", in
hf_cache_runner.py), the simple per-sequence baseline kept for comparison. The paged runner's
forward is the engine's own `NativeDecoder` (model_impl="native": fused, pre-packed
projections) or the model's transformers modules (model_impl="transformers"), which is what
torch_compile compiles: one graph, compiled when the runner is made (a minute or two on a
small CPU; later runners on the same model reuse it).
"""

import dataclasses
import os
import warnings

import torch
import torch.fx.experimental._config as fx_config

from engine import cpu
from engine.attention import (
    ATTN_IMPLEMENTATION,
    AttentionContext,
    DecodeGroup,
    PrefillChunk,
    PrefillTables,
    attention_context,
    register,
    unsupported_reason,
)
from engine.config import EngineConfig
from engine.hf_cache_runner import HFCacheRunner
from engine.scheduler import ScheduledSequence
from engine.sequence import Sequence
from engine.step_layout import GatherLayout, InPlaceLayout

DEFAULT_MAX_MODEL_LEN = 2048  # when the model config names no context window
CPU_KV_CAP_BYTES = 2 * 2**30  # never take more than this for the pool on a CPU
KV_MEMORY_FRACTION = 0.3  # of the free memory, when num_kv_blocks is None


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
                (
                    cpu.zeroed(shape, self.dtype, self.device),
                    cpu.zeroed(shape, self.dtype, self.device),
                )
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
        self._resident = cpu.ResidentBlocks([t for kv in self.kv_caches for t in kv])
        self._row_size = block_size * num_kv_heads * head_dim
        # the one choice of backend: kernels that read the blocks in place, or gather + SDPA
        self._decode_kernel = self._prefill_kernel = None
        if attention_backend == "paged_kernel":
            self._decode_kernel, self._prefill_kernel = cpu.load_attention_kernels()
            self.layout = InPlaceLayout(block_size, self.device, self.dtype)
        else:
            self.layout = GatherLayout(block_size, self.device, self.dtype)
        self._gather_buffers = self._new_gather_buffers(0)
        # (input_ids (T,), positions (T,), logits_to_keep (S,)) -> logits (S, vocab)
        if model_impl == "native":
            self.forward = cpu.NativeDecoder(model)
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
        decode_groups = self.layout.decode_groups(decodes)
        prefill_chunks, offset = [], len(decodes)
        for s in prefills:
            prefill_chunks.append(self.layout.prefill_chunk(s, offset))
            offset += s.num_new_tokens
        ctx = AttentionContext(
            kv_caches=self.kv_caches,
            slot_mapping=self._tensor(slots),
            decodes=decode_groups,
            prefills=prefill_chunks,
            gather_buffers=self._reserve(decode_groups, prefill_chunks),
            decode_kernel=self._decode_kernel,
            prefill_kernel=self._prefill_kernel,
            prefill_tables=self.layout.prefill_tables(prefills, prefill_chunks),
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

    def _reserve(self, decodes: list[DecodeGroup], prefills: list[PrefillChunk]):
        """Gather buffers with rows for the step's largest gather; they only ever grow."""
        rows = self.layout.gather_rows(decodes, prefills)
        if rows > self._gather_buffers[0].shape[0]:
            self._gather_buffers = self._new_gather_buffers(rows)
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


def build_runner(model, config: EngineConfig) -> tuple["ModelRunner | HFCacheRunner", EngineConfig]:
    """The runner for `model` under `config`, and the config resolved to what really runs:
    the KV backend (hf_cache where paged attention cannot serve the model), the forward and
    attention backends, the pool's size and the context window it leaves."""
    text_config = model.config.get_text_config()
    model_len = getattr(text_config, "max_position_embeddings", None) or DEFAULT_MAX_MODEL_LEN
    max_model_len = min(config.max_model_len or model_len, model_len)
    backend = config.kv_backend
    if backend == "paged" and (reason := unsupported_reason(model.config)):
        warnings.warn(
            f"paged attention cannot serve this model ({reason}); using kv_backend='hf_cache'",
            stacklevel=3,
        )
        backend = "hf_cache"
    model_impl = cpu.resolve_model_impl(config.model_impl, backend, config.torch_compile, model)
    param, (_, _, head_dim) = next(model.parameters()), kv_geometry(model.config)
    attention_backend = cpu.resolve_attention_backend(
        config.attention_backend, backend, param, head_dim
    )
    if backend == "paged":
        register()
        model.set_attn_implementation(ATTN_IMPLEMENTATION)
        num_blocks = config.num_kv_blocks or auto_num_kv_blocks(model, config.block_size)
        runner = ModelRunner(
            model, config.block_size, num_blocks, config.torch_compile, model_impl,
            attention_backend,
        )  # fmt: skip
    else:  # the block manager only counts: each sequence's DynamicCache holds the K/V
        blocks_per_seq = -(-max_model_len // config.block_size)
        num_blocks = config.num_kv_blocks or config.max_num_seqs * blocks_per_seq
        runner = HFCacheRunner(model)
    resolved = dataclasses.replace(
        config,
        kv_backend=backend,
        num_kv_blocks=num_blocks,
        max_model_len=min(max_model_len, num_blocks * config.block_size),
        enable_prefix_caching=config.enable_prefix_caching and backend == "paged",
        torch_compile=config.torch_compile and backend == "paged",
        model_impl=model_impl,
        attention_backend=attention_backend,
    )
    return runner, resolved
