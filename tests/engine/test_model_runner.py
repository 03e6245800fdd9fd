"""ModelRunner: decode grouping by context length, a pool made without touching its memory,
and a pool that does not fit."""

import errno
import itertools
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.cpu.kv_pool import MIN_AHEAD_BLOCKS, ResidentBlocks, zeroed
from engine.step_layout import split_by_length


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


def test_resident_blocks_map_a_run_ahead_of_use_and_keep_what_was_written():
    """ResidentBlocks maps pages in bulk (MADV_POPULATE_WRITE), a run of blocks ahead of the
    highest one asked for, and changes no byte: blocks written before stay as they were, the
    rest stay zeros."""
    import torch

    shape = (8192, 16, 4, 64)  # 64 MiB in bfloat16, 8 KiB a block
    pools = [zeroed(shape, torch.bfloat16, torch.device("cpu")) for _ in range(2)]
    pools[0][7] = 2.5
    pools[1][8191] = -1.0
    resident = ResidentBlocks(pools)
    assert resident.count == 0
    before = _resident_bytes()
    resident.cover(100)
    assert resident.count == 100 + MIN_AHEAD_BLOCKS  # what the next steps will write, too
    resident.cover(50)  # already mapped: nothing to do
    assert resident.count == 100 + MIN_AHEAD_BLOCKS
    assert _resident_bytes() - before > 2 * 100 * 8 * 2**10
    resident.cover(8000)
    assert resident.count == 8192 and resident.complete  # never past the pool
    assert _resident_bytes() - before > 2 * 60 * 2**20  # both pools, less the written pages
    assert pools[0][7].eq(2.5).all() and pools[1][8191].eq(-1.0).all()
    pools[0][7] = pools[1][8191] = 0
    assert not pools[0].any() and not pools[1].any()


def test_resident_blocks_map_runs_that_start_inside_a_page(caplog):
    """A block of 6 KiB (bfloat16, 3 KV heads, as SmolLM2's) leaves an odd count of blocks
    ending mid-page: the next run still maps (from the start of that page), never falling
    back to lazy pages, and changes no byte."""
    import torch

    shape = (1024, 16, 3, 64)  # 6 KiB a block
    pools = [zeroed(shape, torch.bfloat16, torch.device("cpu")) for _ in range(2)]
    resident = ResidentBlocks(pools)
    resident.cover(1)
    mapped = resident.count
    assert mapped == 1 + MIN_AHEAD_BLOCKS  # 65 blocks: 97.5 pages
    pools[0][mapped - 1] = 3.0  # on the page the next run starts from
    before = _resident_bytes()
    with caplog.at_level("INFO", logger="engine.cpu.kv_pool"):
        resident.cover(600)
    assert "stays lazily mapped" not in caplog.text
    assert resident.count == 600 + 600 // 4 and not resident.complete
    new_bytes = 2 * (resident.count - mapped) * 6 * 2**10  # both pools' new blocks
    assert _resident_bytes() - before > 0.9 * new_bytes
    assert pools[0][mapped - 1].eq(3.0).all() and not pools[0][mapped:].any()


def test_resident_blocks_stay_lazy_where_madvise_fails(caplog):
    """An old kernel without MADV_POPULATE_WRITE: the first failure (on any of the mapping
    threads) leaves the pool to its lazy pages for good."""
    import torch

    pools = [zeroed((64, 16, 4, 64), torch.float32, torch.device("cpu")) for _ in range(4)]
    resident = ResidentBlocks(pools)
    calls = []
    resident._madvise = lambda address, size: calls.append(address) or (address == calls[0])
    with caplog.at_level("INFO", logger="engine.cpu.kv_pool"):
        resident.cover(1)
    assert resident.complete and "stays lazily mapped" in caplog.text
    resident.cover(64)
    assert len(calls) <= len(pools)  # never again


def test_the_runner_maps_the_blocks_a_step_writes(tiny_model):
    from engine import SamplingParams
    from tests.tiny_models import make_engine

    engine = make_engine(*tiny_model, num_kv_blocks=256)
    resident = engine.runner._resident
    assert resident.count == 0
    engine.generate(["a prompt of a few tokens"], SamplingParams(max_tokens=4, temperature=0))
    assert MIN_AHEAD_BLOCKS <= resident.count < 256  # the blocks used and a run ahead


def test_a_pool_that_cannot_be_allocated_is_a_clear_error(tiny_model, monkeypatch):
    from engine import EngineConfig, LLMEngine
    from engine.cpu import kv_pool

    def no_memory(*args, **kwargs):
        raise OSError(errno.ENOMEM, "simulated: no memory for the pool")

    monkeypatch.setattr(kv_pool.mmap, "mmap", no_memory)
    with pytest.raises(ValueError, match=r"num_kv_blocks=4096 needs .* GiB .*OSError"):
        LLMEngine(*tiny_model, EngineConfig(num_kv_blocks=4096))
