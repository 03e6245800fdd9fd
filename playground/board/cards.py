"""HTML for the board: user cards, stat tiles, the narrated step log and the scoreboard.

Pure functions of a BoardState (and the visitor's session id). Every piece of text that a
person or the model wrote goes through `esc()`, and the model's (or a prompt's) through
`esc_text()` first: what a font cannot draw shows as one U+FFFD.
"""

import html
import re
import unicodedata

from playground.board.state import BoardState
from playground.driver.busy import ttft as busy_ttft
from playground.handles import RequestRecord
from playground.teaching.why import state_cost, waiting_label

MAX_CARD_CHARS = 420  # the tail of the text a card shows
MAX_OTHER_CARDS = 12  # visitors / API clients shown besides the simulated users
VISITOR_PREFIX = "visitor:"
USER_NOTES = {"arriving": "arriving soon", "thinking": "thinking…", "done": "done"}


def esc(text) -> str:
    return html.escape(str(text), quote=True)


# what a font cannot draw: controls (but newline and tab), private use, unassigned, surrogates
UNDRAWABLE = frozenset(("Cc", "Co", "Cn", "Cs"))
REPLACEMENT_RUNS = re.compile("\ufffd+")


def readable(text: str) -> str:
    """`text` with every run of characters a font cannot draw (and of undecodable bytes,
    already U+FFFD) shown as one U+FFFD, instead of tofu boxes."""
    if text.replace("\n", "").replace("\t", "").isprintable() and "\ufffd\ufffd" not in text:
        return text  # the common case, at C speed
    marked = "".join(
        "\ufffd" if c not in "\n\t" and unicodedata.category(c) in UNDRAWABLE else c for c in text
    )
    return REPLACEMENT_RUNS.sub("\ufffd", marked)


def esc_text(text: str) -> str:
    """A prompt's or the model's text as HTML: readable(), then esc()."""
    return esc(readable(text))


def visitor_owner(session_hash: str | None) -> str:
    return f"{VISITOR_PREFIX}{session_hash or 'anonymous'}"


def owner_label(owner: str | None, me: str | None = None) -> str:
    if owner is None:
        return "API"
    if owner == me:
        return "You"
    kind, _, name = owner.partition(":")
    if kind == "user":
        return name
    if kind == "visitor":
        return f"Visitor {name[:4]}"
    if kind == "api":
        return f"API {name[:4]}"
    return owner


def request_labels(state: BoardState, me: str | None = None) -> dict[str, str]:
    """request id -> 'req-7 · Ada' for charts and the log."""
    return {r.request_id: f"{r.request_id} · {owner_label(r.owner, me)}" for r in state.records}


def request_colours(state: BoardState) -> dict[str, str]:
    colour = {u.owner: u.colour for u in state.users}
    return {r.request_id: colour.get(r.owner, "#64748b") for r in state.records}


def badge(text: str, kind: str, title: str = "") -> str:
    t = f' title="{esc(title)}"' if title else ""
    return f'<span class="pg-badge pg-{esc(kind)}"{t}>{esc(text)}</span>'


def status_badges(record: RequestRecord | None, live_status: str | None, live=None) -> str:
    """`live`: the engine's RequestState, whose waiting reason the waiting badge names."""
    if record is None:
        return ""
    if record.error and record.stop_reason is None:
        return badge("rejected", "error", record.error)
    if record.finished:
        reason = record.stop_reason or "error"
        return badge("finished", "finished") + badge(reason, f"stop-{reason}", record.error or "")
    why = waiting_label(live.waiting_reason) if live is not None else None
    if live_status == "waiting" and why:
        text = f"waiting: {why}"  # the title repeats it whole: a phone cuts the pill short
        return badge(text, "waiting", f"{text}: the first rule that kept it out last step")
    return badge(live_status or "queued", live_status or "waiting")


