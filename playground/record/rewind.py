"""The board as it was after an earlier step: a BoardState and its charts, from StepHistory.

Pure functions. `rewound_state` puts the history's frame of step k in place of the first
lane's snapshot and rewinds the cards' records to it (text, tokens, status then); requests
that had not arrived yet drop out. `rewound_figures` draws every chart of that state with the
board's own chart functions, then marks step k: a cursor on the per-step charts (whose x axis
keeps the whole window, so the cursor moves and the axis does not) and on the timeline.
"""

from dataclasses import replace

import orjson

from engine import EngineSnapshot
from playground.board.cards import esc
from playground.board.charts import as_json
from playground.board.state import BoardState
from playground.board.timeline import MAX_TIMELINE_REQUESTS
from playground.board.views import _figures

CURSOR_COLOUR = "#dc2626"
STEP_CHARTS = ("queue", "batch", "tput")  # x axis: step number


def rewound_state(live: BoardState, snap: EngineSnapshot, users: tuple) -> BoardState:
    """`live` with the first lane as it was in `snap` (a StepHistory frame)."""
    states = {r.request_id: r for r in snap.requests}
    records = []
    for rec in live.records:
        s = states.get(rec.request_id)
        if s is None:
            continue
        done = s.status == "finished"
        ttft = s.first_token - s.arrival if s.first_token is not None else None
        records.append(replace(rec, text=s.text, num_output_tokens=s.num_output_tokens,
                               stop_reason=s.stop_reason if done else None, finished=done,
                               token_ids=None, logprobs=None, ttft=ttft))  # fmt: skip
    return replace(live, snapshots={**live.snapshots, live.lanes[0]: snap},
                   records=tuple(records), users=users, details={})  # fmt: skip


def rewound_figures(
    state: BoardState,
    window: tuple[int, int],
    live_end: float | None = None,
    rid: str | None = None,
) -> dict[str, str]:
    """Every chart of a rewound state, step `state.snapshot.step` marked; `window` is the
    (oldest, newest) step the history keeps, `live_end` the end of the newest step
    (time.monotonic()): the timeline's axis reaches it, so its cursor shows where step k is.
    The block table is of `rid`, the request the session inspects, as it was then."""
    snap = state.snapshot
    figures = {k: orjson.loads(v) for k, v in _figures(state, rid).items()}
    for key in STEP_CHARTS:
        if key in figures:
            _cursor(figures[key], snap.step, (window[0] - 0.5, window[1] + 0.5))
    record = snap.steps[-1] if snap.steps and snap.steps[-1].step == snap.step else None
    if "batch" in figures and record is not None:
        figures["batch"]["layout"]["title"]["text"] = (
            f"Step {snap.step}: {record.num_prefill_tokens} prefill + "
            f"{record.num_decode_tokens} decode tokens of {record.token_budget}, "
            f"{record.num_seqs} sequences"
        )
    reqs = sorted(snap.requests, key=lambda r: r.arrival)[-MAX_TIMELINE_REQUESTS:]
    if "timeline" in figures and reqs and record is not None:
        t0 = reqs[0].arrival
        end = None if live_end is None else (-0.05, round(live_end - t0, 3))
        _cursor(figures["timeline"], round(record.start + record.duration - t0, 3), end)
    figures["kv"]["layout"]["title"]["text"] = (
        f"KV blocks after step {snap.step}: {snap.kv_blocks_used} used, "
        f"{snap.kv_blocks_cached} cached, {snap.kv_blocks_free} free"
    )
    return {k: as_json({"data": f["data"], "layout": f["layout"]}) for k, f in figures.items()}


def _cursor(figure: dict, x: float, x_range: tuple[float, float] | None = None) -> None:
    """A vertical line at `x` across the plot (mutates `figure`)."""
    layout = figure["layout"]
    layout["shapes"] = [*layout.get("shapes", []), {
        "type": "line", "x0": x, "x1": x, "xref": "x", "y0": 0, "y1": 1, "yref": "paper",
        "line": {"color": CURSOR_COLOUR, "width": 2}}]  # fmt: skip
    if x_range is not None:
        layout["xaxis"] = {**layout.get("xaxis", {}), "range": list(x_range), "autorange": False}
    layout["uirevision"] = f"rewind-{x}"  # a new range must win over the kept zoom


def rewind_note(step: int, window: tuple[int, int], nbytes: int, num_steps: int) -> str:
    per_step = nbytes / max(1, num_steps)
    return (
        f'<div class="pg-rewind-note" id="pg-rewind-at">Showing the engine after '
        f"<b>step {step}</b> (steps {window[0]}–{window[1]} kept: {num_steps} steps, "
        f"{nbytes / 1024:.0f} kB of deltas, {per_step / 1024:.1f} kB a step). The engine "
        f"runs on for everyone else; <b>Live</b> returns.</div>"
    )


def live_note(window: tuple[int, int] | None) -> str:
    if window is None:
        return (
            '<div class="pg-rewind-note pg-muted">Live. Drag the slider back to see the engine '
            "as it was after an earlier step.</div>"
        )
    return (
        f'<div class="pg-rewind-note pg-muted">Live. Drag the slider to look back at any of '
        f"steps {esc(window[0])}–{esc(window[1])}.</div>"
    )
