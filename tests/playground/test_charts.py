"""Charts from hand-made snapshots: the traces and the values they carry."""

import json
import time
from dataclasses import replace

import pytest

from engine.telemetry import Totals
from playground.board import charts, kv_map, timeline
from tests.playground.boards import busy_board, request, snapshot, step


def _trace(fig, name):
    return next(t for t in fig.data if t.name == name)


def test_queue_figure_stacks_finished_running_waiting():
    steps = [
        step(1, waiting=3, running=0),
        step(2, waiting=1, running=2, events=[("admitted", "a"), ("admitted", "b")]),
        step(3, waiting=0, running=2, events=[("finished", "a", "eos"), ("aborted", "c")]),
    ]
    fig = charts.as_figure(
        charts.queue_spec(snapshot(steps=steps, totals=Totals(num_requests_finished=5)))
    )
    assert [t.name for t in fig.data] == ["finished", "running", "waiting"]
    assert all(t.stackgroup == "q" for t in fig.data)
    assert list(_trace(fig, "waiting").y) == [3, 1, 0]
    assert list(_trace(fig, "running").y) == [0, 2, 2]
    # 5 finished in all, 2 of them in the window (a finished, c aborted): 3 before it.
    assert list(_trace(fig, "finished").y) == [3, 3, 5]
    assert list(_trace(fig, "finished").x) == [1, 2, 3]


def test_queue_figure_counts_n_completions_of_one_request_once():
    events = [("finished", "a", "eos"), ("finished", "a", "max_tokens")]
    fig = charts.as_figure(charts.queue_spec(snapshot(steps=[step(1, events=events)])))
    assert list(_trace(fig, "finished").y) == [0]  # totals say 0: window starts at -1 + 1


def test_batch_figure_prefill_decode_and_budget():
    steps = [step(1, prefill=60, budget=64), step(2, prefill=20, decode=4, budget=64)]
    fig = charts.as_figure(charts.batch_spec(snapshot(steps=steps)))
    assert list(_trace(fig, "prefill").y) == [60, 20]
    assert list(_trace(fig, "decode").y) == [0, 4]
    assert list(_trace(fig, "budget").y) == [64, 64]
    assert fig.layout.barmode == "stack"


def test_stop_reason_counts_in_fixed_order():
    totals = Totals(stop_reasons={"eos": 3, "cancelled": 1})
    fig = charts.as_figure(charts.stop_reason_spec(snapshot(totals=totals)))
    bar = fig.data[0]
    assert list(bar.x) == list(charts.STOP_COLOURS)
    assert dict(zip(bar.x, bar.y, strict=True))["eos"] == 3
    assert dict(zip(bar.x, bar.y, strict=True))["cancelled"] == 1
    assert sum(bar.y) == 4


def test_kv_block_map_owners_shared_cached_free():
    reqs = [request("a", blocks=[0, 1, 2]), request("b", blocks=[2, 5])]
    snap = snapshot(requests=reqs, blocks=16, used=4, cached=1, cached_ids=(7,))
    fig = charts.as_figure(kv_map.kv_block_spec(snap, {"a": "#ff0000", "b": "#00ff00"}))
    heat = fig.data[0]
    cells = [v for row in heat.z for v in row]
    text = [v for row in heat.text for v in row]
    assert len([c for c in cells if c is not None]) == 16
    scale = [c for _, c in heat.colorscale]
    colour = {i: scale[2 * int(cells[i])] for i in range(16)}  # band i holds palette[i]
    assert colour[0] == colour[1] == "#ff0000"
    assert colour[5] == "#00ff00"
    assert colour[2] == kv_map.SHARED_COLOUR and "a, b" in text[2]
    assert colour[7] == kv_map.CACHED_COLOUR
    assert colour[3] == kv_map.FREE_COLOUR and text[3] == "block 3: free"
    assert "4 used, 1 cached" in fig.layout.title.text


