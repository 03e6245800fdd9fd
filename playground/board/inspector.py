"""HTML for the sequence inspector: one request the way the engine holds it."""

from engine import RequestDetail, SequenceDetail
from engine.llm_engine import MAX_FINISHED_KEPT
from playground.board.beam_tree import beam_tree_spec
from playground.board.cards import badge, esc, esc_text
from playground.board.charts import as_json
from playground.teaching.why import waiting_label

SHOWN_PARAMS = ("max_tokens", "temperature", "top_p", "top_k", "seed", "n", "logprobs", "stop")
BEAM_PARAMS = ("beam_width", "length_penalty")  # shown for a beam search
MAX_TOKEN_CHIPS = 600  # per token list; the rest is summarized
VISIBLE = str.maketrans({"Ġ": "␣", "Ċ": "↵", "ĉ": "⇥", " ": "␣", "\n": "↵"})


def _chips(ids, pieces, last: bool = False, logprobs=None) -> str:
    out = []
    shown = list(zip(ids, pieces, strict=False))[:MAX_TOKEN_CHIPS]
    for i, (tid, piece) in enumerate(shown):
        cls = "pg-chip pg-chip-last" if last and i == len(ids) - 1 else "pg-chip"
        tip = f"id {tid}"
        if logprobs and i < len(logprobs):
            tip += "\n" + "\n".join(f"{p!r}  {lp:.2f}" for p, lp in logprobs[i])
        out.append(
            f'<span class="{cls}" title="{esc(tip)}">{esc_text(str(piece).translate(VISIBLE))}'
            f"<sub>{tid}</sub></span>"
        )
    if len(ids) > MAX_TOKEN_CHIPS:
        out.append(f'<span class="pg-muted"> … {len(ids) - MAX_TOKEN_CHIPS} more</span>')
    return f'<div class="pg-chips">{"".join(out) or "<i>none yet</i>"}</div>'


def _history(seq: SequenceDetail) -> str:
    steps = []
    prev = None
    for status, step in seq.status_history:
        note = " (preempted)" if prev == "running" and status == "waiting" else ""
        steps.append(badge(f"{status} @ step {step}{note}", status))
        prev = status
    return '<span class="pg-arrow">→</span>'.join(steps)


def _waited(seq: SequenceDetail) -> str:
    """Why the scheduler left it waiting, step by step (runs of steps with one reason)."""
    if not seq.waiting_history:
        return ""
    items = []
    for reason, first, last in seq.waiting_history:
        steps = f"step {first}" if first == last else f"steps {first}-{last}"
        n = last - first + 1
        items.append(
            f"<li><b>{steps}</b> ({n} step{'s' * (n > 1)}): {esc(waiting_label(reason))}</li>"
        )
    return f"<h4>why it waited, per step</h4><ul class='pg-waited'>{''.join(items)}</ul>"


def _preemptions(seq: SequenceDetail) -> str:
    if not seq.preemptions:
        return ""
    rows = "".join(
        f"<tr><td>{step}</td><td>{dropped}</td><td>{recomputed}</td>"
        f"<td>{'not back yet' if lost is None else f'+{lost:.2f} s'}</td></tr>"
        for step, dropped, recomputed, lost in seq.preemptions
    )
    head = (
        "<tr><th>preempted at step</th><th>K/V tokens freed</th><th>tokens recomputed</th>"
        "<th>time lost</th></tr>"
    )
    return f"<h4>what preemption cost</h4><table class='pg-facts'>{head}{rows}</table>"


