"""The stop-reason mix read aloud: what it says about the workload and the knobs, with numbers.

A pure function of an EngineSnapshot. Shares are of finished completions (a request with
n > 1 counts each of its completions, as the engine's totals do). The thresholds:

- fewer than MIN_FINISHED finished: too early to read a pattern;
- `max_tokens` >= MAX_TOKENS_SHARE: answers are cut; raise max_tokens (the most common one now);
- `timeout` >= TIMEOUT_SHARE: the engine is overloaded; the largest waiting queue recorded;
- `cancelled` >= CANCELLED_SHARE: people leave mid-stream; how far they got on average;
- `length` >= LENGTH_SHARE: prompts reach the context window (max_model_len);
- any `error`: forwards failed (the server log says why);
- `eos` + `stop_word` >= NATURAL_SHARE and nothing above: answers end by themselves.
"""

from collections import Counter
from dataclasses import dataclass

from engine import EngineSnapshot
from playground.board.cards import badge, esc

MIN_FINISHED = 8
MAX_TOKENS_SHARE = 0.5
TIMEOUT_SHARE = 0.1
CANCELLED_SHARE = 0.2
LENGTH_SHARE = 0.05
NATURAL_SHARE = 0.5


@dataclass(frozen=True, slots=True)
class Finding:
    reason: str  # the stop reason it reads ("" for the summary)
    share: float  # of finished completions
    text: str


def read_stop_reasons(snap: EngineSnapshot) -> list[Finding]:
    """What the mix says, most pressing first; a single 'too early' finding under MIN_FINISHED."""
    counts = snap.totals.stop_reasons
    total = sum(counts.values())
    if total < MIN_FINISHED:
        too_early = (
            f"{total} finished so far: too few to read a pattern (waiting for {MIN_FINISHED})."
        )
        return [Finding("", 0.0, too_early)]
    share = {reason: n / total for reason, n in counts.items()}
    finished = [r for r in snap.requests if r.status == "finished"]
    found: list[Finding] = []

    def add(reason: str, what: str) -> None:
        n = counts[reason]
        found.append(Finding(reason, share[reason], f"{n} of {total} ({share[reason]:.0%}) {what}"))

    if share.get("error", 0.0) > 0:
        add("error", "ended in an error: a forward failed (the server log says why).")
    if share.get("timeout", 0.0) >= TIMEOUT_SHARE:
        queue = max((r.num_waiting for r in snap.steps), default=snap.num_waiting)
        add("timeout", f"timed out: the engine is overloaded, the queue grew to {queue} waiting.")
    if share.get("max_tokens", 0.0) >= MAX_TOKENS_SHARE:
        limits = Counter(r.max_tokens for r in finished if r.stop_reason == "max_tokens")
        now = f" (now {limits.most_common(1)[0][0]})" if limits else ""
        add("max_tokens", f"stopped at max_tokens: answers are cut, raise the default{now}.")
    if share.get("cancelled", 0.0) >= CANCELLED_SHARE:
        left = [r.num_output_tokens for r in finished if r.stop_reason == "cancelled"]
        after = f", after {sum(left) / len(left):.0f} tokens on average" if left else ""
        add("cancelled", f"were cancelled: people leave mid-stream{after}.")
    if share.get("length", 0.0) >= LENGTH_SHARE:
        window = f" of {snap.max_model_len} tokens" if snap.max_model_len else ""
        add("length", f"ran out of context: prompts reach the context window{window}.")
    natural = share.get("eos", 0.0) + share.get("stop_word", 0.0)
    if not found and natural >= NATURAL_SHARE:
        n = counts.get("eos", 0) + counts.get("stop_word", 0)
        text = (
            f"{n} of {total} ({natural:.0%}) ended by themselves (eos or a stop word): "
            "max_tokens is not in the way."
        )
        found.append(Finding("eos", natural, text))
    if not found:
        mix = ", ".join(f"{r} {s:.0%}" for r, s in sorted(share.items(), key=lambda kv: -kv[1]))
        found.append(Finding("", 0.0, f"No reason dominates: {mix}."))
    return found


def render_stop_panel(snap: EngineSnapshot) -> str:
    items = "".join(
        f"<li>{badge(f.reason, f'stop-{f.reason}') if f.reason else ''} {esc(f.text)}</li>"
        for f in read_stop_reasons(snap)
    )
    return f'<div class="pg-stops"><b>What the stop reasons say</b><ul>{items}</ul></div>'
