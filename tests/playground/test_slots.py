"""Batch slots x steps, rebuilt from a real engine's step log (tiny model)."""

import pytest

from engine import EngineConfig
from playground.board import slots
from tests.playground.boards import request, snapshot, step
from tests.playground.driving import fixed
from tests.tiny_models import TINY_ENGINE, make_engine

LENGTHS = (3, 8, 14, 4, 6, 9)  # answers of different lengths: users leave at different steps


@pytest.fixture(scope="module")
def runs(tiny_model):
    """Six requests, three seats, each way of batching: the snapshot once all finished."""
    out = {}
    for batching in ("continuous", "static"):
        config = EngineConfig(**{**TINY_ENGINE, "max_num_seqs": 3}, batching=batching)
        engine = make_engine(*tiny_model, config)
        for i, n in enumerate(LENGTHS):
            engine.add_request(f"r{i}", f"user {i} asks a question", fixed(n))
        while engine.has_unfinished_requests():
            engine.step()
        out[batching] = engine.snapshot()
    return out


def _idle_while_busy(grid) -> int:
    """Idle cells in columns where some other slot works (not the tail after the run)."""
    return sum(cell is None for col in zip(*grid, strict=True) if any(col) for cell in col)


def test_the_rebuilt_batch_is_the_one_the_engine_ran(runs):
    """Every step's decodes are the tokens the engine decoded, its prefills the prompts it
    scheduled: the slots show the batch as it was, not a guess."""
    for batching in ("continuous", "static"):
        for record, prefill, decode in slots.batches(runs[batching]):
            assert len(decode) == record.num_decode_tokens, (batching, record)
            assert len(prefill) + len(decode) == record.num_seqs, (batching, record)
        # drawn from a later step on, the batch at its start comes from the requests' times
        full = slots.batches(runs[batching])
        assert slots.batches(runs[batching], last=len(full) - 9) == full[9:]


def test_static_batching_leaves_slots_idle_continuous_refills_them(runs):
    static_x, static = slots.slot_grid(runs["static"])
    cont_x, cont = slots.slot_grid(runs["continuous"])
    assert len(static) == len(cont) == 3  # max_num_seqs seats
    # static: r0 (3 tokens) leaves its slot empty until r2 (14 tokens) is done
    assert _idle_while_busy(static) >= 14 - 3
    # continuous: a freed slot takes the next waiting request in the next step
    assert _idle_while_busy(cont) < _idle_while_busy(static) / 2
    assert len(static_x) > len(cont_x)  # and the workload takes more steps
    requests = {cell[0] for row in cont for cell in row if cell}
    assert requests == {f"r{i}" for i in range(len(LENGTHS))}


def test_a_request_keeps_its_slot_and_prefill_is_marked(runs):
    snap = runs["continuous"]
    _, grid = slots.slot_grid(snap)
    for rid in (f"r{i}" for i in range(len(LENGTHS))):
        rows = {slot for slot, row in enumerate(grid) for cell in row if cell and cell[0] == rid}
        assert len(rows) == 1, rid  # one seat from joining to leaving
    spec = slots.slots_spec(snap, {"r0": "r0 · Ada"}, {"r0": "#ff0000"})
    heat, marks = spec["data"][0], spec["data"][1]
    phases = [cell[1] for row in grid for cell in row if cell]
    assert len(marks["x"]) == phases.count("prefill") >= len(LENGTHS)
    assert any("r0 · Ada" in t for row in heat["text"] for t in row)
    assert "#ff0000" in [c for _, c in heat["colorscale"]]


def test_a_request_decoding_before_the_window_holds_a_slot_from_its_first_column():
    """The oldest step kept: a request prefilled before it decodes in it."""
    old = request("a", arrival=0.0, scheduled=0.1, first=0.2)
    new = request("b", arrival=0.5, scheduled=1.0)
    steps = [step(10, start=1.0, decode=1, running=2, events=[("prefill_done", "b")]),
             step(11, start=1.1, decode=2, running=2, events=[("finished", "a", "eos")]),
             step(12, start=1.2, decode=1, running=1)]  # fmt: skip
    x, grid = slots.slot_grid(snapshot(steps=steps, requests=[old, new]))
    assert x == [10, 11, 12]
    assert grid == [[("a", "decode"), ("a", "decode"), None],
                    [("b", "prefill"), ("b", "decode"), ("b", "decode")]]  # fmt: skip
    empty = slots.slots_spec(snapshot())
    assert empty["layout"]["xaxis"]["range"] == [-0.5, 1.5]
