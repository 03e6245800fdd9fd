"""Pure functions: an EngineSnapshot (plus plain dicts) in, a Plotly figure out.

No gradio, no globals that change. Each chart is a `*_spec` function that returns the plain
figure dict (what plotly.js draws); `as_figure` wraps one in a go.Figure (tests, notebooks). The
board sends `as_json(spec)` straight to the browser: building a go.Figure deep-copies every
array and costs ~2 ms a chart, the dict costs ~0.2 ms. A tiny template of our own replaces
the stock one, which would add ~10 kB of theme JSON to every chart.
"""

import numpy as np
import orjson
import plotly.graph_objects as go

from engine import WaitingReason
from engine.telemetry import EngineSnapshot
from playground.board.per_step import per_window
from playground.teaching.why import WAITING_COLOURS

STATUS_COLOURS = {"waiting": "#f59e0b", "running": "#3b82f6", "finished": "#10b981"}
PHASE_COLOURS = {"waiting": "#fcd34d", "prefill": "#8b5cf6", "decode": "#3b82f6"}
STOP_COLOURS = {
    "eos": "#10b981", "max_tokens": "#3b82f6", "stop_word": "#14b8a6", "cancelled": "#9ca3af",
    "length": "#f97316", "timeout": "#eab308", "error": "#ef4444",
}  # fmt: skip
PREEMPT_COLOUR = "#ef4444"
PLOTLY_CONFIG = {"displayModeBar": False}  # redrawn up to 2x/s: zoom tools only flicker
MAX_CHART_STEPS = 200  # per-step charts draw the latest steps only: redrawn up to 2x/s
TALL_HEIGHT = 400  # the timeline and the block map: one height, whatever they hold
SHORT_HEIGHT = 230  # assets/charts.js draws every chart at most this tall on a short screen
THROUGHPUT_WINDOW = 8  # steps in the rolling tokens/s

_TEMPLATE = {
    "layout": {
        "font": {
            "family": "Inter, ui-sans-serif, system-ui, sans-serif",
            "size": 11,
            "color": "#334155",
        },  # fmt: skip
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "rgba(0,0,0,0)",
        "xaxis": {"gridcolor": "#e2e8f0", "zerolinecolor": "#cbd5e1", "automargin": True},
        "yaxis": {"gridcolor": "#e2e8f0", "zerolinecolor": "#cbd5e1", "automargin": True},
        "hoverlabel": {"font": {"size": 11}},
    }
}


def _spec(title: str, traces: list[dict], height: int = 260, **layout) -> dict:
    base = {
        "template": _TEMPLATE,
        "title": {"text": title, "x": 0.01, "y": 0.97, "font": {"size": 13, "color": "#0f172a"}},
        "height": height,
        "margin": {"l": 48, "r": 12, "t": 40, "b": 36},
        "legend": {
            "orientation": "h",
            "x": 1,
            "xanchor": "right",
            "y": 1.0,
            "yanchor": "bottom",
            "font": {"size": 10},
        },  # fmt: skip
        "uirevision": "board",  # the same on every refresh: keeps the visitor's zoom (in_run)
    }
    base.update(layout)
    return {"data": traces, "layout": base}


def in_run(spec: dict, run: int) -> dict:
    """`spec` as a figure of run `run` (BoardState.run): plotly.js keeps a visitor's zoom and
    legend clicks while `uirevision` stays the same, so they last the run, and a new run (a
    reset, a preset) starts from the figure's own axes. Mutates and returns `spec`."""
    spec["layout"]["uirevision"] = f"run-{run}"
    return spec


def step_axis(x: list[int]) -> dict:
    """The x axis of a per-step chart over the steps `x`: autoranged over what is drawn (the
    layout stays the same from refresh to refresh, so a visitor's zoom stays: uirevision);
    with nothing to draw yet an explicit range, so a new run never keeps the last one's."""
    if x:
        return {"title": {"text": "step"}, "autorange": True}
    return {"title": {"text": "step"}, "range": [-0.5, 1.5], "autorange": False}


def stepped_scale(palette: list[str]) -> list:
    """A heatmap colour scale of bands: z in [i, i + 1) of zmax=len(palette) is palette[i]."""
    n, scale = len(palette), []
    for i, c in enumerate(palette):
        scale += [[i / n, c], [(i + 1) / n, c]]
    return scale


