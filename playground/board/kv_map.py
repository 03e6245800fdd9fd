"""The KV pool as a map: a cell per block, coloured by who holds it (a pure function of an
EngineSnapshot, like charts.py). Also who holds each block, for the block table view."""

import math

from engine.telemetry import EngineSnapshot
from playground.board.charts import TALL_HEIGHT, _spec, stepped_scale

FREE_COLOUR, CACHED_COLOUR, SHARED_COLOUR = "#eef2f7", "#cbd5e1", "#0f172a"
COPIED_COLOUR = "#f97316"  # a live copy-on-write copy of a fork
MAX_KV_CELLS = 2048  # the block map draws at most this many blocks


def block_holders(snap: EngineSnapshot, total: int) -> list[dict[str, list[int]]]:
    """Per block: request id -> the sequences holding it (beam ids of a beam search, else
    completion indices; a request's one sequence is 0)."""
    holders: list[dict[str, list[int]]] = [{} for _ in range(total)]
    for r in snap.requests:
        tables = r.seq_block_tables or (r.block_table,)
        ids = [beam for beam, _, _ in r.beams] if r.beams else range(len(tables))
        for seq, table in zip(ids, tables, strict=False):
            for b in table:
                if b < total:
                    holders[b].setdefault(r.request_id, []).append(seq)
    return holders


def block_text(b: int, held: dict[str, list[int]], beam_ids: set[str], copy) -> str:
    """A held block's hover text: who holds it, and where a copy-on-write copy came from."""
    names = []
    for rid, seqs in held.items():
        noun = "beam" if rid in beam_ids else "completion"
        if len(seqs) > 1:
            names.append(f"{len(seqs)} {noun}s of {rid}")
        else:
            names.append(f"{rid} beam {seqs[0]}" if rid in beam_ids else rid)
    copied = "" if copy is None else f"copied from block {copy[0]} at step {copy[1]}"
    if len(names) > 1 or len(next(iter(held.values()))) > 1:
        return f"block {b}: shared by {', '.join(names)}" + (f"; {copied}" if copied else "")
    return f"block {b}: {copied} ({names[0]})" if copied else f"block {b}: {names[0]}"


def _legend(num_shared: int, num_copied: int) -> list[dict]:
    """Empty traces: legend entries for the heatmap's colours."""
    return [
        {"type": "scatter", "mode": "markers", "x": [None], "y": [None], "name": name,
         "marker": {"symbol": "square", "size": 10, "color": colour}, "hoverinfo": "skip"}
        for name, colour in (("free", FREE_COLOUR), ("cached (evictable)", CACHED_COLOUR),
                             (f"shared, ref count > 1 ({num_shared})", SHARED_COLOUR),
                             (f"copied on write ({num_copied})", COPIED_COLOUR),
                             ("held: colour of its user", "#60a5fa"))
    ]  # fmt: skip


def kv_block_spec(
    snap: EngineSnapshot, colours: dict[str, str] | None = None, title: str | None = None
) -> dict:
    """The KV pool as a grid: a cell per block, coloured by the request that holds it; a block
    several sequences hold (ref count > 1: beams or completions of one request, or requests
    sharing a cached prefix) is dark, a live copy-on-write copy (a fork's own copy of its
    parent's partly filled last block) is orange."""
    colours = colours or {}
    total = min(snap.kv_blocks_total, MAX_KV_CELLS)
    holders = block_holders(snap, total)
    copies = {b: (src, at) for r in snap.requests for b, src, at in r.copied_blocks}
    beam_ids = {r.request_id for r in snap.requests if r.beam_width > 1}
    cached = set(snap.kv_cached_block_ids)
    palette, z, text = [FREE_COLOUR, CACHED_COLOUR, SHARED_COLOUR, COPIED_COLOUR], [], []
    index, num_shared, num_copied = {}, 0, 0
    for b, held in enumerate(holders):
        if held:
            text.append(block_text(b, held, beam_ids, copies.get(b)))
        if sum(map(len, held.values())) > 1:
            z.append(2)
            num_shared += 1
        elif b in copies and held:
            z.append(3)
            num_copied += 1
        elif held:
            rid = next(iter(held))
            if rid not in index:
                index[rid] = len(palette)
                palette.append(colours.get(rid, "#60a5fa"))
            z.append(index[rid])
        elif b in cached:
            z.append(1)
            text.append(f"block {b}: cached")
        else:
            z.append(0)
            text.append(f"block {b}: free")
    width = max(8, math.ceil(math.sqrt(total * 3)))  # about 3:1 wide
    rows = max(1, math.ceil(total / width))
    pad = rows * width - total
    z = [v + 0.5 for v in z] + [None] * pad  # i + 0.5 sits inside palette[i]'s band
    text += [""] * pad
    trace = {
        "type": "heatmap", "colorscale": stepped_scale(palette), "zmin": 0,
        "zmax": len(palette), "showscale": False,
        "z": [z[i * width : (i + 1) * width] for i in range(rows)],
        "text": [text[i * width : (i + 1) * width] for i in range(rows)],
        "hovertemplate": "%{text}<extra></extra>", "xgap": 1.5, "ygap": 1.5,
    }  # fmt: skip
    legend = _legend(num_shared, num_copied)
    title = title or (
        f"KV blocks: {snap.kv_blocks_used} used, {snap.kv_blocks_cached} cached, "
        f"{snap.kv_blocks_free} free of {snap.kv_blocks_total}"
    )
    height = max(200, min(TALL_HEIGHT, 70 + rows * 14))
    return _spec(title, [trace, *legend], height=height,
                   xaxis={"visible": False, "constrain": "domain"},
                   yaxis={"visible": False, "autorange": "reversed", "scaleanchor": "x"},
                   margin={"l": 8, "r": 8, "t": 40, "b": 8})  # fmt: skip
