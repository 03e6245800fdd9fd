"""Pure chart functions for a remote lane: a RemoteSnapshot in, a plotly figure dict out.

They draw what the server exports at `/metrics`, scrape by scrape, against seconds since the
lane started; where the in-process board draws something a server does not export (its
exact batches, its block map), the chart says so in its title instead of guessing.
"""

from playground.board.charts import PREEMPT_COLOUR, STATUS_COLOURS, _spec
from playground.remote.engine import RemoteSnapshot
from playground.remote.prometheus import finished_grown, increments

FINISH_COLOURS = {
    "stop": "#10b981", "length": "#3b82f6", "abort": "#9ca3af", "error": "#ef4444",
    "repetition": "#a855f7",
}  # fmt: skip
WAITING_COLOURS = {"capacity": "#f59e0b", "deferred": "#fcd34d"}


def _title(title: str, note: str) -> str:
    return f"{title}<br><span style='font-size:10px;color:#64748b'>{note}</span>"


def _x(snap: RemoteSnapshot) -> list[float]:
    return [round(s.t - snap.started, 2) for s in snap.samples]


def _layout(**extra) -> dict:
    base = {"xaxis": {"title": {"text": "seconds since the preset started"}},
            "margin": {"l": 48, "r": 12, "t": 72, "b": 36}, "hovermode": "x unified",
            "height": 290}  # fmt: skip
    base.update(extra)
    return base


def _empty(snap: RemoteSnapshot, field_name: str, metric: str) -> str | None:
    """Why a chart has nothing to draw: no scrape yet, or the series is not exported."""
    if not snap.samples:
        return "no scrape of /metrics yet"
    if all(getattr(s, field_name) is None for s in snap.samples):
        return f"this server does not export {metric}"
    return None


def _rate(snap: RemoteSnapshot, series: str) -> list[float | None]:
    """Per scrape, the counter's growth per second since the scrape before."""
    grew, out = increments(snap.samples, series), []
    for i, g in enumerate(grew):
        dt = snap.samples[i].t - snap.samples[i - 1].t if i else 0.0
        out.append(round(g / dt, 2) if g is not None and dt > 0 else None)
    return out


def queue_spec(snap: RemoteSnapshot, title: str = "Queues on the server") -> dict:
    """vLLM's running and waiting gauges (waiting split by reason where exported), stacked."""
    x, s = _x(snap), snap.samples
    series = [("running", [v.running for v in s], STATUS_COLOURS["running"])]
    reasons = sorted({r for v in s for r in v.waiting_by_reason})
    if reasons:
        colour = WAITING_COLOURS.get
        series += [(f"waiting: {r}", [v.waiting_by_reason.get(r) for v in s],
                    colour(r, STATUS_COLOURS["waiting"])) for r in reasons]  # fmt: skip
    else:
        series.append(("waiting", [v.waiting for v in s], STATUS_COLOURS["waiting"]))
    traces = [
        {"type": "scatter", "mode": "lines", "name": name, "x": x, "y": y, "stackgroup": "q",
         "line": {"width": 0.5, "color": colour, "shape": "hv"}, "hovertemplate": "%{y}"}
        for name, y, colour in series
    ]  # fmt: skip
    note = (
        _empty(snap, "running", "vllm:num_requests_running")
        or "vllm:num_requests_running / _waiting, every scrape"
    )
    return _spec(_title(title, note), traces, **_layout(yaxis={"title": {"text": "requests"},
                 "rangemode": "tozero"}))  # fmt: skip


def iteration_spec(snap: RemoteSnapshot, title: str = "Tokens per engine step") -> dict:
    """Mean tokens per engine step between two scrapes, from vllm:iteration_tokens_total."""
    steps = increments(snap.samples, "iterations")
    tokens = increments(snap.samples, "iteration_tokens")
    mean = [round(t / n, 1) if n and t is not None else None for t, n in zip(tokens, steps,
            strict=True)]  # fmt: skip
    traces = [
        {"type": "bar", "name": "mean tokens per step", "x": _x(snap), "y": mean,
         "customdata": steps, "marker": {"color": "#8b5cf6"},
         "hovertemplate": "%{y} tokens per step over %{customdata} steps<extra></extra>"}
    ]  # fmt: skip
    note = _empty(snap, "iterations", "vllm:iteration_tokens_total") or (
        "the server does not export each step's batch: mean of its tokens-per-step histogram"
    )
    return _spec(_title(title, note), traces, showlegend=False,
                 **_layout(yaxis={"title": {"text": "tokens"}, "rangemode": "tozero"}))  # fmt: skip


