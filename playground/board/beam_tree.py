"""The beam tree: a pure chart of one beam search's beams, forks and finished hypotheses.

Drawn as a tree on its side: x is the output token, each beam a lane. A beam's line starts
where it branched off its parent (an elbow down from the parent's lane at that token) and
ends at its node: its length now (live), when it was pruned, or, for a finished hypothesis,
the token that finished it. Pruned beams and outranked hypotheses are grey, and so are the
lines that lead to nothing live or kept: the paths to the live beams and to the k best
hypotheses stand out dark.
"""

from engine.inspection import BeamNode
from playground.board.charts import _spec

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


def _children(nodes: tuple[BeamNode, ...]) -> dict[int, list[int]]:
    """beam id -> the nodes that hang from it (its forks and its hypotheses)."""
    children: dict[int, list[int]] = {}
    for i, n in enumerate(nodes):
        if n.parent is not None:
            children.setdefault(n.parent, []).append(i)
    return children


def _depth_first(nodes: tuple[BeamNode, ...], children: dict[int, list[int]]) -> list[int]:
    """Node indices depth first from beam 0, a beam's children right after it, the latest to
    branch off first: drawn in this order, top to bottom, no elbow crosses another line."""
    order, stack = [], [i for i, n in enumerate(nodes) if n.parent is None]
    while stack:
        i = stack.pop()
        order.append(i)
        if not _is_hypothesis(nodes[i]):
            kids = children.get(nodes[i].beam, [])
            stack += sorted(kids, key=lambda k: (nodes[k].branch_at, -k))  # latest on top
    return order


def _lanes(nodes: tuple[BeamNode, ...]) -> list[int]:
    """Each node's row."""
    lanes = [0] * len(nodes)
    for row, i in enumerate(_depth_first(nodes, _children(nodes))):
        lanes[i] = row
    return lanes


def _reach(nodes: tuple[BeamNode, ...]) -> list[int | None]:
    """Per node, the output token up to which its line leads on to a live beam or a kept
    hypothesis (the winning paths, drawn dark); None where it leads to none."""
    children = _children(nodes)
    reach: list[int | None] = [None] * len(nodes)
    for i in reversed(_depth_first(nodes, children)):  # children before their parent
        n = nodes[i]
        if n.status not in GREYED:
            reach[i] = n.num_output_tokens
        elif not _is_hypothesis(n):
            on = [nodes[k].branch_at for k in children.get(n.beam, []) if reach[k] is not None]
            reach[i] = max(on, default=None)
    return reach


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
    lanes, reach = _lanes(nodes), _reach(nodes)
    row_of = {n.beam: lanes[i] for i, n in enumerate(nodes) if not _is_hypothesis(n)}
    lines = {LINE: ([], []), GREY_LINE: ([], [])}  # colour -> (x, y) polylines, None-separated
    for i, n in enumerate(nodes):
        y, start, end = lanes[i], n.branch_at, n.num_output_tokens
        elbow = ([], []) if n.parent is None else ([start], [row_of[n.parent]])
        if reach[i] is None:
            _line(lines[GREY_LINE], [*elbow[0], start, end], [*elbow[1], y, y])
            continue
        _line(lines[LINE], [*elbow[0], start, reach[i]], [*elbow[1], y, y])
        if reach[i] < end:  # its own tail past the last fork that goes on
            _line(lines[GREY_LINE], [reach[i], end], [y, y])
    traces = [
        {"type": "scatter", "mode": "lines", "x": xs, "y": ys, "hoverinfo": "skip",
         "line": {"color": colour, "width": 2 if colour == LINE else 1.5}, "showlegend": False}
        for colour, (xs, ys) in reversed(lines.items()) if xs
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


def _line(into: tuple[list, list], xs: list, ys: list) -> None:
    into[0].extend([*xs, None])
    into[1].extend([*ys, None])


def _node_text(n: BeamNode) -> str:
    """The label next to a node: its beam id, length, cumulative logprob."""
    mark = "✓" if _is_hypothesis(n) else ""
    return f"{mark}{n.beam} · {n.num_output_tokens} · {n.cumulative_logprob:.2f}"


def _symbol(status: str) -> str:
    return {"finished": "star", "outranked": "star", "pruned": "x"}.get(status, "circle")
