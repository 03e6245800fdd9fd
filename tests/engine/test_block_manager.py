"""BlockManager: allocation, ref counts, copy-on-write, prefix cache, LRU eviction, no leaks."""

import pytest

from engine.block_manager import BlockManager
from engine.detokenizer import IncrementalDetokenizer
from engine.sampling_params import SamplingParams
from engine.sequence import Sequence


def make_seq(token_ids, seq_id=0):
    detok = IncrementalDetokenizer(None, [], False)
    return Sequence(seq_id, 0, list(token_ids), SamplingParams(), detok, frozenset(), 1024)


def admit(bm, seq, num_new=None):
    """What the scheduler does on a first admission: prefix lookup, then allocate."""
    computed = bm.get_computed_blocks(seq)
    if num_new is None:
        num_new = seq.num_tokens - len(computed) * bm.block_size
    copies = bm.allocate(seq, num_new, computed)
    seq.num_computed_tokens += num_new  # the forward ran
    bm.cache_full_blocks(seq)
    return copies


def test_allocate_covers_tokens_and_free_returns_everything():
    bm = BlockManager(num_blocks=8, block_size=4)
    seq = make_seq(range(10))
    admit(bm, seq)
    assert len(seq.block_table) == 3
    assert bm.num_used_blocks == 3 and bm.num_free_blocks == 5
    bm.check_invariants([seq])
    bm.free(seq)
    assert bm.num_used_blocks == 0 and seq.block_table == []
    assert bm.num_cached_blocks == 2  # the two full blocks stay cached, the partial one is free
    bm.check_invariants([])


def test_can_allocate_refuses_beyond_the_pool():
    bm = BlockManager(num_blocks=2, block_size=4)
    seq = make_seq(range(9))
    assert not bm.can_allocate(seq, 9)
    assert bm.can_allocate(seq, 8)


def test_prefix_cache_hit_shares_blocks_and_leaves_last_token_to_compute():
    bm = BlockManager(num_blocks=16, block_size=4)
    a = make_seq(range(12), seq_id=0)
    admit(bm, a)
    b = make_seq(list(range(8)) + [99, 98], seq_id=1)
    computed = bm.get_computed_blocks(b)
    assert computed == a.block_table[:2]
    admit(bm, b)
    assert b.num_cached_tokens == 8
    assert bm.blocks[a.block_table[0]].ref_count == 2
    # A prompt entirely made of cached full blocks still computes its last block.
    c = make_seq(range(12), seq_id=2)
    assert len(bm.get_computed_blocks(c)) == 2
    assert bm.num_prefix_hits == 2 and bm.num_prefix_queries == 2 + 2
    bm.check_invariants([a, b])


def test_cached_blocks_are_revived_then_evicted_lru_only_when_needed():
    bm = BlockManager(num_blocks=4, block_size=2)
    a = make_seq([1, 2, 3, 4], seq_id=0)
    admit(bm, a)
    bm.free(a)
    assert bm.num_cached_blocks == 2 and bm.num_free_blocks == 4
    b = make_seq([1, 2, 3, 4, 5], seq_id=1)  # hits both cached blocks
    admit(bm, b)
    assert b.num_cached_tokens == 4 and bm.num_cached_blocks == 0
    bm.free(b)
    c = make_seq([7, 8, 9, 10, 11, 12, 13], seq_id=2)  # needs all 4 blocks: evicts the cache
    admit(bm, c)
    assert bm.num_cached_blocks == 0 and bm.hash_to_block.keys() == {
        bm.blocks[i].hash for i in c.block_table[:3]
    }
    bm.check_invariants([c])


def test_a_hash_collision_is_not_a_hit():
    bm = BlockManager(num_blocks=8, block_size=2)
    a = make_seq([1, 2, 3], seq_id=0)
    admit(bm, a)
    block = bm.blocks[a.block_table[0]]
    block.token_ids = (5, 6)  # pretend another prefix had the same hash
    assert bm.get_computed_blocks(make_seq([1, 2, 3], seq_id=1)) == []


def test_fork_shares_blocks_and_copy_on_write_splits_the_partial_one():
    bm = BlockManager(num_blocks=8, block_size=4)
    parent = make_seq(range(6), seq_id=0)
    admit(bm, parent)
    child = make_seq(range(6), seq_id=1)
    child.num_computed_tokens = parent.num_computed_tokens
    bm.fork(parent, child)
    assert child.block_table == parent.block_table
    assert bm.blocks[parent.block_table[1]].ref_count == 2
    parent.output_token_ids.append(50)  # both append a token into the shared partial block
    child.output_token_ids.append(60)
    copies = bm.allocate(parent, 1)
    assert copies == [(child.block_table[1], parent.block_table[1])]
    assert bm.allocate(child, 1) == []  # now it holds the original alone
    assert parent.block_table[0] == child.block_table[0]
    assert parent.block_table[1] != child.block_table[1]
    bm.check_invariants([parent, child])
    bm.free(parent)
    bm.free(child)
    assert bm.num_used_blocks == 0
    bm.check_invariants([])


def test_double_free_is_caught():
    bm = BlockManager(num_blocks=4, block_size=4)
    seq = make_seq(range(3))
    admit(bm, seq)
    table = list(seq.block_table)
    bm.free(seq)
    seq.block_table = table
    with pytest.raises(AssertionError, match="freed twice"):
        bm.free(seq)


def test_prefix_caching_off_never_hits():
    bm = BlockManager(num_blocks=8, block_size=2, enable_prefix_caching=False)
    a = make_seq([1, 2, 3, 4, 5])
    admit(bm, a)
    assert bm.get_computed_blocks(make_seq([1, 2, 3, 4, 5], seq_id=1)) == []
    bm.free(a)
    assert bm.num_cached_blocks == 0 and bm.num_free_blocks == 8
