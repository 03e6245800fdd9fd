"""How one step's attention reads the paged pool: the tables a forward needs, per backend.

`ModelRunner` picks one layout when it is made and never asks again:

- `GatherLayout` ("sdpa"): decodes in a few groups of similar context length, each with an
  additive mask over its padded blocks (gathered, then one SDPA call per group), and each
  prefill chunk with its past blocks and a causal mask (gathered, then one SDPA call).
- `InPlaceLayout` ("paged_kernel"): kernels that read each sequence's blocks where they lie,
  each to its own length: one decode group and no masks, and one table of every prefill chunk.
"""

import torch

from engine.attention import DecodeGroup, PrefillChunk, PrefillTables
from engine.scheduler import ScheduledSequence

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


class GatherLayout:
    """Tables for attention that gathers blocks into contiguous buffers, then runs SDPA."""

    def __init__(self, block_size: int, device: torch.device, dtype: torch.dtype):
        self.block_size, self.device, self.dtype = block_size, device, dtype

    def decode_groups(self, decodes: list[ScheduledSequence]) -> list[DecodeGroup]:
        """Decodes (longest context first) in groups of similar length (split_by_length)."""
        bs = self.block_size
        lens = [s.seq.num_tokens for s in decodes]  # context includes this step's token
        num_blocks = [-(-n // bs) for n in lens]
        groups, start = [], 0
        for end in self._group_ends(num_blocks):
            nb = num_blocks[start]
            tables = self.padded([s.seq.block_table[:nb] for s in decodes[start:end]])
            group_lens = self.tensor(lens[start:end])
            groups.append(
                DecodeGroup(start, end, tables, group_lens, self._decode_mask(nb, group_lens))
            )
            start = end
        return groups

    def _group_ends(self, num_blocks: list[int]) -> list[int]:
        return split_by_length(num_blocks)

    def _decode_mask(self, nb: int, group_lens: torch.Tensor) -> torch.Tensor | None:
        allowed = torch.arange(nb * self.block_size, device=self.device) < group_lens.unsqueeze(1)
        return self.additive(allowed)[:, None, None, :]  # (B, 1, 1, nb * bs)

    def prefill_chunk(self, s: ScheduledSequence, start: int) -> PrefillChunk:
        end = start + s.num_new_tokens
        past = s.seq.num_computed_tokens
        total = past + s.num_new_tokens
        if past == 0:
            return PrefillChunk(start, end, None, total, None)
        blocks = self.tensor(s.seq.block_table[: -(-total // self.block_size)])
        q_pos = torch.arange(past, total, device=self.device).unsqueeze(1)
        mask = torch.arange(total, device=self.device).unsqueeze(0) <= q_pos  # (t, L)
        return PrefillChunk(start, end, blocks, total, self.additive(mask))

    def prefill_tables(self, prefills, chunks) -> PrefillTables | None:
        return None  # SDPA runs each chunk on its own

    def gather_rows(self, decodes: list[DecodeGroup], prefills: list[PrefillChunk]) -> int:
        """Rows of the step's largest gather."""
        rows = [p.context_blocks.numel() for p in prefills if p.context_blocks is not None]
        rows += [d.blocks.numel() for d in decodes]
        return max(rows, default=0)

    def padded(self, tables: list[list[int]]) -> torch.Tensor:
        """Block tables as one (len(tables), longest) tensor, 0-padded (padding is never read)."""
        nb = max(map(len, tables))
        return self.tensor([t + [0] * (nb - len(t)) for t in tables])

    def additive(self, allowed: torch.Tensor) -> torch.Tensor:
        """A bool mask as SDPA's additive float mask (0 or -inf), made once per step: given a
        bool mask, SDPA would convert it again in every layer."""
        mask = torch.zeros(allowed.shape, dtype=self.dtype, device=self.device)
        return mask.masked_fill_(~allowed, float("-inf"))

    def tensor(self, values) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.long, device=self.device)


class InPlaceLayout(GatherLayout):
    """Tables for kernels that read every sequence's blocks in place, each to its length."""

    def _group_ends(self, num_blocks: list[int]) -> list[int]:
        return [len(num_blocks)] if num_blocks else []

    def _decode_mask(self, nb: int, group_lens: torch.Tensor) -> None:
        return None

    def prefill_chunk(self, s: ScheduledSequence, start: int) -> PrefillChunk:
        total = s.seq.num_computed_tokens + s.num_new_tokens
        return PrefillChunk(start, start + s.num_new_tokens, None, total, None)

    def prefill_tables(self, prefills, chunks) -> PrefillTables | None:
        """The prefill kernel's tables of the step's chunks, or None without prefills."""
        if not prefills:
            return None
        bs, pairs = self.block_size, zip(prefills, chunks, strict=True)
        tables = [s.seq.block_table[: -(-c.context_len // bs)] for s, c in pairs]
        rows = [(c.start, c.end - c.start, c.context_len) for c in chunks]
        return PrefillTables(self.padded(tables), self.tensor(rows))

    def gather_rows(self, decodes: list[DecodeGroup], prefills: list[PrefillChunk]) -> int:
        return 0  # nothing is gathered
