"""The block table of a chosen request: shared prefix blocks and copy-on-write copies
marked, from hand-made snapshots, a real engine, and its rewound frames."""

from dataclasses import replace

from engine import SamplingParams
from playground.board import block_table
from playground.record.history import StepHistory
from tests.playground.boards import request, snapshot
from tests.playground.driving import fixed


def _cells(spec) -> dict[int, str]:
    """Physical block -> kind, as the heatmap draws it (a cell's z band names its kind)."""
    heat = spec["data"][0]
    return {int(t): block_table.KINDS[int(z)] for zs, ts in zip(heat["z"], heat["text"],
            strict=True) for z, t in zip(zs, ts, strict=True) if t}  # fmt: skip


def _beam_search():
    beams = ((0, "", -1.0), (4, "", -1.5), (5, "", -2.0))
    tables = ((0, 1, 2), (0, 1, 3), (0, 1, 6))  # beams 4 and 5 copied the partial block 2
    return replace(request("req-7", blocks=tables[0]), beam_width=3, beams=beams,
                   seq_block_tables=tables, copied_blocks=((3, 2, 41), (6, 2, 41)))  # fmt: skip


def test_a_beam_search_shares_its_prefix_and_copies_the_last_block():
    snap = snapshot(requests=[_beam_search(), request("b", blocks=[9])], blocks=16)
    spec = block_table.block_table_spec(snap, "req-7", {"req-7": "req-7 · Ada"})
    assert _cells(spec) == {0: "shared", 1: "shared", 2: "own", 3: "copied on write",
                            6: "copied on write"}  # fmt: skip
    heat = spec["data"][0]
    assert heat["y"] == ["beam 0 · 0–15", "beam 4 · 0–15", "beam 5 · 0–15"]
    assert "from block 2 at step 41" in heat["customdata"][1][2]
    assert "Block table of req-7 · Ada" in spec["layout"]["title"]["text"]
    names = [t["name"] for t in spec["data"][1:]]
    assert names == ["own (1)", "shared (2)", "copied on write (2)"]


def test_without_a_choice_it_shows_the_request_with_most_to_mark():
    snap = snapshot(requests=[request("a", blocks=[4, 5]), _beam_search()], blocks=16)
    assert block_table.pick_request(snap).request_id == "req-7"
    assert block_table.pick_request(snap, "a").request_id == "a"
    assert block_table.pick_request(snap, "gone").request_id == "req-7"
    empty = block_table.block_table_spec(snapshot())
    assert empty["data"] == [] and "no request" in empty["layout"]["title"]["text"]


def test_a_long_table_wraps_into_rows():
    snap = snapshot(requests=[request("a", blocks=range(40))], blocks=64)
    heat = block_table.block_table_spec(snap, "a")["data"][0]
    assert heat["y"] == ["blocks · 0–15", "blocks · 16–31", "blocks · 32–47"]
    assert heat["text"][2][:8] == [str(b) for b in range(32, 40)] and heat["text"][2][8] == ""


def test_a_real_prefix_hit_and_real_forks_live_and_rewound(make_engine):
    """Two prompts with one long prefix share its blocks; a beam search's forks copy on
    write; each rewound frame draws the table the live engine had at that step."""
    engine = make_engine()
    prefix = "The same long system prompt for every request, word after word, " * 2
    engine.add_request("first", prefix + "one", fixed(30))
    engine.step()
    engine.step()
    engine.add_request("second", prefix + "two", fixed(6))
    engine.add_request("beam", "a b c d e f g", SamplingParams(max_tokens=12, temperature=0.0,
                                                               beam_width=4))  # fmt: skip
    history, live, kinds = StepHistory(), {}, {"shared": 0, "copied on write": 0}
    while engine.has_unfinished_requests():
        engine.step()
        snap = engine.snapshot()
        history.record(snap)
        live[snap.step] = snap
        for rid in ("second", "beam"):
            for kind in _cells(block_table.block_table_spec(snap, rid)).values():
                kinds[kind] = kinds.get(kind, 0) + 1
    assert kinds["shared"] > 0 and kinds["copied on write"] > 0, kinds
    for step, snap in live.items():
        frame, _ = history.frame(step)
        for rid in ("first", "second", "beam"):
            assert block_table.block_table_spec(frame, rid) == block_table.block_table_spec(
                snap, rid)  # fmt: skip
