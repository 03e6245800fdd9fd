"""The beam tree: a pure chart of one beam search's beams, forks and finished hypotheses.

Drawn as a tree on its side: x is the output token, each beam a lane. A beam's line starts
where it branched off its parent (an elbow down from the parent's lane at that token) and
ends at its node: its length now (live), when it was pruned, or, for a finished hypothesis,
the token that finished it. Pruned beams and outranked hypotheses are grey.
"""

from engine.inspection import BeamNode
from playground.charts import _spec

GREY, GREY_LINE, LINE = "#9ca3af", "#d1d5db", "#64748b"
GREYED = ("pruned", "outranked")
BEAM_STATUS_COLOURS = {
    "live": "#3b82f6", "finished": "#10b981", "stopped": "#f59e0b", "outranked": "#a7f3d0",
    "pruned": GREY,
}  # fmt: skip
BEAM_STATUS_NAMES = {
    "live": "live beam", "finished": "finished (among the k best)", "stopped": "ended early",
    "outranked": "finished, outranked", "pruned": "pruned",
}  # fmt: skip
MAX_LABELLED = 24  # beyond this many nodes only live and finished ones carry a label


def _lanes(nodes: tuple[BeamNode, ...]) -> list[int]:
    """Each node's row, depth first from beam 0 with a beam's children right under it, the
    latest to branch off first: then no elbow crosses another line."""
    children: dict[int, list[int]] = {}
    for i, n in enumerate(nodes):
        if n.parent is not None:
            children.setdefault(n.parent, []).append(i)
    order, stack = [], [i for i, n in enumerate(nodes) if n.parent is None]
    while stack:
        i = stack.pop()
        order.append(i)
        if not _is_hypothesis(nodes[i]):
            kids = children.get(nodes[i].beam, [])
            stack += sorted(kids, key=lambda k: (nodes[k].branch_at, -k))  # latest on top
    lanes = [0] * len(nodes)
    for row, i in enumerate(order):
        lanes[i] = row
    return lanes


def _is_hypothesis(n: BeamNode) -> bool:
    return n.status in ("finished", "outranked")


def _label(n: BeamNode) -> str:
    name = f"hypothesis of beam {n.beam}" if _is_hypothesis(n) else f"beam {n.beam}"
    return f"{name}: {n.num_output_tokens} tokens, {n.cumulative_logprob:.2f}"


def _hover(n: BeamNode) -> str:
    lines = [f"<b>{_label(n)}</b> (cumulative logprob)"]
    if _is_hypothesis(n):
        lines.append(f"finished at step {n.step}, score {n.score:.3f} after the length penalty")
        if n.status == "outranked":
            lines.append("pushed out of the k best by better hypotheses")
    elif n.parent is None:
        lines.append(f"the prompt's sequence; first token at step {n.step}")
    else:
        lines.append(f"forked from beam {n.parent} at step {n.step}, after {n.branch_at} tokens")
    if n.status == "pruned":
        lines.append(f"pruned at step {n.end_step}: its blocks freed")
    elif n.status == "stopped":
        lines.append("ended early (cancelled, timed out or failed)")
    return "<br>".join(lines)


def beam_tree_spec(nodes: tuple[BeamNode, ...], title: str = "Beam tree") -> dict:
    """`nodes` from RequestDetail.beam_tree: the beams (live, ended early or pruned) and the
    hypotheses they finished, as a tree of elbow lines with a marker per node."""
    lanes = _lanes(nodes)
    row_of = {n.beam: lanes[i] for i, n in enumerate(nodes) if not _is_hypothesis(n)}
    lines = {True: ([], []), False: ([], [])}  # greyed? -> (x, y) polylines, None-separated
    for i, n in enumerate(nodes):
        y = lanes[i]
        xs, ys = lines[n.status in GREYED]
        if n.parent is None:
            xs += [0, n.num_output_tokens, None]
            ys += [y, y, None]
        else:
            xs += [n.branch_at, n.branch_at, n.num_output_tokens, None]
            ys += [row_of[n.parent], y, y, None]
    traces = [
        {"type": "scatter", "mode": "lines", "x": xs, "y": ys, "hoverinfo": "skip",
         "line": {"color": GREY_LINE if grey else LINE, "width": 1.5}, "showlegend": False}
        for grey, (xs, ys) in lines.items() if xs
    ]  # fmt: skip
    labelled = len(nodes) <= MAX_LABELLED
    for status, colour in BEAM_STATUS_COLOURS.items():
        picked = [i for i, n in enumerate(nodes) if n.status == status]
        if not picked:
            continue
        show = labelled or status in ("live", "finished")
        traces.append({
            "type": "scatter", "mode": "markers+text" if show else "markers",
            "name": f"{BEAM_STATUS_NAMES[status]} ({len(picked)})",
            "x": [nodes[i].num_output_tokens for i in picked], "y": [lanes[i] for i in picked],
            "text": [_node_text(nodes[i]) for i in picked], "textposition": "middle right",
            "textfont": {"size": 10, "color": GREY if status in GREYED else "#334155"},
            "hovertext": [_hover(nodes[i]) for i in picked], "hoverinfo": "text",
            "marker": {"color": colour, "size": 9, "symbol": _symbol(status),
                       "line": {"color": "#ffffff", "width": 1}},
        })  # fmt: skip
    rows = max(lanes, default=0) + 1
    right = max((n.num_output_tokens for n in nodes), default=1)
    xaxis = {"title": {"text": "output tokens"}, "range": [-0.5, right * 1.25 + 2],
             "zeroline": False}  # fmt: skip
    yaxis = {"visible": False, "autorange": "reversed"}
    height = max(220, min(640, 90 + rows * 18))
    return _spec(title, traces, height=height, xaxis=xaxis, yaxis=yaxis,
                 margin={"l": 12, "r": 12, "t": 56, "b": 40})  # fmt: skip


def _node_text(n: BeamNode) -> str:
    """The label next to a node: its beam id, length, cumulative logprob."""
    mark = "✓" if _is_hypothesis(n) else ""
    return f"{mark}{n.beam} · {n.num_output_tokens} · {n.cumulative_logprob:.2f}"


def _symbol(status: str) -> str:
    return {"finished": "star", "outranked": "star", "pruned": "x"}.get(status, "circle")
