"""ModelRunner: decode grouping by context length, and a pool that does not fit."""

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

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


def test_a_pool_that_cannot_be_allocated_is_a_clear_error(tiny_model, monkeypatch):
    import torch

    from engine import EngineConfig, LLMEngine, model_runner

    def no_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("simulated: no memory for the pool")

    monkeypatch.setattr(model_runner.torch, "zeros", no_memory)
    with pytest.raises(ValueError, match=r"num_kv_blocks=4096 needs .* GiB"):
        LLMEngine(*tiny_model, EngineConfig(num_kv_blocks=4096))
