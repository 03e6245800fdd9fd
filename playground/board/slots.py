"""Batch slots x steps: which request sat in each seat of the batch, step by step.

A pure function of an EngineSnapshot, like charts.py. The engine logs, per step, the
prompts it prefilled (prefill_chunk / prefill_done) and who left (finished, preempted,
aborted); every request between its prefill's end and its leaving decodes in each step
(the scheduler schedules running decodes first). So the batch of every step kept is
rebuilt from the step log, and a request keeps one slot from the step it joins to the step
it leaves: static batching's finished requests leave idle slots until the whole batch is
done, continuous batching refills them at once.
"""

from engine.telemetry import EngineSnapshot, StepRecord
from playground.board.charts import _spec, step_axis, stepped_scale
from playground.board.per_step import per_step

MAX_SLOT_STEPS = 64  # columns drawn: the latest steps
MAX_SLOTS = 32  # rows drawn at most
IDLE_COLOUR = "#f1f5f9"
DEFAULT_COLOUR = "#60a5fa"
PREFILL_MARK = "#0f172a"
SLOTS_HEIGHT = 300
LEAVES = ("finished", "preempted", "aborted")


def batches(
    snap: EngineSnapshot, last: int = MAX_SLOT_STEPS
) -> list[tuple[StepRecord, list[str], list[str]]]:
    """Per step of the `last` kept: (record, requests it prefilled, requests it decoded)."""
    steps = snap.steps[-last:]
    start = steps[0].start if steps else 0.0
    decoding = [  # decoding when the first of these steps began: prefilled before, still live
        r.request_id for r in sorted(snap.requests, key=lambda r: r.first_token or 0.0)
        if r.first_token is not None and r.first_token < start
        and (r.finished is None or r.finished >= start)
        and not any(a <= start < b for a, b in r.preempted_spans)
    ]  # fmt: skip
    out = []
    for record in steps:
        prefill, skipped, done, joined = _moves(record)
        decode = [rid for rid in decoding if rid not in skipped]
        out.append((record, prefill, decode))
        if done or joined:
            decoding = list(dict.fromkeys(rid for rid in [*decoding, *joined] if rid not in done))
    return out


@per_step
def _moves(record: StepRecord) -> tuple[list[str], set[str], set[str], list[str]]:
    """What a step's events say about its batch: (the requests it prefilled, those that did
    not decode in it (prefilled, preempted or aborted), those that left, those that joined)."""
    prefill = list(dict.fromkeys(e.request_id for e in record.events
                                 if e.kind in ("prefill_chunk", "prefill_done")))  # fmt: skip
    skipped = {e.request_id for e in record.events if e.kind in ("preempted", "aborted")}
    done = {e.request_id for e in record.events if e.kind in LEAVES}
    joined = [e.request_id for e in record.events if e.kind == "prefill_done"]
    return prefill, skipped | set(prefill), done, joined


def slot_grid(snap: EngineSnapshot) -> tuple[list[int], list[list[tuple[str, str] | None]]]:
    """(steps, grid): grid[slot][column] is (request id, "prefill" | "decode") or None (idle).
    A request takes the lowest free slot when it joins the batch and holds it until it leaves
    (a step it is left out of, e.g. a chunked prompt waiting for budget, stays idle)."""
    seat: dict[str, int] = {}
    columns = []
    for record, prefill, decode in batches(snap):
        cells = {rid: "decode" for rid in decode} | {rid: "prefill" for rid in prefill}
        for rid in cells:
            if rid not in seat:
                taken = set(seat.values())
                seat[rid] = next(i for i in range(len(taken) + 1) if i not in taken)
        column = {seat[rid]: (rid, phase) for rid, phase in cells.items()}
        columns.append((record.step, column))
        for e in record.events:
            if e.kind in LEAVES:
                seat.pop(e.request_id, None)
    rows = min(MAX_SLOTS, 1 + max((s for _, c in columns for s in c), default=0))
    grid = [[c.get(slot) for _, c in columns] for slot in range(rows)]
    return [step for step, _ in columns], grid


def slots_spec(
    snap: EngineSnapshot,
    labels: dict[str, str] | None = None,
    colours: dict[str, str] | None = None,
    title: str = "Batch slots x steps",
) -> dict:
    """A heatmap: a row per batch slot, a column per step, a cell coloured by the request in
    it (a dot on a prefill step), idle cells light grey."""
    labels, colours = labels or {}, colours or {}
    x, grid = slot_grid(snap)
    palette, index, names = [IDLE_COLOUR], {}, {None: "idle"}
    z, text, marks = [], [], {"x": [], "y": []}
    for slot, row in enumerate(grid):
        z.append([])
        text.append([])
        for step, cell in zip(x, row, strict=True):
            if cell is None:
                z[-1].append(0.5)
                text[-1].append("idle")
                continue
            rid, phase = cell
            if rid not in index:
                index[rid] = len(palette)
                palette.append(colours.get(rid, DEFAULT_COLOUR))
                names[rid] = labels.get(rid, rid)
            z[-1].append(index[rid] + 0.5)
            text[-1].append(f"{names[rid]} {phase}")
            if phase == "prefill":
                marks["x"].append(step)
                marks["y"].append(slot)
    idle = sum(cell is None for row in grid for cell in row)
    trace = {
        "type": "heatmap", "x": x, "y": list(range(len(grid))), "z": z, "text": text,
        "colorscale": stepped_scale(palette), "zmin": 0, "zmax": len(palette),
        "showscale": False, "xgap": 1, "ygap": 1,
        "hovertemplate": "slot %{y}, step %{x}: %{text}<extra></extra>",
    }  # fmt: skip
    prefill = {
        "type": "scatter", "mode": "markers", "name": "prefill step", **marks,
        "marker": {"symbol": "circle", "size": 5, "color": PREFILL_MARK}, "hoverinfo": "skip",
    }  # fmt: skip
    idle_key = {"type": "scatter", "mode": "markers", "x": [None], "y": [None],
                "name": "idle slot", "hoverinfo": "skip",
                "marker": {"symbol": "square", "size": 10, "color": IDLE_COLOUR,
                           "line": {"color": "#cbd5e1", "width": 1}}}  # fmt: skip
    cells = len(x) * len(grid)
    sub = f"{idle} of {cells} slot-steps idle" if cells else "no steps yet"
    return _spec(
        f"{title} <span style='font-size:11px;color:#64748b'>{sub}</span>",
        [trace, prefill, idle_key], height=SLOTS_HEIGHT, xaxis=step_axis(x),
        yaxis={"title": {"text": "batch slot"}, "autorange": "reversed", "dtick": 1,
               "zeroline": False, "showgrid": False},
    )  # fmt: skip
