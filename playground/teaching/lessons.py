"""Lessons that ask before they show: each preset opens with a question, two or three answers
and what will run; the visitor picks one, the run plays, and once the lesson's evidence is
complete (evidence.py) the measured answer appears next to the guess, names the step it was
measured at, never changes, and explains what happened, pointing at the chart that shows it.

The first verdict of each run is latched in a VerdictBook that every viewer shares (a run is
the driver's reset generation, BoardState.run), so all viewers read the same verdict, and a
board reset or a newer run cannot change it. A run that ends, or is reset, before the
evidence is complete is inconclusive, and says why. The board keeps each session's lesson,
guess and run in gr.State.
"""

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from playground.board.cards import badge, esc
from playground.board.state import BoardState
from playground.teaching import evidence as ev
from playground.teaching.evidence import Measuring, Verdict
from playground.workload.scenarios import SCENARIOS

MAX_LATCHED = 64  # runs whose verdicts are kept


@dataclass(frozen=True, slots=True)
class Inconclusive:
    why: str


Result = Measuring | Verdict | Inconclusive


@dataclass(frozen=True)
class Lesson:
    scenario: str  # the preset it opens
    question: str
    answers: tuple[tuple[str, str], ...]  # (key, text), two or three
    evidence: Callable[[BoardState], Measuring | Verdict]
    explanation: str  # shown after the verdict
    chart: str  # the title of the chart that shows it
    plot: str  # that chart's key on the page (#pg-plot-<plot>): drawn first while it is open

    def answer_text(self, key: str | None) -> str:
        return dict(self.answers).get(key, "")


class VerdictBook:
    """The first verdict of each (run, lesson), shared by every viewer; the last progress of
    the ones still measuring, to say what was missing if the run ends."""

    def __init__(self, size: int = MAX_LATCHED):
        self.size = size
        self._verdicts: OrderedDict[tuple[int, str], Verdict] = OrderedDict()
        self._progress: OrderedDict[tuple[int, str], str] = OrderedDict()
        self._lock = threading.Lock()

    def result(self, lesson: Lesson, state: BoardState, run: int) -> Result:
        key = (run, lesson.scenario)
        with self._lock:
            if (latched := self._verdicts.get(key)) is not None:
                return latched
            progress = self._progress.get(key, "nothing measured yet")
        if state.run != run or state.workload != lesson.scenario:
            return Inconclusive(f"the board was reset before the evidence was complete "
                                f"(it was at: {progress}).")  # fmt: skip
        found = lesson.evidence(state)
        if isinstance(found, Verdict):
            with self._lock:
                found = self._verdicts.setdefault(key, found)  # a racing viewer's stays
                self._trim(self._verdicts)
            return found
        if run_over(state):
            return Inconclusive(f"the run ended before the evidence was complete: "
                                f"{found.progress}.")  # fmt: skip
        with self._lock:
            self._progress[key] = found.progress
            self._trim(self._progress)
        return found

    def _trim(self, book: OrderedDict) -> None:
        while len(book) > self.size:
            book.popitem(last=False)


VERDICTS = VerdictBook()


