"""Lessons that ask before they show: each preset opens with a question and two or three
answers; the visitor picks one, the run plays, and the measured answer appears next to the
guess.

A lesson's `measure` is a pure function of a BoardState: the right answer's key and the
numbers behind it, or None for the key while the run has not shown enough yet (the text then
says how far it got). The board keeps each session's lesson and guess in gr.State.
"""

from collections.abc import Callable
from dataclasses import dataclass

from playground.board.cards import badge, esc
from playground.board.state import BoardState


@dataclass(frozen=True, slots=True)
class Measured:
    answer: str | None  # the key of the right answer; None: not measured yet
    text: str  # what the run measured (or how far it got)


@dataclass(frozen=True)
class Lesson:
    scenario: str  # the preset it opens
    question: str
    answers: tuple[tuple[str, str], ...]  # (key, text), two or three
    measure: Callable[[BoardState], Measured]

    def answer_text(self, key: str | None) -> str:
        return dict(self.answers).get(key, "")


def _user_records(state: BoardState):
    return [r for r in state.records if (r.owner or "").startswith("user:")]


def _steps_to_admit_everyone(state: BoardState) -> Measured:
    """chat_burst: steps from the first until every user's first request was admitted."""
    first = {}
    for r in _user_records(state):
        first.setdefault(r.owner, r.request_id)
    wanted, admitted, steps = set(first.values()), set(), state.snapshot.steps
    if not steps or not wanted:
        return Measured(None, "waiting for the first step…")
    for rec in steps:
        admitted |= {e.request_id for e in rec.events if e.kind == "admitted"} & wanted
        if len(admitted) == len(wanted) == len(state.users):
            n = rec.step - steps[0].step + 1
            key = "few" if n <= 2 else "one_each" if n <= len(wanted) + 2 else "serial"
            return Measured(key, f"all {len(wanted)} users were running after {n} step"
                            f"{'s' * (n > 1)} (step {rec.step}).")  # fmt: skip
    return Measured(None, f"{len(admitted)} of {len(state.users)} users admitted so far…")


def _chunks_next_to_decodes(state: BoardState) -> Measured:
    """long_vs_short: did decodes run in the steps that carried a long prompt's chunks?"""
    chunked, prefilled, together, most = set(), set(), 0, 0
    for rec in state.snapshot.steps:
        chunks = {e.request_id for e in rec.events if e.kind == "prefill_chunk"}
        chunked |= chunks
        prefilled |= {e.request_id for e in rec.events if e.kind == "prefill_done"} & chunked
        if chunks and rec.num_decode_tokens:
            together += 1
            most = max(most, rec.num_decode_tokens)
    if together:
        return Measured("together", f"in {together} steps a prompt chunk ran next to decodes "
                        f"(up to {most} decoding in one step).")  # fmt: skip
    if len(prefilled) >= 2:
        return Measured("stall", f"{len(prefilled)} long prompts were prefilled in chunks with "
                        "nothing decoding next to them.")  # fmt: skip
    return Measured(None, "waiting for a long prompt to be prefilled in chunks…")


def _preemption_cost(state: BoardState) -> Measured:
    """kv_pressure: preempted, refused or slowed down?"""
    t = state.snapshot.totals
    refused = sum(1 for r in state.records if r.error and r.stop_reason is None)
    if t.num_preemptions:
        return Measured("preempt", f"{t.num_preemptions} preemptions, {t.num_recomputed_tokens} "
                        f"tokens recomputed, +{t.preemption_time_lost:.1f} s lost; {refused} "
                        "refused.")  # fmt: skip
    done = sum(r.finished for r in _user_records(state))
    if state.users and done >= len(state.users):
        return Measured("slow", f"{done} answers finished without a preemption.")
    return Measured(None, "the pool is filling…")


def _prefix_share(state: BoardState) -> Measured:
    """prefix_cache: the share of prompt tokens of finished requests the cache served."""
    done = [r for r in state.snapshot.requests if r.status == "finished" and r.num_prompt_tokens]
    wanted = max(1, len(state.users))
    if len(done) < wanted:
        return Measured(None, f"{len(done)} of {wanted} requests finished…")
    cached = sum(r.num_cached_tokens for r in done)
    prompt = sum(r.num_prompt_tokens for r in done)
    share = cached / prompt
    key = "none" if share < 0.1 else "some" if share <= 0.5 else "most"
    return Measured(key, f"{cached} of {prompt} prompt tokens ({share:.0%}) came from the "
                    f"prefix cache over {len(done)} requests.")  # fmt: skip


def _speedup(state: BoardState) -> Measured:
    """static_vs_continuous: how much sooner continuous finished the workload."""
    if not state.compare:
        return Measured(None, "not in compare mode.")
    stats = [state.stats[lane] for lane in state.lanes[:2]]
    if not all(s.num_submitted and s.num_finished == s.num_submitted for s in stats):
        progress = ", ".join(f"{s.name} {s.num_finished}/{s.num_submitted}" for s in stats)
        return Measured(None, f"running: {progress}…")
    cont, static = (s.finish_busy_s for s in stats)
    ratio = static / cont if cont else 0.0
    key = "same" if ratio < 1.2 else "bit" if ratio <= 1.5 else "lot"
    return Measured(key, f"continuous finished in {cont:.2f} s of engine time, static in "
                    f"{static:.2f} s: {ratio:.2f}x.")  # fmt: skip


