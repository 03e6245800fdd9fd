"""What a redraw sends: the board's HTML and only the charts a session lacks, cheaply."""

import json
from dataclasses import replace

import gradio as gr

from engine.llm_engine import MAX_FINISHED_KEPT
from engine.telemetry import MAX_LATENCY_SAMPLES, MAX_STEP_RECORDS
from playground.board.kv_map import MAX_KV_CELLS
from playground.board.views import (
    COMPARE_KEYS,
    PLOT_KEYS,
    FigureCache,
    board_values,
    chart_values,
    compare_values,
)
from tests.playground.boards import busy_board


def test_a_full_board_is_drawn_whole_at_the_caps():
    """32 users and 500 steps, every history at the engine's caps: the text and every chart
    are built (their cost is bench/bench_board.py's and bench/bench_frame.py's to measure)."""
    state = busy_board(
        num_users=32,
        num_steps=MAX_STEP_RECORDS,
        version=1,
        num_finished=MAX_FINISHED_KEPT,
        num_samples=MAX_LATENCY_SAMPLES,
        kv_blocks=MAX_KV_CELLS,
    )
    snap = state.snapshot
    assert len(snap.steps) >= 500 and len(snap.ttfts) == MAX_LATENCY_SAMPLES
    assert len(snap.requests) == 32 + MAX_FINISHED_KEPT and len(state.users) == 32
    html = board_values(state, "visitor:me", None, ())
    sent, figures = chart_values(state, FigureCache())
    assert all(isinstance(h, str) for h in html) and set(sent) == set(PLOT_KEYS)
    assert set(json.loads(figures)) == set(PLOT_KEYS)  # every chart was built and sent


def test_a_session_is_sent_only_the_charts_that_changed():
    cache = FigureCache()
    board = busy_board(num_users=4, num_steps=20, version=1)
    sent, figures = chart_values(board, cache)
    figures = json.loads(figures)  # {chart: plotly figure}, as assets/charts.js reads it
    assert list(figures) == list(PLOT_KEYS) and all("data" in f for f in figures.values())
    assert figures["batch"]["layout"]["title"]["text"] == "Tokens per step"
    same_charts = replace(board, version=2, paused=True)  # new version, same charts
    assert chart_values(same_charts, cache, sent) == [sent, gr.skip()]
    _, other_session = chart_values(same_charts, cache, {})
    assert json.loads(other_session) == figures
    more = busy_board(num_users=4, num_steps=21, version=3)  # one step later
    _, changed = chart_values(more, cache, sent)
    assert "batch" in json.loads(changed) and "stops" not in json.loads(changed)


def _both_lanes(board):
    lanes = ("continuous", "static")
    return replace(board, lanes=lanes, snapshots=dict.fromkeys(lanes, board.snapshot),
                   stats=dict.fromkeys(lanes, board.stats["main"]))  # fmt: skip


def test_compare_charts_are_drawn_only_in_compare_mode():
    board = busy_board(num_users=4, num_steps=20)
    cache = FigureCache()
    assert compare_values(board, cache) == [{}, gr.skip()]
    sent, figures = compare_values(replace(_both_lanes(board), version=2), cache)
    assert list(json.loads(figures)) == list(COMPARE_KEYS) and set(sent) == set(COMPARE_KEYS)


def _revisions(state) -> set[str]:
    """The uirevision of every chart of `state`, the compare view's included."""
    _, figures = chart_values(state, FigureCache())
    _, compared = compare_values(state, FigureCache())
    figures = {**json.loads(figures), **json.loads(compared)}
    assert set(figures) == {*PLOT_KEYS, *COMPARE_KEYS}
    return {figure["layout"]["uirevision"] for figure in figures.values()}


def test_a_zoom_lasts_the_run_and_a_new_run_starts_from_the_figures_axes():
    """plotly.js keeps a visitor's zoom while a chart's `uirevision` stays: it is the run's
    (BoardState.run), the same from version to version and new with a reset."""
    board = _both_lanes(busy_board(num_users=4, num_steps=20))
    later = _both_lanes(busy_board(num_users=4, num_steps=40, version=9))
    assert _revisions(board) == _revisions(later) == {"run-0"}
    assert _revisions(replace(later, version=10, run=1)) == {"run-1"}
    table = FigureCache().block_table(later, later.snapshot.requests[0].request_id)
    assert json.loads(table)["layout"]["uirevision"] == "run-0"
