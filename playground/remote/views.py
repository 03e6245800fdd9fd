"""The board's text and charts when its lanes are remote servers: stat tiles, the banner,
the log, the inspector's note and the scoreboard (HTML), and every chart's spec.

Pure functions of a BoardState whose snapshots are RemoteSnapshots (`is_remote`). Numbers
measured on this side (TTFT, TPOT, e2e, tokens, finish reasons) and numbers the server
exports (its queues, KV cache, preemptions, tokens per step) are labelled as such.
"""

import time

from playground.board import cards, charts, timeline
from playground.board.state import BoardState
from playground.remote import charts as remote_charts
from playground.remote.engine import RemoteSnapshot
from playground.remote.prometheus import grown

RECENT_ERRORS_S = 15.0  # the banner counts request errors this recent
CONNECTING_GRACE_S = 3.0  # a first scrape slower than this shows the banner
TPUT_WINDOW_S = 5.0

INTRO = """
<div class="pg-hero"><h1>Continuous batching, live, on a remote server</h1>
<p>Simulated users and <b>you</b> send their requests to an OpenAI-compatible server (vLLM,
say) through its streaming API. The cards and latencies are measured here from each stream;
the queues, the KV cache and the tokens per step come from the server's own Prometheus
<code>/metrics</code>, scraped twice a second. What a server does not export (its block map,
each step's exact batch, a sequence's inside) is left out, never guessed.</p></div>
"""
INSPECTOR_NOTE = (
    '<div class="pg-muted">The sequence inspector needs the engine\'s inside (block tables, '
    "token ids, preemptions of one request), which a remote server does not expose. Each "
    "card shows what its stream said; the server's totals are in the charts.</div>"
)


def is_remote(state: BoardState) -> bool:
    return isinstance(state.snapshot, RemoteSnapshot)


def figures(state: BoardState) -> dict[str, dict]:
    """Every chart of the board (the same places as the in-process board's)."""
    snap = state.snapshot
    labels = cards.request_labels(state)
    seen_here = "Request timeline seen here (waiting: no token yet)"
    specs = {
        "queue": remote_charts.queue_spec(snap),
        "batch": remote_charts.iteration_spec(snap),
        "timeline": timeline.timeline_spec(snap, labels, seen_here),
        "kv": remote_charts.kv_spec(snap),
        "stops": remote_charts.stops_spec(snap),
        "latency": charts.latency_spec(snap, "Latency, measured from the streams"),
        "tput": remote_charts.throughput_spec(snap),
    }
    if state.compare:
        for i, lane in enumerate(state.lanes[:2]):
            s = state.snapshots[lane]
            specs[f"cmp_queue{i}"] = remote_charts.queue_spec(s, f"{lane}: queues")
            specs[f"cmp_batch{i}"] = remote_charts.iteration_spec(s, f"{lane}: tokens per step")
    return specs


def _fmt(value, pattern: str) -> str:
    return "–" if value is None else pattern.format(value)


def _gen_rate(snap: RemoteSnapshot) -> float | None:
    recent = [s for s in snap.samples if s.t >= snap.samples[-1].t - TPUT_WINDOW_S]
    if len(recent) < 2 or recent[-1].t <= recent[0].t:
        return None
    tokens = grown(recent, "generation_tokens")
    return None if tokens is None else tokens / (recent[-1].t - recent[0].t)


def render_stats(state: BoardState) -> str:
    snap, t = state.snapshot, state.snapshot.totals
    last = snap.samples[-1] if snap.samples else None
    queries, hits = grown(snap.samples, "prefix_queries"), grown(snap.samples, "prefix_hits")
    hit_rate = hits / queries if queries and hits is not None else None
    preempted = grown(snap.samples, "preemptions")
    tiles = [
        ("server running", _fmt(last and last.running, "{:.0f}")),
        ("server waiting", _fmt(last and last.waiting, "{:.0f}")),
        ("KV cache used", _fmt(last and last.kv_usage, "{:.0%}")),
        ("prefix-cache hits", _fmt(hit_rate, "{:.0%}")),
        ("preemptions", _fmt(preempted, "{:.0f}")),
        ("server gen tok/s", _fmt(_gen_rate(snap) if snap.samples else None, "{:.1f}")),
        ("finished here", f"{snap.num_finished}/{snap.num_submitted}"),
        ("TTFT p50 here", _fmt(t.ttft_p50 and t.ttft_p50 * 1000, "{:.0f} ms")),
        ("errors here", f"{snap.finish_reasons.get('error', 0)}"),
    ]
    if last is None:  # no scrape: the last-known numbers would be made up
        tiles = [(k, "–" if k.startswith(("server", "KV")) else v) for k, v in tiles]
    cells = "".join(
        f'<div class="pg-tile"><div class="pg-tile-v">{cards.esc(v)}</div>'
        f'<div class="pg-tile-k">{cards.esc(k)}</div></div>'
        for k, v in tiles
    )
    health = snap.health.state if snap.health else "connecting"
    kind = "running" if health == "ok" else "paused"
    servers = " vs ".join(state.lanes) if state.compare else snap.server
    info = (
        f'<div class="pg-mode">{cards.badge(f"server {health}", kind)}'
        f"{cards.badge(servers, 'policy')}{cards.badge(snap.model or 'model ?', 'policy')}"
        f"{cards.badge(state.workload or 'no preset running', 'policy')}"
        f"{cards.badge('paused' if state.paused else 'streaming', 'policy')}</div>"
    )
    return f'<div class="pg-stats">{cells}{info}</div>'