def render_card(
    name: str,
    colour: str,
    record: RequestRecord | None,
    live_status: str | None,
    note: str = "",
    mine: bool = False,
    live=None,
    beams: tuple = (),
) -> str:
    """`live`: the engine's RequestState of the request (waiting reason, preemption cost)."""
    head = (
        f'<div class="pg-card-head"><span class="pg-dot" style="background:{esc(colour)}"></span>'
        f'<span class="pg-name">{esc(name)}</span>'
        f'<span class="pg-rid">{esc(record.request_id) if record else ""}</span>'
        f'<span class="pg-badges">{status_badges(record, live_status, live)}</span></div>'
    )
    if record is None:
        body = f'<div class="pg-text pg-muted">{esc(note or "…")}</div>'
        return f'<div class="pg-card{" pg-mine" if mine else ""}">{head}{body}</div>'
    said = esc_text(record.prompt)
    prompt = f'<div class="pg-prompt" title="{said}">› {said}</div>'
    text = record.text
    if len(text) > MAX_CARD_CHARS:
        text = "…" + text[-MAX_CARD_CHARS:]
    text_html = token_spans(record) if record.logprobs and mine else esc_text(text)
    cursor = '<span class="pg-cursor"></span>' if live_status == "running" else ""
    if record.error and (record.stop_reason is None or not record.text):
        text_html = f'<span class="pg-error">{esc(record.error)}</span>'
    first = busy_ttft(live) if live is not None else None  # engine-busy s: pauses left out
    ttft = f" · TTFT {first * 1000:.0f} ms" if first is not None else ""
    foot = f"{record.num_output_tokens} tokens{ttft}" + (f" · {esc(note)}" if note else "")
    cost = state_cost(live) if live is not None else ""
    cost_html = f'<div class="pg-cost">⟲ {esc(cost)}</div>' if cost else ""
    return (
        f'<div class="pg-card{" pg-mine" if mine else ""}" style="--pg-colour:{esc(colour)}">'
        f'{head}{prompt}<div class="pg-text">{text_html}{cursor}</div>{beam_list(beams)}'
        f'{cost_html}<div class="pg-foot">{foot}</div></div>'
    )


def beam_list(beams) -> str:
    """A running beam search's live beams, best first: id, cumulative logprob, text's tail."""
    if not beams:
        return ""
    rows = "".join(
        f'<div class="pg-beam"><b>beam {beam}</b> <span class="pg-muted">{logprob:.2f}</span> '
        f"{esc_text(text[-80:])}</div>"
        for beam, text, logprob in beams
    )
    return f'<div class="pg-beams">{rows}</div>'


def live_beams(state: BoardState) -> dict[str, tuple]:
    return {r.request_id: r.beams for r in state.snapshot.requests if r.beams}


def token_spans(record: RequestRecord) -> str:
    """The visitor's answer token by token; hovering one shows its top alternatives.

    Tokens are shown while their pieces spell out `text`; the rest (an EOS token's
    "<|im_end|>", a cut stop string, a character split over tokens) as plain text.
    """
    spans, shown, text = [], 0, record.text
    for token_id, alternatives in zip(record.token_ids or (), record.logprobs or (), strict=False):
        chosen = alternatives.get(token_id)
        piece = chosen.decoded_token if chosen else ""
        if not piece or not text.startswith(piece, shown):
            break
        ranked = sorted(alternatives.items(), key=lambda kv: kv[1].rank)
        tip = "\n".join(
            f"{'→' if tid == token_id else ' '} {lp.decoded_token!r}  {lp.logprob:.2f}"
            for tid, lp in ranked
        )
        spans.append(f'<span class="pg-tok" title="{esc(tip)}">{esc_text(piece)}</span>')
        shown += len(piece)
    return "".join(spans) + esc_text(text[shown:])


def queue_notes(state: BoardState) -> dict[str, str]:
    """request id -> 'priority 1 · waited 2.4 s' when the engine orders its queue by priority:
    the time from arrival to first admission (so far, for one still waiting)."""
    snap = state.snapshot
    if snap.scheduling_policy != "priority" or not snap.steps:
        return {}
    now = snap.steps[-1].start + snap.steps[-1].duration
    notes = {}
    for r in snap.requests:
        waited = (r.first_scheduled if r.first_scheduled is not None else now) - r.arrival
        verb = "waited" if r.first_scheduled is not None else "waiting"
        notes[r.request_id] = f"priority {r.priority} · {verb} {max(waited, 0.0):.1f} s"
    return notes


def _join(*notes: str) -> str:
    return " · ".join(n for n in notes if n)