def queue_spec(snap: EngineSnapshot, title: str = "Queues over time") -> dict:
    """Cumulative flow: finished (bottom), running, waiting, one stacked area per state."""
    steps = snap.steps[-MAX_CHART_STEPS:]
    x = [r.step for r in steps]
    done_per_step = _window_done(steps)
    finished = snap.totals.num_requests_finished - sum(done_per_step)
    cumulative = []
    for n in done_per_step:
        finished += n
        cumulative.append(finished)
    series = [
        ("finished", cumulative),
        ("running", [r.num_running for r in steps]),
        ("waiting", [r.num_waiting for r in steps]),
    ]
    traces = [
        {"type": "scatter", "mode": "lines", "name": name, "x": x, "y": y, "stackgroup": "q",
         "line": {"width": 0.5, "color": STATUS_COLOURS[name]}, "hovertemplate": "%{y}"}
        for name, y in series
    ]  # fmt: skip
    return _spec(title, traces, xaxis=step_axis(x),
                   yaxis={"title": {"text": "requests"}, "autorange": True},
                   hovermode="x unified")  # fmt: skip


def _num_done(record) -> int:
    """Requests that ended in this step (n > 1 completions report one 'finished' each)."""
    ended = {e.request_id for e in record.events if e.kind in ("finished", "aborted")}
    return len(ended)


_window_done = per_window(_num_done)


def batch_spec(snap: EngineSnapshot, title: str = "Tokens per step") -> dict:
    """Prefill and decode tokens of every step, stacked, against the token budget."""
    steps = snap.steps[-MAX_CHART_STEPS:]
    x = [r.step for r in steps]
    traces = [
        {"type": "bar", "name": "prefill", "x": x, "y": [r.num_prefill_tokens for r in steps],
         "marker": {"color": PHASE_COLOURS["prefill"]}},
        {"type": "bar", "name": "decode", "x": x, "y": [r.num_decode_tokens for r in steps],
         "marker": {"color": PHASE_COLOURS["decode"]}},
        {"type": "scatter", "mode": "lines", "name": "budget", "x": x,
         "y": [r.token_budget for r in steps],
         "line": {"color": "#0f172a", "dash": "dash", "width": 1.5, "shape": "hvh"}},
    ]  # fmt: skip
    return _spec(title, traces, barmode="stack", bargap=0.05, xaxis=step_axis(x),
                   yaxis={"title": {"text": "tokens"}, "rangemode": "tozero", "autorange": True},
                   hovermode="x unified")  # fmt: skip


def waiting_reason_spec(snap: EngineSnapshot, title: str = "Waiting, by reason") -> dict:
    """Requests left waiting after each step, stacked by the first rule that kept them out."""
    steps = snap.steps[-MAX_CHART_STEPS:]
    x = [r.step for r in steps]
    counts = [dict(r.waiting_by_reason) for r in steps]
    seen = {reason for c in counts for reason in c}
    traces = [
        {"type": "bar", "name": reason.label, "x": x, "y": [c.get(reason, 0) for c in counts],
         "marker": {"color": WAITING_COLOURS[reason]},
         "hovertemplate": f"{reason.label}: %{{y}}<extra></extra>"}
        for reason in WaitingReason if reason in seen
    ]  # fmt: skip
    return _spec(title, traces, barmode="stack", bargap=0.05, xaxis=step_axis(x),
                 yaxis={"title": {"text": "waiting requests"}, "rangemode": "tozero",
                        "autorange": True},
                 hovermode="x unified")  # fmt: skip


def stop_reason_spec(snap: EngineSnapshot, title: str = "Why requests stopped") -> dict:
    counts = snap.totals.stop_reasons
    reasons = list(STOP_COLOURS)
    traces = [
        {"type": "bar", "x": reasons, "y": [counts.get(r, 0) for r in reasons],
         "marker": {"color": [STOP_COLOURS[r] for r in reasons]}, "name": "requests",
         "text": [counts.get(r, 0) or "" for r in reasons], "textposition": "outside",
         "hovertemplate": "%{x}: %{y}<extra></extra>"}
    ]  # fmt: skip
    top = max(counts.values(), default=0)
    yaxis = {"title": {"text": "completions"}, "range": [0, max(1, top) * 1.25]}
    return _spec(title, traces, showlegend=False, yaxis=yaxis)