def _sequence(seq: SequenceDetail, num_seqs: int) -> str:
    last = seq.output_token_ids[-1] if seq.output_token_ids else seq.prompt_token_ids[-1]
    reason = badge(seq.stop_reason, f"stop-{seq.stop_reason}") if seq.stop_reason else ""
    facts = [
        ("status", badge(seq.status, seq.status) + reason),
        ("prompt / generated tokens", f"{len(seq.prompt_token_ids)} / {len(seq.output_token_ids)}"),
        ("computed tokens (K/V in cache)", str(seq.num_computed_tokens)),
        ("cached tokens (prefix cache hit)", str(seq.num_cached_tokens)),
        ("preemptions", str(seq.num_preemptions)),
        ("last token id", str(last)),
        ("block table", " ".join(f"<code>{b}</code>" for b in seq.block_table) or "–"),
    ]
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{v}</td></tr>" for k, v in facts)
    title = f"<h4>completion {seq.index}</h4>" if num_seqs > 1 else ""
    return (
        f"{title}<div class='pg-history'>{_history(seq)}</div>"
        f"<table class='pg-facts'>{rows}</table>{_waited(seq)}{_preemptions(seq)}"
        f"<h4>prompt tokens</h4>{_chips(seq.prompt_token_ids, seq.prompt_tokens)}"
        f"<h4>generated tokens</h4>"
        f"{_chips(seq.output_token_ids, seq.output_tokens, last=True, logprobs=seq.logprobs)}"
        f"{_grammar_allowed(seq)}"
    )


def _grammar_allowed(seq: SequenceDetail) -> str:
    """Structured outputs: how many tokens the grammar allowed before each generated token."""
    if not seq.num_allowed_tokens:
        return ""
    pairs = list(zip(seq.output_tokens, seq.num_allowed_tokens, strict=False))
    cells = "".join(
        f'<span class="pg-chip" title="{n} tokens allowed">'
        f"{esc_text(str(piece).translate(VISIBLE))}<sub>{n}</sub></span>"
        for piece, n in pairs[:MAX_TOKEN_CHIPS]
    )
    return (
        "<h4>tokens the grammar allowed, per step</h4>"
        f"<div class='pg-chips pg-grammar'>{cells}</div>"
    )


def _beam_tree(detail: RequestDetail) -> str:
    """A beam search's tree as a figure the page draws (assets/beam_tree.js), or nothing."""
    if not detail.beam_tree:
        return ""
    beams = sum(n.status in ("live", "pruned", "stopped") for n in detail.beam_tree)
    title = f"Beam tree of {detail.request_id}: {beams} beams, {beams - 1} forks"
    figure = esc(as_json(beam_tree_spec(detail.beam_tree, title)))
    return f'<h4>beam tree</h4><div class="pg-beam-tree" data-figure="{figure}"></div>'


def render_inspector(
    detail: RequestDetail | None, deltas: tuple[tuple[int, str], ...], request_id: str | None
) -> str:
    if request_id is None:
        return '<div class="pg-muted">Pick a request above to see it the way the engine does.</div>'
    if detail is None:
        return (
            f'<div class="pg-muted">{esc(request_id)}: the engine no longer holds this request '
            f"(it keeps the {MAX_FINISHED_KEPT} most recent finished ones), or the driver has not "
            "answered yet."
            "</div>"
        )
    shown = SHOWN_PARAMS + BEAM_PARAMS * (detail.sampling.get("beam_width", 1) > 1)
    params = ", ".join(f"{k}={v!r}" for k, v in detail.sampling.items() if k in shown)
    seqs = "".join(_sequence(q, len(detail.seqs)) for q in detail.seqs)
    items = "".join(
        f"<li><b>step {step}</b> <code>{esc(repr(d))}</code></li>" for step, d in deltas
    )
    return (
        f'<div class="pg-inspector"><div class="pg-insp-head"><b>{esc(detail.request_id)}</b>'
        f' <span class="pg-muted">{esc(params)}</span></div>{_beam_tree(detail)}{seqs}'
        f"<h4>RequestOutput deltas, in the order they were sent ({len(deltas)})</h4>"
        f'<ol class="pg-deltas">{items or "<li class=pg-muted>none yet</li>"}</ol></div>'
    )
