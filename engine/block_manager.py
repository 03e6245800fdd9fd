"""BlockManager: the paged KV cache's bookkeeping (block tables, ref counts, prefix cache).

The pool holds `num_blocks` blocks of `block_size` token slots; slot s of block b is row
`b * block_size + s` of every layer's K/V tensors. Each block is in exactly one state:
  free     ref_count == 0, no hash            (in `free_block_ids`)
  used     ref_count > 0                      (in some sequences' block tables)
  cached   ref_count == 0, hash of its tokens (in `evictable`, LRU first; revived on a hit)
A full block gets the hash of its tokens chained with its predecessor's, so a hash names a
whole prefix; a partial block is never shared through the cache.
"""

from collections import OrderedDict, deque
from dataclasses import dataclass

from engine.sequence import Sequence


@dataclass(slots=True)
class Block:
    block_id: int
    ref_count: int = 0
    hash: int | None = None
    token_ids: tuple[int, ...] = ()  # of a hashed block: checked on a hit, against collisions
    # a copy-on-write copy, while it is held: (the block it was copied from, the step then)
    copy_of: tuple[int, int] | None = None


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True):
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free_block_ids: deque[int] = deque(range(num_blocks))
        self.evictable: OrderedDict[int, None] = OrderedDict()  # cached blocks, LRU first
        self.hash_to_block: dict[int, int] = {}
        self.num_prefix_queries = 0  # full prompt blocks looked up
        self.num_prefix_hits = 0

    # -- counts -----------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        """Blocks that can be handed out: truly free plus evictable cached ones."""
        return len(self.free_block_ids) + len(self.evictable)

    @property
    def num_cached_blocks(self) -> int:
        return len(self.evictable)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self.num_free_blocks

    def num_blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    # -- prefix cache ----------------------------------------------------------------------
    def get_computed_blocks(self, seq: Sequence) -> list[int]:
        """Cached blocks holding a prefix of the sequence's tokens (not mutated here).

        At least the last token is left to compute, so the step has logits to sample from.
        """
        if not self.enable_prefix_caching or seq.block_table:
            return []
        token_ids = seq.all_token_ids
        num_full = (len(token_ids) - 1) // self.block_size
        computed, h = [], None
        for i in range(num_full):
            chunk = tuple(token_ids[i * self.block_size : (i + 1) * self.block_size])
            h = hash((h, chunk))
            block_id = self.hash_to_block.get(h)
            if block_id is None or self.blocks[block_id].token_ids != chunk:
                break
            computed.append(block_id)
        return computed

    def cache_full_blocks(self, seq: Sequence) -> None:
        """Give a hash to every block of the sequence that is now full and computed."""
        if not self.enable_prefix_caching:
            return
        num_full = min(seq.num_computed_tokens // self.block_size, len(seq.block_table))
        token_ids, h = None, None
        for i in range(num_full):
            block = self.blocks[seq.block_table[i]]
            if block.hash is not None:
                h = block.hash
                continue
            if token_ids is None:
                token_ids = seq.all_token_ids
            chunk = tuple(token_ids[i * self.block_size : (i + 1) * self.block_size])
            h = hash((h, chunk))
            if h in self.hash_to_block:  # same prefix computed twice in one step: keep one
                continue
            block.hash, block.token_ids = h, chunk
            self.hash_to_block[h] = block.block_id

    # -- allocation ------------------------------------------------------------------------
    def can_allocate(self, seq: Sequence, num_new_tokens: int, computed_blocks=()) -> bool:
        return self.num_blocks_needed(seq, num_new_tokens, computed_blocks) <= self.num_free_blocks

    def allocate(
        self, seq: Sequence, num_new_tokens: int, computed_blocks=()
    ) -> list[tuple[int, int]]:
        """Grow the block table so `num_new_tokens` more tokens have slots (mutates `seq`).

        `computed_blocks` (from get_computed_blocks, on a first admission) are shared first and
        advance `seq.num_computed_tokens`. A shared, partly filled last block is copied before
        it is written (copy-on-write, after a fork; the copy keeps `copy_of` while held).
        Returns the (src, dst) block copies the runner must do before the forward.
        """
        assert self.can_allocate(seq, num_new_tokens, computed_blocks)
        if self.enable_prefix_caching and not seq.block_table and seq.num_computed_tokens == 0:
            self.num_prefix_queries += (seq.num_tokens - 1) // self.block_size
            self.num_prefix_hits += len(computed_blocks)
        for block_id in computed_blocks:
            self._take(block_id)
            seq.block_table.append(block_id)
        if computed_blocks:
            seq.num_computed_tokens = seq.num_cached_tokens = len(computed_blocks) * self.block_size
        copies = []
        if seq.num_computed_tokens % self.block_size and seq.block_table:
            last = self.blocks[seq.block_table[-1]]
            if last.ref_count > 1:  # shared with a sibling: write into a private copy
                new_id = self._pop_free()
                self._take(new_id)
                self.blocks[new_id].copy_of = (last.block_id, seq.clock.step)
                last.ref_count -= 1
                seq.block_table[-1] = new_id
                copies.append((last.block_id, new_id))
        needed = self.num_blocks_for(seq.num_computed_tokens + num_new_tokens)
        while len(seq.block_table) < needed:
            block_id = self._pop_free()
            self._take(block_id)
            seq.block_table.append(block_id)
        return copies

    def fork(self, parent: Sequence, child: Sequence) -> None:
        child.block_table = list(parent.block_table)
        for block_id in child.block_table:
            self.blocks[block_id].ref_count += 1

    def free(self, seq: Sequence) -> None:
        """Drop the sequence's references; blocks nobody holds become free or cached."""
        for block_id in reversed(seq.block_table):  # tail first: evicted before the prefix
            block = self.blocks[block_id]
            assert block.ref_count > 0, f"block {block_id} freed twice"
            block.ref_count -= 1
            if block.ref_count == 0:
                block.copy_of = None
                if block.hash is not None:
                    self.evictable[block_id] = None
                else:
                    self.free_block_ids.append(block_id)
        seq.block_table = []

    def check_invariants(self, live_seqs) -> None:
        """Every block free, used or cached, and ref counts equal to the tables' references."""
        refs = [0] * self.num_blocks
        for seq in live_seqs:
            for block_id in seq.block_table:
                refs[block_id] += 1
        free, evictable = set(self.free_block_ids), set(self.evictable)
        assert len(free) == len(self.free_block_ids), "a block is free twice"
        assert not free & evictable, "a block is both free and cached"
        for block in self.blocks:
            assert block.ref_count == refs[block.block_id], f"block {block.block_id} ref count"
            in_pool = block.block_id in free or block.block_id in evictable
            assert in_pool == (block.ref_count == 0), f"block {block.block_id} lost"
            assert not (in_pool and block.copy_of), f"block {block.block_id}: a stale copy"
            if block.block_id in evictable:
                assert block.hash is not None and self.hash_to_block[block.hash] == block.block_id
        for h, block_id in self.hash_to_block.items():
            assert self.blocks[block_id].hash == h

    # -- internals -------------------------------------------------------------------------
    def num_blocks_needed(self, seq: Sequence, num_new_tokens: int, computed_blocks) -> int:
        num_computed = seq.num_computed_tokens
        revived = 0
        if computed_blocks:
            num_computed = len(computed_blocks) * self.block_size
            revived = sum(self.blocks[b].ref_count == 0 for b in computed_blocks)
        have = len(seq.block_table) + len(computed_blocks)
        need = self.num_blocks_for(num_computed + num_new_tokens) - have
        cow = 0
        if num_computed % self.block_size and seq.block_table and not computed_blocks:
            cow = int(self.blocks[seq.block_table[-1]].ref_count > 1)
        return max(need, 0) + revived + cow

    def _take(self, block_id: int) -> None:
        block = self.blocks[block_id]
        if block.ref_count == 0 and block_id in self.evictable:
            del self.evictable[block_id]  # a prefix-cache hit revives it
        block.ref_count += 1

    def _pop_free(self) -> int:
        if self.free_block_ids:
            return self.free_block_ids.popleft()
        block_id, _ = self.evictable.popitem(last=False)  # evict the least recently used
        block = self.blocks[block_id]
        del self.hash_to_block[block.hash]
        block.hash, block.token_ids = None, ()
        return block_id