def run_over(state: BoardState) -> bool:
    """Every simulated user is done and no lane has anything left to run."""
    return (
        bool(state.users)
        and all(u.state == "done" for u in state.users)
        and all(s.num_waiting == s.num_running == 0 for s in state.snapshots.values())
    )


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
            ev.admit_everyone,
            "Continuous batching admits every waiting request whose prompt fits the step's "
            "token budget, so the queue drains in as few steps as the budget allows; then "
            "each user leaves the batch at its own step (short answers first, cancellations "
            "at once) while the others keep decoding.",
            "Queues over time",
            "queue",
        ),  # fmt: skip
        Lesson(
            "long_vs_short",
            "Two users paste a long passage while four others chat. While a long prompt is "
            "prefilled, do the chats keep decoding?",
            (
                ("stall", "no: they pause until the long prompt is done"),
                ("together", "yes: they decode in the same steps"),
            ),
            ev.decodes_beside_chunks,
            "Chunked prefill cuts a prompt longer than the token budget into chunks over "
            "several steps, and each step first gives the running chats their decode tokens: "
            "the prefill (purple) and the decodes (blue) share the same bars.",
            "Tokens per step",
            "batch",
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
            ev.pool_too_small,
            "When a running request needs a new block and none is free, the scheduler "
            "preempts the newest running request: its blocks are freed, it goes back to the "
            "front of the queue and computes its tokens again once admitted. The red marks "
            "and the victims' cards show what it cost.",
            "Request timeline",
            "timeline",
        ),  # fmt: skip
        Lesson(
            "prefix_cache",
            "Every request starts with the same long system prompt. How many of the prompt "
            "tokens will the prefix cache save?",
            (("none", "under 10 %"), ("some", "10 to 50 %"), ("most", "over 50 %")),
            ev.cache_share,
            "The first request computes the system prompt; its full KV blocks stay in the "
            "prefix cache, and every later request with the same prefix finds them there: "
            "only its own question is prefilled (the short prefill bars).",
            "Tokens per step",
            "batch",
        ),
        Lesson(
            "vip_users",
            "Eight regular users fill the engine's 4 seats; two VIPs (priority 0) arrive two "
            "seconds later. How long do the VIPs wait for a seat?",
            (
                ("queue", "as long as the regulars: they queue behind them"),
                ("preempt", "hardly: each preempts a running regular and starts at once"),
            ),
            partial(ev.vip_seats, num_vips=2),
            "Under scheduling_policy='priority' a waiting request with a better priority "
            "preempts the running request with the largest (priority, arrival): the VIPs "
            "take seats at once and the preempted regulars wait again (their cards say how "
            "long).",
            "Request timeline",
            "timeline",
        ),  # fmt: skip
        Lesson(
            "beam_search",
            "Three users ask for 4 beams each. Does every beam keep its own copy of the "
            "prompt's KV blocks?",
            (
                ("copies", "yes: 4 beams, 4 copies of the prompt"),
                ("shared", "no: they share blocks"),
            ),
            ev.beam_blocks,
            "A beam is forked from its parent: it points at the parent's full KV blocks "
            "(dark cells: shared) and copies only the partly filled last one when it writes "
            "to it (orange: copy-on-write); a pruned beam gives its blocks back at once.",
            "KV blocks",
            "kv",
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
            ev.speedup,
            "Static batching admits a new batch only when the whole batch is done, so short "
            "answers hold their seats until the longest one finishes; continuous batching "
            "refills a seat in the step it frees.",
            "Queues over time (static and continuous)",
            "cmp_queue0",
        ),  # fmt: skip
    )
}


def what_runs(key: str) -> str:
    """The preset's users and its engine knobs, in words (no answer in them)."""
    sc = SCENARIOS[key]
    knobs = ", ".join(f"{k} {v}" for k, v in sc.engine_overrides.items())
    return f"{sc.what_to_watch} Knobs: {knobs}." if knobs else sc.what_to_watch


def render_lesson(state: BoardState, key: str | None, guess: str | None, run: int | None = None,
                  book: VerdictBook = VERDICTS) -> str:  # fmt: skip
    """The question and what will run; after the guess, what the run measured next to it.
    `guess`: an answer's key, "" when the visitor skipped the question, None before; `run`:
    the run the answer started (default: the board's)."""
    lesson = LESSONS.get(key) if key else None
    if lesson is None:
        return (
            '<div class="pg-lesson pg-muted">Pick a preset on the left: each one opens with a '
            "question. Guess, watch the run, and see the measured answer next to your guess."
            "</div>"
        )
    head = f'<div class="pg-lesson-q"><span class="pg-q">?</span> {esc(lesson.question)}</div>'
    if guess is None:
        runs = f'<div class="pg-lesson-runs">{esc(what_runs(lesson.scenario))}</div>'
        pick = '<div class="pg-muted">Pick an answer: the run starts when you do.</div>'
        return f'<div class="pg-lesson" data-chart="{lesson.plot}">{head}{runs}{pick}</div>'
    found = book.result(lesson, state, state.run if run is None else run)
    said = f"your guess: <b>{esc(lesson.answer_text(guess))}</b>" if guess else "no guess"
    you = f'<div class="pg-lesson-you">{said}</div>'
    body = _result(lesson, found, guess)
    return (
        f'<div class="pg-lesson pg-lesson-answered" data-chart="{lesson.plot}">'
        f"{head}{you}{body}</div>"
    )


def _result(lesson: Lesson, found: Result, guess: str) -> str:
    if isinstance(found, Measuring):
        return f'<div class="pg-lesson-m pg-muted">measuring: {esc(found.progress)}…</div>'
    if isinstance(found, Inconclusive):
        return f'<div class="pg-lesson-m">{badge("inconclusive", "waiting")} {esc(found.why)}</div>'
    right = found.answer == guess
    mark = (
        badge("right" if right else "not quite", "finished" if right else "error") if guess else ""
    )
    return (
        f'<div class="pg-lesson-m">{mark} measured at step {found.step}: '
        f"<b>{esc(lesson.answer_text(found.answer))}</b>: {esc(found.words)}</div>"
        f'<div class="pg-lesson-why">{esc(lesson.explanation)} '
        f'<span class="pg-muted">See the chart <b>{esc(lesson.chart)}</b>.</span></div>'
    )
