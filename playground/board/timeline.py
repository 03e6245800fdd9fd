"""The request timeline: one row per request (waiting, prefill, decode on one time axis), its
preemptions and the time they cost, the tick of its stop reason. A pure function of an
EngineSnapshot, like charts.py.

What preemption cost a request is written right of the plot, on its row, short ("+1.5 s ⟲1":
the time lost, the times preempted), the whole sentence in the label's hover. A chart whose
rows are too thin for a label (many requests on a short screen) keeps the hovers only, so the
labels never overlap each other and never leave the chart.
"""

from engine.telemetry import EngineSnapshot
from playground.board.charts import (
    PHASE_COLOURS,
    PREEMPT_COLOUR,
    SHORT_HEIGHT,
    STOP_COLOURS,
    TALL_HEIGHT,
    _spec,
)
from playground.teaching.why import cost_tag, state_cost

LOST_COLOUR = "rgba(239, 68, 68, 0.35)"  # the time a preemption cost, over its request's bar
MAX_TIMELINE_REQUESTS = 24
COST_FONT_PX = 10
COST_ROW_PX = 15  # a cost label's height at COST_FONT_PX: the thinnest row that holds one
COST_COLUMN_PX = 76  # the right margin: a label as long as "+999.9 s ⟲99" at COST_FONT_PX
# The key is the title's subtitle, not a legend: a legend wraps into more lines the narrower
# the chart, which would leave the rows a height no one can know here.
MARGIN = {"l": 48, "r": COST_COLUMN_PX, "t": 56, "b": 40}
KEY = "  ".join(
    f"<span style='color:{colour}'>{mark}</span> {name}"
    for mark, colour, name in (
        *(("■", c, name) for name, c in PHASE_COLOURS.items()),
        ("✕", PREEMPT_COLOUR, "preempted"),
        ("□", PREEMPT_COLOUR, "time lost"),
    )
)


def _timeline_rows(reqs, labels: dict[str, str], now: float, t0: float):
    """The timeline's bars, ends and preemption costs, one row per request, in seconds since t0."""
    phases = {k: {"y": [], "base": [], "x": []} for k in PHASE_COLOURS}
    ends = {"x": [], "y": [], "colour": [], "text": []}
    lost = {"y": [], "base": [], "x": [], "text": []}
    costs = []  # (row, short label, the whole sentence)
    rows = {}
    for r in reqs:
        row = rows[r.request_id] = labels.get(r.request_id, r.request_id)
        end = r.finished or now
        if cost := state_cost(r):
            for a, b in r.preempted_spans:
                lost["y"].append(row)
                lost["base"].append(round(a - t0, 3))
                lost["x"].append(round(max(b - a, 0.0), 3))
                lost["text"].append(cost)
            costs.append((row, cost_tag(r), f"⟲ {cost}"))
        spans = {
            "waiting": (r.arrival, r.first_scheduled or end),
            "prefill": (r.first_scheduled, r.first_token or end) if r.first_scheduled else None,
            "decode": (r.first_token, end) if r.first_token else None,
        }
        for name, span in spans.items():
            if span and span[1] > span[0]:
                phases[name]["y"].append(row)
                phases[name]["base"].append(round(span[0] - t0, 3))
                phases[name]["x"].append(round(span[1] - span[0], 3))
        if r.finished and r.stop_reason:
            ends["x"].append(round(r.finished - t0, 3))
            ends["y"].append(row)
            ends["colour"].append(STOP_COLOURS.get(r.stop_reason, "#64748b"))
            ends["text"].append(r.stop_reason)
    return phases, ends, lost, costs, rows


def labels_fit(num_rows: int, height: int) -> bool:
    """Whether `num_rows` rows of a timeline `height` px tall each hold a cost label."""
    plot = height - MARGIN["t"] - MARGIN["b"]
    return num_rows * COST_ROW_PX <= plot


def _cost_labels(costs: list[tuple[str, str, str]], num_rows: int) -> dict:
    """The layout's cost labels, right of the plot, one a row; `meta.short` is the layout on a
    short screen (assets/charts.js), without them when its rows are too thin."""
    notes = [
        {"x": 1, "xref": "paper", "xanchor": "left", "xshift": 4, "y": row, "text": tag,
         "hovertext": sentence, "showarrow": False,
         "font": {"size": COST_FONT_PX, "color": PREEMPT_COLOUR}}
        for row, tag, sentence in costs
    ]  # fmt: skip
    layout = {"annotations": notes if labels_fit(num_rows, TALL_HEIGHT) else []}
    if layout["annotations"] and not labels_fit(num_rows, SHORT_HEIGHT):
        layout["meta"] = {"short": {"annotations": []}}
    return layout


def timeline_spec(
    snap: EngineSnapshot, labels: dict[str, str] | None = None, title: str = "Request timeline"
) -> dict:
    """One row per request: waiting, prefill, decode bars; preemptions and ends marked."""
    labels = labels or {}
    reqs = sorted(snap.requests, key=lambda r: r.arrival)[-MAX_TIMELINE_REQUESTS:]
    now = snap.steps[-1].start + snap.steps[-1].duration if snap.steps else 0.0
    now = max([now] + [t for r in reqs for t in (r.arrival, r.first_token, r.finished) if t])
    t0 = min((r.arrival for r in reqs), default=now)
    phases, ends, lost, costs, rows = _timeline_rows(reqs, labels, now, t0)
    traces = [
        {"type": "bar", "orientation": "h", "name": name, "marker": {"color": PHASE_COLOURS[name]},
         "hovertemplate": f"{name} %{{x:.2f}} s<extra>%{{y}}</extra>", **v}
        for name, v in phases.items()
    ]  # fmt: skip
    traces.append(
        {"type": "bar", "orientation": "h", "name": "lost to preemption",
         "marker": {"color": LOST_COLOUR, "line": {"color": PREEMPT_COLOUR, "width": 1}},
         "hovertemplate": "%{text}<extra>%{y}</extra>", "textposition": "none", **lost}
    )  # fmt: skip
    pre = [(round(s.start - t0, 3), rows[e.request_id]) for s in snap.steps for e in s.events
           if e.kind == "preempted" and e.request_id in rows and s.start >= t0]  # fmt: skip
    traces.append(
        {"type": "scatter", "mode": "markers", "name": "preempted",
         "x": [p[0] for p in pre], "y": [p[1] for p in pre],
         "marker": {"symbol": "x-thin", "size": 11, "line": {"width": 2.5, "color": PREEMPT_COLOUR},
                    "color": PREEMPT_COLOUR}, "hovertemplate": "preempted at %{x:.2f} s"}
    )  # fmt: skip
    traces.append(
        {"type": "scatter", "mode": "markers", "name": "finished", "x": ends["x"], "y": ends["y"],
         "text": ends["text"], "marker": {"symbol": "line-ns", "size": 12,
         "line": {"width": 3, "color": ends["colour"]}}, "hovertemplate": "%{text}",
         "showlegend": False}
    )  # fmt: skip
    spec = _spec(title, traces, height=TALL_HEIGHT, barmode="overlay", bargap=0.25,
                 showlegend=False, margin=MARGIN, **_cost_labels(costs, len(rows)),
                 xaxis={"title": {"text": "seconds since the first request shown"},
                        "range": [0, max(round(now - t0, 3), 0.1)], "autorange": False},
                 yaxis={"autorange": "reversed", "type": "category", "tickfont": {"size": 9}},
                 )  # fmt: skip
    spec["layout"]["title"]["subtitle"] = {"text": KEY, "font": {"size": 10, "color": "#475569"}}
    return spec
