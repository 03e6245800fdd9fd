"""ModelRunner: decode grouping by context length, a pool made without touching its memory,
and a pool that does not fit."""

import errno
import itertools
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.kv_pool import fault_in, zeroed
from engine.model_runner import split_by_length


def _cost(num_blocks: list[int], ends: list[int], group_cost: int) -> int:
    cost, start = 0, 0
    for end in ends:
        cost += group_cost + (end - start) * num_blocks[start]
        start = end
    return cost


def _brute_force(num_blocks: list[int], group_cost: int) -> int:
    n = len(num_blocks)
    return min(
        _cost(num_blocks, [*cut, n], group_cost)
        for k in range(n)
        for cut in itertools.combinations(range(1, n), k)
    )


@given(
    st.lists(st.integers(1, 40), min_size=1, max_size=9).map(lambda xs: sorted(xs, reverse=True)),
    st.integers(0, 50),
)
def test_split_by_length_is_optimal_and_covers_every_decode(num_blocks, group_cost):
    ends = split_by_length(num_blocks, group_cost)
    assert ends[-1] == len(num_blocks) and ends == sorted(set(ends))
    assert _cost(num_blocks, ends, group_cost) == _brute_force(num_blocks, group_cost)


def test_split_by_length_cases():
    assert split_by_length([]) == []
    assert split_by_length([7] * 32) == [32]  # equal lengths: one group, no padding
    assert split_by_length([35] + [3] * 31, group_cost=16) == [1, 32]  # one long outlier
    assert split_by_length([35, 34, 33], group_cost=16) == [3]  # a split would not pay


def _resident_bytes() -> int:
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_cpu_pool_is_zeros_that_take_memory_only_where_written(dtype):
    import torch

    dtype = getattr(torch, dtype)
    shape = (8192, 16, 4, 64)  # 256 MiB in float32, 128 MiB in bfloat16
    before = _resident_bytes()
    pool = zeroed(shape, dtype, torch.device("cpu"))
    assert pool.shape == shape and pool.dtype == dtype and pool.is_contiguous()
    assert not pool.any()  # reading untouched pages maps the kernel's zero page, no memory
    assert _resident_bytes() - before < 16 * 2**20  # torch.zeros: the whole pool
    pool[3] = 1.5
    assert _resident_bytes() - before < 16 * 2**20  # one block written: a few pages more
    assert pool[3].eq(1.5).all() and not pool[4].any() and not pool[2].any()


def test_fault_in_maps_the_whole_pool_and_keeps_what_was_written():
    """The background fault-in (MADV_POPULATE_WRITE) makes every page resident and changes
    no byte: blocks written before it stay as they were, the rest stay zeros."""
    import torch

    shape = (8192, 16, 4, 64)  # 64 MiB in bfloat16
    pools = [zeroed(shape, torch.bfloat16, torch.device("cpu")) for _ in range(2)]
    pools[0][7] = 2.5
    pools[1][8191] = -1.0
    before = _resident_bytes()
    assert fault_in(pools), "this Linux has MADV_POPULATE_WRITE (5.14+)"
    assert _resident_bytes() - before > 2 * 60 * 2**20  # both pools, less the written pages
    assert pools[0][7].eq(2.5).all() and pools[1][8191].eq(-1.0).all()
    pools[0][7] = pools[1][8191] = 0
    assert not pools[0].any() and not pools[1].any()


def test_the_runner_faults_its_pool_in_on_a_thread(tiny_model):
    from engine.model_runner import ModelRunner

    runner = ModelRunner(tiny_model[0], block_size=16, num_blocks=64)
    assert runner._fault_in is not None and runner._fault_in.name == "kv-fault-in"
    runner._fault_in.join(timeout=60)
    assert not runner._fault_in.is_alive()


def test_a_pool_that_cannot_be_allocated_is_a_clear_error(tiny_model, monkeypatch):
    from engine import EngineConfig, LLMEngine, kv_pool

    def no_memory(*args, **kwargs):
        raise OSError(errno.ENOMEM, "simulated: no memory for the pool")

    monkeypatch.setattr(kv_pool.mmap, "mmap", no_memory)
    with pytest.raises(ValueError, match=r"num_kv_blocks=4096 needs .* GiB .*OSError"):
        LLMEngine(*tiny_model, EngineConfig(num_kv_blocks=4096))