def render_banner(state: BoardState, now: float | None = None) -> str:
    """A banner per server that is down, slow, not reached yet, or failing requests; empty
    when all is well (the board clears it as soon as the server answers again)."""
    now = time.monotonic() if now is None else now
    parts = []
    for lane in state.lanes:
        snap = state.snapshots[lane]
        if not isinstance(snap, RemoteSnapshot) or snap.health is None:
            continue
        h, where = snap.health, cards.esc(snap.server)
        if h.state == "down":
            parts.append(
                f"The server at <b>{where}</b> is not answering ({cards.esc(h.message)}) for "
                f"{now - h.since:.0f} s. Requests sent meanwhile end with ERROR; the board "
                "reconnects by itself when it is back."
            )
        elif h.state == "slow":
            parts.append(f"The server at <b>{where}</b> is slow: {cards.esc(h.message)}.")
        elif h.state == "connecting" and now - h.since > CONNECTING_GRACE_S:
            parts.append(f"Connecting to <b>{where}</b>: no answer from /metrics yet.")
        recent = [m for t, m in snap.errors if now - t <= RECENT_ERRORS_S]
        if recent and h.state != "down":
            parts.append(
                f"{len(recent)} request(s) to <b>{where}</b> failed in the last "
                f"{RECENT_ERRORS_S:.0f} s; the latest: {cards.esc(recent[-1])}"
            )
    return "".join(f'<div class="pg-alert" role="alert">⚠ {p}</div>' for p in parts)


def render_log(state: BoardState, me: str | None = None, limit: int = 60) -> str:
    snap = state.snapshot
    labels = cards.request_labels(state, me)
    lines = [
        f"{t - snap.started:.1f} s · " + (f"{labels.get(rid, rid)}: " if rid else "") + text
        for t, rid, text in snap.log[-limit:]
    ]
    return cards.render_log(lines, "Nothing yet: start a preset or send a prompt.")


def render_scoreboard(state: BoardState) -> str:
    if not state.compare:
        return (
            '<div class="pg-muted">Compare mode needs two servers: start the board with '
            "<code>--engine-url A --engine-url B</code> (for example two vLLM servers with "
            "different <code>--max-num-seqs</code>) and tick <i>compare</i>; every request "
            "then goes to both.</div>"
        )
    rows, wall = [], {}
    for lane in state.lanes:
        snap = state.snapshots[lane]
        t = snap.totals
        done = snap.num_submitted > 0 and snap.num_finished == snap.num_submitted
        wall[lane] = snap.last_finished - snap.first_sent if done else None
        when = f"{wall[lane]:.2f} s" if done else "running…"
        ttft = f"{sum(snap.ttfts) / len(snap.ttfts) * 1000:.0f} ms" if snap.ttfts else "–"
        tpot = _fmt(t.tpot_p50 and t.tpot_p50 * 1000, "{:.0f} ms")
        rows.append(
            f"<tr><td>{cards.badge(lane, 'policy')}</td><td>{snap.num_finished}/"
            f"{snap.num_submitted}</td><td>{cards.esc(when)}</td><td>{t.tokens_per_s:.1f}</td>"
            f"<td>{ttft}</td><td>{tpot}</td></tr>"
        )
    a, b = (wall.get(name) for name in state.lanes[:2])
    verdict = cards.compare_verdict(state.lanes[:2], a, b) if a and b else ""
    head = (
        "<tr><th>server</th><th>finished</th><th>first sent to last finished</th>"
        "<th>generated tok/s here</th><th>mean TTFT</th><th>TPOT p50</th></tr>"
    )
    return f'<table class="pg-score">{head}{"".join(rows)}</table>{verdict}'


def board_values(state: BoardState, me: str | None) -> list:
    """The same five pieces of text as the in-process board's (views.board_values)."""
    return [
        render_stats(state),
        cards.render_cards(state, me),
        render_log(state, me),
        INSPECTOR_NOTE,
        render_scoreboard(state),
    ]
