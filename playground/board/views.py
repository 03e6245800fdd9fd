"""What the board shows of one BoardState: HTML and chart JSON, for the live board's frames
(frames.py) and a session's rewound board.

Pure of Gradio state except gr.skip(); the charts are built once per board version
(FigureCache), and a reader is sent only the charts it lacks, as one JSON object that the
page's assets/charts.js draws into the gr.Plot placeholders.
"""

import threading

import gradio as gr

from playground.board import block_table, cards, charts, kv_map, slots, step_cost, timeline
from playground.board.compare import COMPARE_KEYS, compare_specs
from playground.board.inspector import render_inspector
from playground.board.state import BoardState
from playground.remote import views as remote


class FigureCache:
    """Charts of the latest board version, built once and shared by every session.

    Each chart also has a revision that moves only when its JSON changes, so a session is
    sent a chart only when it differs from the one it has (the browser redraws every chart
    it receives, which costs far more than building it).
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._version = -1
        self._plots: dict[str, str] = {}  # chart -> its figure's JSON
        self._revisions: dict[str, int] = {}
        self._tables: dict[str, str] = {}  # request -> its block table's JSON, this version

    def block_table(self, state: BoardState, rid: str) -> str:
        """The block table of `rid` in this version, built once for every session inspecting
        it."""
        with self._lock:
            if state.version != self._version:
                self._refresh(state)
            if (table := self._tables.get(rid)) is None:
                labels = cards.request_labels(state)
                spec = block_table.block_table_spec(state.snapshot, rid, labels)
                table = self._tables[rid] = charts.as_json(charts.in_run(spec, state.run))
            return table

    def get(self, state: BoardState) -> tuple[dict[str, str], dict[str, int]]:
        with self._lock:
            if state.version != self._version:
                self._refresh(state)
            return self._plots, dict(self._revisions)

    def _refresh(self, state: BoardState) -> None:
        for key, plot in _figures(state).items():
            old = self._plots.get(key)
            if old != plot:
                self._plots[key] = plot
                self._revisions[key] = self._revisions.get(key, 0) + 1
        self._version, self._tables = state.version, {}


def _figures(state: BoardState, rid: str | None = None) -> dict[str, str]:
    """Every chart of the board, as the figure JSON plotly.js draws (built without go.Figure);
    the block table is `rid`'s (else the board's pick). A zoom lasts the run (charts.in_run)."""
    specs = remote.figures(state) if remote.is_remote(state) else _specs(state, rid)
    return {k: charts.as_json(charts.in_run(v, state.run)) for k, v in specs.items()}


def _specs(state: BoardState, rid: str | None) -> dict[str, dict]:
    snap = state.snapshot
    labels, colours = cards.request_labels(state), cards.request_colours(state)
    specs = {
        "queue": charts.queue_spec(snap),
        "batch": charts.batch_spec(snap),
        "timeline": timeline.timeline_spec(snap, labels),
        "kv": kv_map.kv_block_spec(snap, colours),
        "slots": slots.slots_spec(snap, labels, colours),
        "blocks": block_table.block_table_spec(snap, rid, labels),
        "steptime": step_cost.step_cost_spec(snap),
        "waiting": charts.waiting_reason_spec(snap),
        "stops": charts.stop_reason_spec(snap),
        "latency": charts.latency_spec(snap),
        "tput": charts.throughput_spec(snap),
    }
    if state.compare:
        specs.update(compare_specs(state))
    return specs


PLOT_KEYS = ("queue", "batch", "timeline", "kv", "slots", "blocks", "steptime", "waiting",
             "stops", "latency", "tput")  # fmt: skip


def _plots(state: BoardState, cache: FigureCache, keys, sent: dict | None) -> list:
    """This session's updated `sent`, then the charts it lacks as one JSON object
    {chart: figure} (gr.skip() when it has them all)."""
    plots, revisions = cache.get(state)
    sent = dict(sent or {})
    parts = []
    for key in keys:
        mark, plot = revisions.get(key), plots.get(key)
        if plot is not None and sent.get(key) != mark:
            parts.append(f'"{key}":{plot}')
            sent[key] = mark
    return [sent, "{" + ",".join(parts) + "}" if parts else gr.skip()]


def board_values(state: BoardState, me: str | None, rid, deltas) -> list:
    """A redraw of the text: stats, cards, step log, inspector, scoreboard."""
    if remote.is_remote(state):
        return remote.board_values(state, me)
    detail = state.details.get(rid) if rid else None
    return [
        cards.render_stats(state),
        cards.render_cards(state, me),
        cards.render_step_log(state, me),
        render_inspector(detail, deltas, rid),
        cards.render_scoreboard(state),
    ]


def chart_values(state: BoardState, cache: FigureCache, sent: dict | None = None) -> list:
    """A redraw of the charts: charts sent, then the figures the session lacks, per `sent`
    (the block table is the board's pick, the request with most shared and copied blocks; a
    session that inspects a request draws that one's itself: playground/ui/live.py)."""
    return _plots(state, cache, PLOT_KEYS, sent)


def compare_values(state: BoardState, cache: FigureCache, sent: dict | None = None) -> list:
    """A redraw of the compare tab's charts: charts sent, then the figures it lacks."""
    return _plots(state, cache, COMPARE_KEYS, sent)