def _vip_wait(state: BoardState) -> Measured:
    """vip_users: did the VIPs (priority 0) wait as long as the regulars for a seat?"""
    users = [r for r in state.snapshot.requests if r.arrival is not None]
    vips = [r for r in users if r.priority == 0 and r.first_scheduled is not None]
    regulars = [r for r in users if r.priority > 0 and r.first_scheduled is not None]
    if len(vips) < 2 or not regulars:
        return Measured(None, f"{len(vips)} of 2 VIPs admitted so far…")
    vip = sum(r.first_scheduled - r.arrival for r in vips) / len(vips)
    regular = sum(r.first_scheduled - r.arrival for r in regulars) / len(regulars)
    preempted = state.snapshot.totals.num_preemptions
    key = "preempt" if preempted and vip < regular else "queue"
    return Measured(key, f"the VIPs waited {vip:.1f} s for a seat on average, the regulars "
                    f"{regular:.1f} s; {preempted} preemptions.")  # fmt: skip


def _beam_forks(state: BoardState) -> Measured:
    """beam_search: do the beams copy their prompt's blocks, or share them?"""
    forked = pruned = 0
    for rec in state.snapshot.steps:
        for e in rec.events:
            if e.kind == "beams":
                forked += e.detail.count("forked")
                pruned += e.detail.count("pruned")
    if not forked:
        return Measured(None, "waiting for the first beams to fork…")
    return Measured("shared", f"{forked} beams forked from a parent, each sharing its full KV "
                    f"blocks (copy-on-write for the partly filled last one); {pruned} prunings "
                    "freed their blocks at once.")  # fmt: skip


LESSONS: dict[str, Lesson] = {
    lesson.scenario: lesson
    for lesson in (
        Lesson(
            "chat_burst",
            "8 users ask at once and a step may carry 256 tokens. How many steps until all "
            "8 are in the running batch?",
            (
                ("few", "1 or 2 steps"),
                ("one_each", "about one step per user"),
                ("serial", "more: each waits for the one before to finish"),
            ),
            _steps_to_admit_everyone,
        ),  # fmt: skip
        Lesson(
            "long_vs_short",
            "A user pastes a long passage while others chat. While its prompt is prefilled, "
            "do the short chats keep decoding?",
            (
                ("stall", "no: they pause until the long prompt is done"),
                ("together", "yes: they decode in the same steps"),
            ),
            _chunks_next_to_decodes,
        ),  # fmt: skip
        Lesson(
            "kv_pressure",
            "Only 40 KV blocks for 8 answers of 160 tokens. What happens when the cache is "
            "too small?",
            (
                ("refuse", "new requests are refused"),
                ("preempt", "some running requests are preempted and recomputed later"),
                ("slow", "every request just slows down a little"),
            ),
            _preemption_cost,
        ),  # fmt: skip
        Lesson(
            "prefix_cache",
            "Every request starts with the same long system prompt. How many of the prompt "
            "tokens will the prefix cache save?",
            (("none", "under 10 %"), ("some", "10 to 50 %"), ("most", "over 50 %")),
            _prefix_share,
        ),
        Lesson(
            "vip_users",
            "Eight regular users fill the engine's 4 seats; two VIPs (priority 0) arrive two "
            "seconds later. How long do the VIPs wait for a seat?",
            (
                ("queue", "as long as the regulars: they queue behind them"),
                ("preempt", "hardly: each preempts a running regular and starts at once"),
            ),
            _vip_wait,
        ),  # fmt: skip
        Lesson(
            "beam_search",
            "Three users ask for 4 beams each. Does every beam keep its own copy of the "
            "prompt's KV blocks?",
            (
                ("copies", "yes: 4 beams, 4 copies of the prompt"),
                ("shared", "no: forks share the full blocks and copy only the last one"),
            ),
            _beam_forks,
        ),  # fmt: skip
        Lesson(
            "static_vs_continuous",
            "16 requests of 8 to 96 tokens: does continuous batching finish them faster than "
            "static? By how much?",
            (
                ("same", "about the same (under 1.2x)"),
                ("bit", "1.2x to 1.5x faster"),
                ("lot", "more than 1.5x faster"),
            ),
            _speedup,
        ),  # fmt: skip
    )
}


def render_lesson(state: BoardState, key: str | None, guess: str | None) -> str:
    """The question, the visitor's guess and, once measured, the answer next to it.
    `guess`: an answer's key, "" when the visitor skipped the question, None before."""
    lesson = LESSONS.get(key) if key else None
    if lesson is None:
        return (
            '<div class="pg-lesson pg-muted">Pick a preset on the left: each one opens with a '
            "question. Guess, watch the run, and see the measured answer next to your guess."
            "</div>"
        )
    head = f'<div class="pg-lesson-q"><span class="pg-q">?</span> {esc(lesson.question)}</div>'
    if guess is None:
        pick = '<div class="pg-muted">Pick an answer: the run starts when you do.</div>'
        return f'<div class="pg-lesson">{head}{pick}</div>'
    if state.workload != lesson.scenario:
        measured = Measured(None, "the board runs another workload now.")
    else:
        measured = lesson.measure(state)
    said = f"your guess: <b>{esc(lesson.answer_text(guess))}</b>" if guess else "no guess"
    you = f'<div class="pg-lesson-you">{said}</div>'
    if measured.answer is None:
        verdict = f'<div class="pg-lesson-m pg-muted">measuring: {esc(measured.text)}</div>'
    else:
        right = measured.answer == guess
        mark = badge("right" if right else "not quite", "finished" if right else "error")
        mark = mark if guess else ""
        verdict = (
            f'<div class="pg-lesson-m">{mark} measured: <b>'
            f"{esc(lesson.answer_text(measured.answer))}</b>: {esc(measured.text)}</div>"
        )
    return f'<div class="pg-lesson pg-lesson-answered">{head}{you}{verdict}</div>'