def render_cards(state: BoardState, me: str | None = None) -> str:
    """The visitor's own card first, then every simulated user, then other clients."""
    live = {r.request_id: r for r in state.snapshot.requests}
    queued, beams = queue_notes(state), live_beams(state)

    def card(name, colour, rec, note="", mine=False):
        now = live.get(rec.request_id) if rec else None
        status = now.status if now else None
        rid = rec.request_id if rec else ""
        return render_card(name, colour, rec, status, _join(note, queued.get(rid, "")), mine=mine,
                           live=now, beams=beams.get(rid, ()))  # fmt: skip

    latest: dict[str, RequestRecord] = {}
    for r in state.records:  # oldest first: the last one per owner wins
        latest[r.owner or f"api:{r.request_id}"] = r
    cards = []
    if me is not None:
        mine = latest.get(me)
        note = "" if mine else "Type a prompt on the left: it joins the same batch."
        cards.append(card("You", "#0f172a", mine, note, mine=True))
    for u in state.users:
        rec = latest.get(u.owner)
        if rec is not None and rec.request_id != u.request_id:
            rec = None  # that request fell out of the ledger
        note = USER_NOTES.get(u.state, "")
        cards.append(card(u.name, u.colour, rec, note))
    users = {u.owner for u in state.users}
    others = [r for o, r in latest.items() if o != me and o not in users]
    for r in others[-MAX_OTHER_CARDS:]:
        cards.append(card(owner_label(r.owner, me), "#64748b", r))
    return f'<div class="pg-cards">{"".join(cards)}</div>'


def render_alert(stuck_for: float | None) -> str:
    """The watchdog's banner: empty while steps finish in time."""
    if stuck_for is None:
        return ""
    return (
        f'<div class="pg-alert" role="alert">⚠ The engine step has been running for '
        f"{stuck_for:.0f} s: it looks stuck. The board resumes when it ends; the server log "
        f"says where it is.</div>"
    )


def render_stats(state: BoardState) -> str:
    snap, t = state.snapshot, state.snapshot.totals
    used = snap.kv_blocks_used / snap.kv_blocks_total if snap.kv_blocks_total else 0.0
    ttft = "–" if t.ttft_p50 is None else f"{t.ttft_p50 * 1000:.0f} ms"
    if state.paused:
        mode = "paused"
    else:
        mode = "max speed" if state.pace is None else f"{state.pace:g} steps/s"
    tiles = [
        ("step", f"{snap.step}"),
        ("waiting", f"{snap.num_waiting}"),
        ("running", f"{snap.num_running}"),
        ("finished", f"{snap.num_finished}"),
        ("generated tok/s", f"{t.tokens_per_s:.1f}"),
        ("TTFT p50", ttft),
        ("KV used", f"{used:.0%}"),
        ("cached prompt tokens", f"{t.num_cached_tokens}"),
        ("preemptions", f"{t.num_preemptions}"),
        ("tokens recomputed", f"{t.num_recomputed_tokens}"),
        ("lost to preemption", f"+{t.preemption_time_lost:.1f} s"),
    ]
    cells = "".join(
        f'<div class="pg-tile"><div class="pg-tile-v">{esc(v)}</div>'
        f'<div class="pg-tile-k">{esc(k)}</div></div>'
        for k, v in tiles
    )
    policy = " vs ".join(state.lanes) if state.compare else snap.batching
    if snap.scheduling_policy != "fcfs":
        policy += f", {snap.scheduling_policy}"
    info = (
        f'<div class="pg-mode">{badge(mode, "paused" if state.paused else "running")}'
        f"{badge(policy, 'policy')}{badge(state.workload or 'no preset running', 'policy')}</div>"
    )
    return f'<div class="pg-stats">{cells}{info}</div>'