def test_kv_block_map_shows_blocks_beams_share_and_the_copies_they_wrote():
    beams = ((0, "", -1.0), (4, "", -1.5), (5, "", -2.0))
    tables = ((0, 1, 2), (0, 1, 3), (0, 1, 6))  # beams 4 and 5 copied the partial block 2
    beam = replace(request("req-7", blocks=tables[0]), beam_width=3, beams=beams,
                   seq_block_tables=tables, copied_blocks=((3, 2, 41), (6, 2, 41)))  # fmt: skip
    reqs = [beam, request("b", blocks=[9])]
    fig = charts.as_figure(
        kv_map.kv_block_spec(snapshot(requests=reqs, blocks=16, used=6), {"req-7": "#ff0000"})
    )
    heat = fig.data[0]
    cells = [v for row in heat.z for v in row]
    text = [v for row in heat.text for v in row]
    scale = [c for _, c in heat.colorscale]
    colour = {i: scale[2 * int(cells[i])] for i in range(16)}
    assert colour[0] == colour[1] == kv_map.SHARED_COLOUR
    assert text[0] == "block 0: shared by 3 beams of req-7"
    assert colour[3] == colour[6] == kv_map.COPIED_COLOUR
    assert text[3] == "block 3: copied from block 2 at step 41 (req-7 beam 4)"
    assert colour[2] == "#ff0000" and text[2] == "block 2: req-7 beam 0"
    assert text[9] == "block 9: b" and colour[5] == kv_map.FREE_COLOUR
    names = [t.name for t in fig.data[1:]]
    assert "shared, ref count > 1 (2)" in names and "copied on write (2)" in names
    forked = replace(beam, seq_block_tables=((0, 1, 2), (0, 1, 2), (0, 1, 6)))  # not written yet
    fig = charts.as_figure(kv_map.kv_block_spec(snapshot(requests=[forked])))
    text = [v for row in fig.data[0].text for v in row]
    assert text[2] == "block 2: shared by 2 beams of req-7"


def test_kv_block_map_caps_huge_pools():
    fig = charts.as_figure(kv_map.kv_block_spec(snapshot(blocks=100_000)))
    assert sum(v is not None for row in fig.data[0].z for v in row) == kv_map.MAX_KV_CELLS


def test_latency_in_milliseconds():
    fig = charts.as_figure(charts.latency_spec(snapshot(ttfts=[0.1, 0.3], tpots=[0.02])))
    assert list(_trace(fig, "TTFT").x) == pytest.approx([100, 300])
    assert list(_trace(fig, "TPOT").x) == pytest.approx([20])


def test_throughput_rolls_over_wall_time():
    steps = [step(n, start=n * 0.5, duration=0.5, decode=4) for n in range(1, 5)]
    fig = charts.as_figure(charts.throughput_spec(snapshot(steps=steps)))
    gen = _trace(fig, "generated")
    assert list(gen.y) == pytest.approx([8.0] * 4)  # 4 tokens per 0.5 s


def test_empty_snapshot_draws_every_chart():
    snap = snapshot()
    for fn in (charts.queue_spec, charts.batch_spec, timeline.timeline_spec,
               charts.stop_reason_spec, kv_map.kv_block_spec, charts.latency_spec,
               charts.throughput_spec):  # fmt: skip
        charts.as_figure(fn(snap)).to_json()


def test_a_refresh_keeps_the_visitors_zoom_even_when_the_title_moves():
    """plotly.js keeps zoom and legend clicks while `uirevision` stays the same; the KV,
    latency and throughput titles carry live numbers, so it must not follow the title."""
    quiet, busy = snapshot(), busy_board().snapshot
    specs = (charts.queue_spec, charts.batch_spec, timeline.timeline_spec, kv_map.kv_block_spec,
             charts.stop_reason_spec, charts.latency_spec, charts.throughput_spec)  # fmt: skip
    for spec in specs:
        before, after = spec(quiet)["layout"], spec(busy)["layout"]
        assert before["uirevision"] == after["uirevision"], spec.__name__
    assert (
        kv_map.kv_block_spec(quiet)["layout"]["title"]
        != kv_map.kv_block_spec(busy)["layout"]["title"]
    )


def test_charts_of_a_full_board_are_cheap():
    """32 users and 500 steps: every chart's JSON (what the board sends) well under a tick."""
    snap = busy_board().snapshot
    fns = (charts.queue_spec, charts.batch_spec, timeline.timeline_spec, charts.stop_reason_spec,
           kv_map.kv_block_spec, charts.latency_spec, charts.throughput_spec)  # fmt: skip
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for fn in fns:
            charts.as_json(fn(snap))
        best = min(best, time.perf_counter() - t0)
    assert best < 0.05, f"{best * 1000:.0f} ms"  # ~2 ms on an idle core; loose for CI


def test_spec_json_is_the_figure_json():
    snap = busy_board(num_users=3, num_steps=10).snapshot
    spec = charts.batch_spec(snap)
    from_json = json.loads(charts.as_json(spec))
    from_fig = json.loads(charts.as_figure(charts.batch_spec(snap)).to_json())
    assert from_json["data"] == from_fig["data"]
    assert len(from_json["data"][0]["y"]) == len(snap.steps)
    assert len(charts.batch_spec(busy_board(num_steps=500).snapshot)["data"][0]["x"]) == (
        charts.MAX_CHART_STEPS
    )
