"""Compare mode's charts: each lane's queues, tokens per step and batch slots on one shared
x axis, the engine-busy seconds (the clock the scoreboard uses), so the lane that takes
longer for the same workload visibly ends later. Pure functions of a BoardState."""

from itertools import accumulate

from playground.board import cards, charts, slots
from playground.board.state import BoardState

COMPARE_CHARTS = {  # key prefix -> (title, spec of one lane's snapshot)
    "cmp_queue": ("queues", lambda s, labels, colours, title: charts.queue_spec(s, title)),
    "cmp_batch": ("tokens per step", lambda s, labels, colours, title: charts.batch_spec(s, title)),
    "cmp_slots": ("batch slots", slots.slots_spec),
}
COMPARE_KEYS = tuple(f"{key}{i}" for key in COMPARE_CHARTS for i in (0, 1))


def busy_clock(state: BoardState, lane: str) -> dict[int, float]:
    """Step -> the lane's engine-busy seconds at the end of that step (steps that did work
    count their duration; the window's start is the lane's busy time before it)."""
    steps, busy_s = state.snapshots[lane].steps, state.stats[lane].busy_s
    worked = [r.duration if r.num_tokens else 0.0 for r in steps]
    offset = max(0.0, busy_s - sum(worked))
    return {r.step: round(offset + t, 4) for r, t in zip(steps, accumulate(worked), strict=True)}


def _on_clock(spec: dict, clock: dict[int, float], x_range: list[float]) -> dict:
    """`spec` with its step x values as busy seconds, on the shared range."""
    for trace in spec["data"]:
        if trace.get("x") and trace["x"][0] is not None:
            trace["x"] = [clock.get(step) for step in trace["x"]]
    spec["layout"]["xaxis"] = {"title": {"text": "engine-busy seconds"}, "range": x_range,
                               "autorange": False}  # fmt: skip
    return spec


def compare_specs(state: BoardState) -> dict[str, dict]:
    """Every compare chart of both lanes, on one x axis."""
    lanes = state.lanes[:2]
    clocks = [busy_clock(state, lane) for lane in lanes]
    end = max((max(c.values(), default=0.0) for c in clocks), default=0.0)
    x_range = [0.0, round(max(end, 0.1) * 1.02, 3)]
    labels, colours = cards.request_labels(state), cards.request_colours(state)
    specs = {}
    for i, (lane, clock) in enumerate(zip(lanes, clocks, strict=True)):
        snap = state.snapshots[lane]
        for key, (title, spec) in COMPARE_CHARTS.items():
            figure = spec(snap, labels, colours, f"{lane}: {title}")
            specs[f"{key}{i}"] = _on_clock(figure, clock, x_range)
    return specs