def kv_spec(snap: RemoteSnapshot, title: str = "KV cache on the server") -> dict:
    """KV cache usage, prefix-cache hit rate between scrapes, and preemptions."""
    x, s = _x(snap), snap.samples
    usage = [None if v.kv_usage is None else round(v.kv_usage * 100, 1) for v in s]
    queries, hits = increments(s, "prefix_queries"), increments(s, "prefix_hits")
    rate = [round(100 * h / q, 1) if q and h is not None else None for h, q in zip(hits, queries,
            strict=True)]  # fmt: skip
    pre = increments(s, "preemptions")
    marks = [(xi, u or 0, int(p)) for xi, u, p in zip(x, usage, pre, strict=True) if p]
    traces = [
        {"type": "scatter", "mode": "lines", "name": "KV cache used %", "x": x, "y": usage,
         "line": {"color": STATUS_COLOURS["running"], "width": 2, "shape": "hv"},
         "fill": "tozeroy"},
        {"type": "scatter", "mode": "markers", "name": "prefix-cache hits %", "x": x, "y": rate,
         "marker": {"color": "#10b981", "size": 5}},
        {"type": "scatter", "mode": "markers", "name": "preempted", "x": [m[0] for m in marks],
         "y": [m[1] for m in marks], "text": [f"{m[2]} preempted" for m in marks],
         "marker": {"symbol": "x-thin", "size": 11, "color": PREEMPT_COLOUR,
                    "line": {"width": 2.5, "color": PREEMPT_COLOUR}}, "hovertemplate": "%{text}"},
    ]  # fmt: skip
    note = _empty(snap, "kv_usage", "vllm:kv_cache_usage_perc") or (
        "the server says how full its KV cache is, not which request holds which block: "
        "no block map"
    )
    return _spec(_title(title, note), traces,
                 **_layout(yaxis={"title": {"text": "%"}, "range": [0, 105]}))  # fmt: skip


def stops_spec(snap: RemoteSnapshot, title: str = "Why requests stopped") -> dict:
    """Finish reasons as this board's streams gave them, next to the server's own count of
    requests finished since the lane started (vllm:request_success_total)."""
    server = finished_grown(snap.samples)
    mine = snap.finish_reasons
    reasons = list(FINISH_COLOURS) + sorted((set(server) | set(mine)) - set(FINISH_COLOURS))
    traces = [
        {"type": "bar", "name": name, "x": reasons, "y": [counts.get(r, 0) for r in reasons],
         "marker": {"color": colour}, "text": [int(counts.get(r, 0)) or "" for r in reasons],
         "textposition": "outside", "hovertemplate": f"{name} %{{x}}: %{{y}}<extra></extra>"}
        for name, counts, colour in (("this board's streams", mine, "#6366f1"),
                                     ("server: vllm:request_success", server, "#94a3b8"))
    ]  # fmt: skip
    top = max([*mine.values(), *server.values(), 0])
    note = "the server counts all its clients; vLLM leaves out cancelled ones"
    return _spec(_title(title, note), traces, height=290, barmode="group",
                 yaxis={"title": {"text": "requests"}, "range": [0, max(1, top) * 1.25]},
                 margin={"l": 48, "r": 12, "t": 72, "b": 36})  # fmt: skip


def throughput_spec(snap: RemoteSnapshot, title: str = "Tokens per second on the server") -> dict:
    """Generated and prompt tokens per second between scrapes, from the server's counters."""
    x = _x(snap)
    traces = [
        {"type": "scatter", "mode": "lines", "name": "generated", "x": x,
         "y": _rate(snap, "generation_tokens"), "line": {"color": "#10b981", "width": 2}},
        {"type": "scatter", "mode": "lines", "name": "prompt", "x": x,
         "y": _rate(snap, "prompt_tokens"), "line": {"color": "#8b5cf6", "width": 1,
         "dash": "dot"}},
    ]  # fmt: skip
    note = (
        _empty(snap, "generation_tokens", "vllm:generation_tokens")
        or "vllm:generation_tokens / prompt_tokens, per s"
    )
    return _spec(
        _title(title, note),
        traces,
        **_layout(yaxis={"title": {"text": "tokens / s"}, "rangemode": "tozero"}),
    )
