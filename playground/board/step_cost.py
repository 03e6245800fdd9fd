"""Step time against batch size, measured: why batching decode is nearly free, and where it
stops being free. A pure function of an EngineSnapshot, like charts.py: every point is one
step the engine ran (its StepRecord.duration), none is modelled."""

import statistics

from engine.telemetry import EngineSnapshot, StepRecord
from playground.board.charts import PHASE_COLOURS, _spec
from playground.board.per_step import per_window

MIXED_COLOUR = "rgba(139, 92, 246, 0.45)"  # steps that also prefilled: not pure decode
MEDIAN_COLOUR = "#0f172a"
HOVER = ("step %{customdata[0]}: %{x} sequences, %{customdata[1]} prefill + "
         "%{customdata[2]} decode tokens: %{y:.1f} ms<extra></extra>")  # fmt: skip


def _point(r: StepRecord) -> tuple | None:
    """(trace, batch size, ms, hover data, seconds) of a step that did work; the hover's
    words are plotly's (customdata), so no string is built per step."""
    if not r.num_tokens:
        return None
    kind = "with prefill" if r.num_prefill_tokens else "decode"
    data = (r.step, r.num_prefill_tokens, r.num_decode_tokens)
    return kind, r.num_seqs, round(r.duration * 1000, 2), data, r.duration


_window_points = per_window(_point)  # a window's points, only new steps computed


def _points(snap: EngineSnapshot) -> dict[str, list[tuple]]:
    """The points of the steps that did work, per trace, oldest first."""
    points = [p for p in _window_points(snap.steps) if p is not None]
    return {kind: [p for p in points if p[0] == kind] for kind in ("decode", "with prefill")}


def decode_medians(snap: EngineSnapshot, points: dict | None = None) -> dict[int, float]:
    """Batch size -> median seconds of the decode-only steps of that size (sorted by size)."""
    by_size: dict[int, list[float]] = {}
    for p in (points or _points(snap))["decode"]:
        by_size.setdefault(p[1], []).append(p[4])
    return {n: statistics.median(by_size[n]) for n in sorted(by_size)}


def _subtitle(medians: dict[int, float]) -> str:
    """'batch 1 → 8: 8.0× the tokens in 1.4× the time' (smallest against largest size)."""
    if len(medians) < 2:
        return "needs decode steps of two batch sizes"
    (lo, t_lo), (hi, t_hi) = next(iter(medians.items())), list(medians.items())[-1]
    return f"batch {lo} → {hi}: {hi / lo:.1f}× the tokens in {t_hi / t_lo:.1f}× the time"


def step_cost_spec(snap: EngineSnapshot, title: str = "Step time against batch size") -> dict:
    """Every step kept as a dot (x: sequences in the batch, y: ms); decode-only steps blue,
    steps that also prefilled purple, the median decode step per batch size as a line."""
    points = _points(snap)
    medians = decode_medians(snap, points)
    colours = {"decode": PHASE_COLOURS["decode"], "with prefill": MIXED_COLOUR}
    traces = [
        {"type": "scatter", "mode": "markers", "name": f"{name} step",
         "x": [p[1] for p in kept], "y": [p[2] for p in kept],
         "customdata": [p[3] for p in kept],
         "marker": {"color": colours[name], "size": 5, "opacity": 0.7}, "hovertemplate": HOVER}
        for name, kept in points.items()
    ]  # fmt: skip
    traces.append(
        {"type": "scatter", "mode": "lines+markers", "name": "median decode step",
         "x": list(medians), "y": [round(v * 1000, 2) for v in medians.values()],
         "line": {"color": MEDIAN_COLOUR, "width": 2}, "marker": {"size": 6},
         "hovertemplate": "batch %{x}: median %{y:.1f} ms<extra></extra>"}
    )  # fmt: skip
    top = max((p[1] for kept in points.values() for p in kept), default=1)
    decode_ms = sorted(traces[0]["y"])
    yaxis = {"title": {"text": "step time (ms)"}, "rangemode": "tozero", "autorange": True}
    if decode_ms:  # the decode steps set the scale; a slow prefill step may fall above it
        yaxis |= {"range": [0, decode_ms[int(len(decode_ms) * 0.95)] * 1.5], "autorange": False}
    return _spec(
        f"{title} <span style='font-size:11px;color:#64748b'>{_subtitle(medians)}</span>",
        traces,
        xaxis={"title": {"text": "sequences in the step's batch"}, "range": [0, top + 1],
               "autorange": False, "dtick": max(1, (top + 1) // 8)},
        yaxis=yaxis,
    )  # fmt: skip