# -- the narrated step log ------------------------------------------------------------------
def narrate_steps(
    steps, labels: dict[str, str] | None = None, last: int | None = None
) -> list[str]:
    """One plain sentence per step, oldest first, e.g.
    'step 42: admitted req-7 (183 tokens, 0 cached), req-7 prefill chunk 1 (64/183 tokens),
    5 decoding, req-3 finished: stop_word'. `last`: only the last steps' sentences (the
    chunks of the steps before them are still counted)."""
    labels = labels or {}
    first = 0 if last is None else max(0, len(steps) - last)
    chunks = _chunks_before(steps[:first])
    lines = []
    for rec in steps[first:]:
        parts = []
        for e in rec.events:
            who = labels.get(e.request_id, e.request_id)
            if e.kind == "admitted":
                parts.append(f"admitted {who} ({e.detail})" if e.detail else f"admitted {who}")
            elif e.kind == "prefill_chunk":
                chunks[e.request_id] = chunks.get(e.request_id, 0) + 1
                parts.append(f"{who} prefill chunk {chunks[e.request_id]} ({e.detail})")
            elif e.kind == "prefill_done":
                n = chunks.pop(e.request_id, 0) + 1
                parts.append(f"{who} prefill done ({e.detail}, {n} chunk{'s' * (n > 1)})")
            elif e.kind == "preempted":
                parts.append(f"{who} preempted (blocks freed, back to waiting)")
            elif e.kind == "finished":
                parts.append(f"{who} finished: {e.detail}")
            elif e.kind == "aborted":
                parts.append(f"{who} aborted")
            elif e.kind == "beams":  # "forked beam 3 from 1, pruned 2"
                parts.append(f"{who} {e.detail}")
            else:
                parts.append(f"{who} {e.kind} {e.detail}".strip())
        if rec.num_decode_tokens:
            parts.insert(0, f"{rec.num_decode_tokens} decoding")
        ms = rec.duration * 1000
        lines.append(f"step {rec.step} ({ms:.0f} ms): " + (", ".join(parts) or "nothing to do"))
    return lines


def _chunks_before(steps) -> dict[str, int]:
    """Request -> prefill chunks it had run by the end of `steps`, for a prompt still in
    prefill."""
    chunks: dict[str, int] = {}
    for rec in steps:
        for e in rec.events:
            if e.kind == "prefill_chunk":
                chunks[e.request_id] = chunks.get(e.request_id, 0) + 1
            elif e.kind == "prefill_done":
                chunks.pop(e.request_id, None)
    return chunks


def render_step_log(state: BoardState, me: str | None = None, limit: int = 60) -> str:
    snap = state.snapshot
    lines = narrate_steps(snap.steps, request_labels(state, me), last=limit)
    return render_log(lines, "No steps yet: start a preset or send a prompt.")


def render_log(lines: list[str], empty: str) -> str:
    """A log, newest line first; `empty` while it has none."""
    items = "".join(f"<li>{esc(line)}</li>" for line in reversed(lines))
    items = items or f'<li class="pg-muted">{esc(empty)}</li>'
    return f'<ol class="pg-log">{items}</ol>'


# -- compare mode ---------------------------------------------------------------------------


def compare_verdict(lanes, a: float, b: float, unit: str = "") -> str:
    """The compare view's one line: each lane's time for the workload and their ratio."""
    first, second = (esc(name) for name in lanes)
    return (
        f'<div class="pg-verdict">{first} finished the workload in {a:.2f} s{unit}, {second} '
        f"in {b:.2f} s: <b>{b / a:.2f}×</b></div>"
    )


def render_scoreboard(state: BoardState) -> str:
    if not state.compare:
        return (
            '<div class="pg-muted">Compare mode is off. Click the preset '
            "<b>Static vs continuous</b> (or tick <i>compare</i>) to run the same workload "
            "through both schedulers, stepped alternately so each gets the same CPU.</div>"
        )
    rows, finish = [], {}
    for lane in state.lanes:
        snap, st = state.snapshots[lane], state.stats[lane]
        ttfts = snap.ttfts
        mean_ttft = f"{sum(ttfts) / len(ttfts) * 1000:.0f} ms" if ttfts else "–"
        done = st.num_finished == st.num_submitted and st.num_submitted > 0
        finish[lane] = st.finish_busy_s if done else None
        when = f"{st.finish_busy_s:.2f} s · step {st.finish_step}" if done else "running…"
        tput, so_far = f"{snap.totals.tokens_per_s:.1f}", ""
        if not done:  # a mean of the requests done so far: not yet the lane's figure
            so_far = f' <span class="pg-partial">partial: {st.num_finished} finished</span>'
        rows.append(
            f"<tr><td>{badge(lane, 'policy')}</td><td>{st.num_finished}/{st.num_submitted}</td>"
            f"<td>{esc(when)}</td><td>{tput}{so_far}</td><td>{mean_ttft}{so_far}</td></tr>"
        )
    a, b = (finish.get(name) for name in state.lanes[:2])
    verdict = compare_verdict(state.lanes[:2], a, b, " of engine time") if a and b else ""
    head = (
        "<tr><th>lane</th><th>finished</th><th>finish time (engine busy s)</th>"
        "<th>generated tok/s</th><th>mean TTFT</th></tr>"
    )
    return f'<table class="pg-score">{head}{"".join(rows)}</table>{verdict}'
