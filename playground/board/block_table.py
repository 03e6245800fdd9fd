"""The block table of one request: its logical KV blocks mapped to physical ones.

A pure function of an EngineSnapshot (the live one or a rewound frame), like charts.py. A
row per sequence of the request (its one sequence, its n completions or its beams), a cell
per logical block with the physical block's number in it. A block another sequence also
holds (a prefix cached from an earlier prompt, or a parent's blocks that forks share) is
marked shared; a fork's own copy of its parent's partly filled last block is marked copied
on write; the rest are the request's own.
"""

from engine.telemetry import EngineSnapshot, RequestState
from playground.board.charts import _spec, stepped_scale
from playground.board.kv_map import COPIED_COLOUR, SHARED_COLOUR, block_holders

BLOCKS_PER_ROW = 16  # logical blocks per row: a long sequence wraps
MAX_ROWS = 12
BLOCK_TABLE_HEIGHT = 300
OWN_COLOUR = "#60a5fa"
KINDS = ("own", "shared", "copied on write")


def pick_request(
    snap: EngineSnapshot, request_id: str | None = None, holders=None
) -> RequestState | None:
    """`request_id`'s state; without one (or one the snapshot no longer has) the live request
    whose table shows most: the most shared and copied blocks, then the latest running.
    `holders`: block_holders of the snapshot, if the caller has them."""
    by_id = {r.request_id: r for r in snap.requests}
    if request_id in by_id:
        return by_id[request_id]
    live = [r for r in snap.requests if r.block_table or r.seq_block_tables]
    if not live:
        return None
    holders = holders or block_holders(snap, snap.kv_blocks_total)
    return max(live, key=lambda r: (_num_marked(r, holders), r.status == "running", r.arrival))


def _tables(r: RequestState) -> list[tuple[str, tuple[int, ...]]]:
    """(row name, block table) per sequence of the request."""
    tables = r.seq_block_tables or (r.block_table,)
    if r.beams:
        return [(f"beam {beam}", t) for (beam, _, _), t in zip(r.beams, tables, strict=False)]
    return [(f"seq {i}" if len(tables) > 1 else "blocks", t) for i, t in enumerate(tables)]


def classify(r: RequestState, holders: list[dict[str, list[int]]]) -> dict[int, str]:
    """Physical block -> its kind in this request's table (see KINDS)."""
    copied = {b for b, _, _ in r.copied_blocks}
    kinds = {}
    for _, table in _tables(r):
        for b in table:
            held = holders[b] if b < len(holders) else {}
            if sum(map(len, held.values())) > 1:
                kinds[b] = "shared"
            elif b in copied:
                kinds[b] = "copied on write"
            else:
                kinds[b] = "own"
    return kinds


def _num_marked(r: RequestState, holders) -> int:
    return sum(kind != "own" for kind in classify(r, holders).values())


def block_table_spec(
    snap: EngineSnapshot, request_id: str | None = None, labels: dict[str, str] | None = None
) -> dict:
    """The heatmap of a request's block table (see the module docstring)."""
    holders = block_holders(snap, snap.kv_blocks_total)
    r = pick_request(snap, request_id, holders)
    if r is None:
        return _spec("Block table: no request holds KV blocks yet", [], height=BLOCK_TABLE_HEIGHT,
                     xaxis={"visible": False}, yaxis={"visible": False})  # fmt: skip
    kinds = classify(r, holders)
    sources = {b: (src, at) for b, src, at in r.copied_blocks}
    z, text, hover, rows = [], [], [], []
    for name, table in _tables(r):
        for start in range(0, max(len(table), 1), BLOCKS_PER_ROW):
            part = table[start : start + BLOCKS_PER_ROW]
            pad = BLOCKS_PER_ROW - len(part)
            rows.append(f"{name} · {start}–{start + BLOCKS_PER_ROW - 1}")
            z.append([KINDS.index(kinds[b]) + 0.5 for b in part] + [None] * pad)
            text.append([str(b) for b in part] + [""] * pad)
            hover.append([_hover(start + i, b, kinds[b], holders[b], sources.get(b))
                          for i, b in enumerate(part)] + [""] * pad)  # fmt: skip
    rows, z, text, hover = rows[:MAX_ROWS], z[:MAX_ROWS], text[:MAX_ROWS], hover[:MAX_ROWS]
    heat = {
        "type": "heatmap", "z": z, "text": text, "customdata": hover, "y": rows,
        "x": list(range(BLOCKS_PER_ROW)), "texttemplate": "%{text}", "textfont": {"size": 10},
        "colorscale": stepped_scale([OWN_COLOUR, SHARED_COLOUR, COPIED_COLOUR]),
        "zmin": 0, "zmax": len(KINDS), "showscale": False, "xgap": 2, "ygap": 2,
        "hovertemplate": "%{customdata}<extra></extra>",
    }  # fmt: skip
    counts = {k: sum(v == k for v in kinds.values()) for k in KINDS}
    legend = [
        {"type": "scatter", "mode": "markers", "x": [None], "y": [None], "hoverinfo": "skip",
         "name": f"{kind} ({counts[kind]})",
         "marker": {"symbol": "square", "size": 10, "color": colour}}
        for kind, colour in zip(KINDS, (OWN_COLOUR, SHARED_COLOUR, COPIED_COLOUR), strict=True)
    ]  # fmt: skip
    who = (labels or {}).get(r.request_id, r.request_id)
    cached = r.num_cached_tokens // snap.block_size if snap.block_size else 0
    sub = f"{len(kinds)} physical blocks, {cached} from the prefix cache"
    return _spec(
        f"Block table of {who} <span style='font-size:11px;color:#64748b'>{sub}</span>",
        [heat, *legend], height=BLOCK_TABLE_HEIGHT,
        xaxis={"title": {"text": "logical block (within the row)"}, "dtick": 1,
               "range": [-0.5, BLOCKS_PER_ROW - 0.5], "autorange": False, "showgrid": False},
        yaxis={"autorange": "reversed", "type": "category", "tickfont": {"size": 9},
               "showgrid": False},
    )  # fmt: skip


def _hover(logical: int, b: int, kind: str, held: dict[str, list[int]], source) -> str:
    who = ", ".join(f"{rid} ×{len(seqs)}" if len(seqs) > 1 else rid for rid, seqs in held.items())
    line = f"logical {logical} → physical block {b}: {kind}"
    if source is not None:
        line += f" (from block {source[0]} at step {source[1]})"
    return f"{line}<br>held by {who}" if kind == "shared" else line