def latency_spec(snap: EngineSnapshot, title: str = "Latency") -> dict:
    """TTFT and TPOT of recent finished requests (ms): a box with every request as a dot."""
    t = snap.totals
    traces = [
        {"type": "box", "name": name, "x": [round(v * 1000, 1) for v in values], "boxpoints": "all",
         "jitter": 0.5, "pointpos": 0, "marker": {"color": colour, "size": 4, "opacity": 0.7},
         "line": {"color": colour, "width": 1.5}, "fillcolor": "rgba(0,0,0,0)",
         "xaxis": axis, "yaxis": "y" if axis == "x" else "y2", "hoverinfo": "x"}
        for name, values, colour, axis in (
            ("TTFT", snap.ttfts, "#8b5cf6", "x"), ("TPOT", snap.tpots, "#3b82f6", "x2"),
        )
    ]  # fmt: skip
    sub = f"p50 TTFT {_ms(t.ttft_p50)}, TPOT {_ms(t.tpot_p50)}"
    return _spec(
        f"{title} <span style='font-size:11px;color:#64748b'>{sub}</span>", traces,
        showlegend=False,
        xaxis={"domain": [0, 1], "title": {"text": "time to first token (ms)"},
               "rangemode": "tozero", "anchor": "y"},
        yaxis={"domain": [0.58, 1], "showticklabels": True},
        xaxis2={"domain": [0, 1], "title": {"text": "time per output token (ms)"},
                "anchor": "y2", "rangemode": "tozero"},
        yaxis2={"domain": [0, 0.3]},
        margin={"l": 48, "r": 12, "t": 40, "b": 36},
    )  # fmt: skip


def throughput_spec(snap: EngineSnapshot, title: str = "Tokens per second") -> dict:
    """Rolling generated and prompt tokens per second of wall time (pauses included)."""
    steps = snap.steps[-MAX_CHART_STEPS:]
    x, gen, pre = [], [], []
    if steps:  # one array op per column, not a Python loop per step (redrawn every version)
        cols = np.array(_window_rows(steps))  # (steps, 5)
        sums = np.vstack([np.zeros((1, 2)), np.cumsum(cols[:, 3:], axis=0)])  # prefix sums
        i = np.arange(len(steps))
        j = np.maximum(0, i - THROUGHPUT_WINDOW + 1)  # each window's first step
        span = cols[:, 2] - cols[j, 1]
        ok = span > 0
        rates = np.round((sums[i + 1] - sums[j])[ok] / span[ok, None], 2)  # (kept, 2)
        x, gen, pre = cols[ok, 0].astype(int).tolist(), *rates.T.tolist()
    traces = [
        {"type": "scatter", "mode": "lines", "name": "generated", "x": x, "y": gen,
         "line": {"color": "#10b981", "width": 2}},
        {"type": "scatter", "mode": "lines", "name": "prompt", "x": x, "y": pre,
         "line": {"color": "#8b5cf6", "width": 1, "dash": "dot"}},
    ]  # fmt: skip
    avg = snap.totals.tokens_per_s
    return _spec(f"{title} <span style='font-size:11px;color:#64748b'>avg "
                   f"{avg:.1f} generated/s busy</span>", traces,
                   xaxis=step_axis(x),
                   yaxis={"title": {"text": "tokens / s"}, "rangemode": "tozero",
                          "autorange": True},
                   hovermode="x unified")  # fmt: skip


def _num_generated(record) -> int:
    """Tokens sampled in a step: one per decode, one per prompt that completed its prefill."""
    return record.num_decode_tokens + sum(e.kind == "prefill_done" for e in record.events)


def _throughput_row(r) -> tuple:
    """(step, start, end, generated tokens, prompt tokens) of one step."""
    return r.step, r.start, r.start + r.duration, _num_generated(r), r.num_prefill_tokens


_window_rows = per_window(_throughput_row)


def _ms(v: float | None) -> str:
    return "–" if v is None else f"{v * 1000:.0f} ms"


# -- the same charts as plotly Figures (tests, notebooks); the board sends the specs as JSON --
def as_figure(spec: dict) -> go.Figure:
    return go.Figure(spec, _validate=False)


def as_json(spec: dict) -> str:
    """The figure's JSON, ~100x faster than go.Figure(spec).to_json() (no deep copies)."""
    return orjson.dumps({**spec, "config": PLOTLY_CONFIG}).decode()
