"""Lessons: every preset asks a question; each lesson's evidence measures until its end point,
then gives one verdict (its words built from its numbers) that never changes; the panel puts
it next to the guess, or says why the run was inconclusive."""

from dataclasses import replace

from engine.telemetry import Totals
from playground.board.compare import COMPARE_KEYS
from playground.board.state import LaneStats
from playground.board.views import PLOT_KEYS
from playground.handles import RequestRecord
from playground.teaching.evidence import Measuring, Verdict
from playground.teaching.lessons import LESSONS, VerdictBook, render_lesson
from playground.ui.widgets import ASSETS
from playground.workload.scenarios import SCENARIOS
from tests.playground.boards import busy_board, request, snapshot, step


def _board(workload, snap, records=(), num_users=8, **kw):
    board = busy_board(num_users=num_users, num_steps=1)
    kw = {"snapshots": {"main": snap}, **kw}
    return replace(board, workload=workload, records=tuple(records), **kw)


def _users(n=8):
    return [RequestRecord(f"req-{i}", f"user:u{i}", "p", 0.0) for i in range(n)]


def _judge(key, board):
    return LESSONS[key].evidence(board)


def test_every_preset_opens_with_a_question_of_two_or_three_answers():
    assert set(LESSONS) == set(SCENARIOS)
    for lesson in LESSONS.values():
        assert lesson.question.endswith("?") and 2 <= len(lesson.answers) <= 3
        assert len({k for k, _ in lesson.answers}) == len(lesson.answers)
        assert lesson.explanation and lesson.chart


def test_the_panel_names_its_chart_and_the_page_draws_that_chart_first():
    """A lesson's chart is one the page has; a board chart has a rule in style.css that puts
    its row first while the lesson is open (compare charts are the main view already)."""
    css = (ASSETS / "style.css").read_text(encoding="utf-8")
    board = busy_board(num_users=2, num_steps=1)
    for key, lesson in LESSONS.items():
        assert lesson.plot in (*PLOT_KEYS, *COMPARE_KEYS)
        first = f'#pg-charts[data-lead="{lesson.plot}"] .pg-row-{lesson.plot}'
        assert lesson.plot in COMPARE_KEYS or first in css, lesson.plot
        for guess in (None, ""):
            assert f'data-chart="{lesson.plot}"' in render_lesson(board, key, guess)


def test_a_verdicts_words_are_its_numbers():
    v = Verdict("few", 5, "{users} users after {steps} steps", (("users", 8), ("steps", 2)))
    assert v.words == "8 users after 2 steps"


def test_chat_burst_ends_when_every_user_is_admitted():
    admitted = [("admitted", f"req-{i}", "") for i in range(8)]
    steps = [step(1, prefill=200, events=admitted[:5]), step(2, events=admitted[5:])]
    found = _judge("chat_burst", _board("chat_burst", snapshot(steps=steps), _users()))
    assert isinstance(found, Verdict) and found.answer == "few" and found.step == 2
    assert "after 2 step(s) (steps 1 to 2)" in found.words and "200 prompt tokens" in found.words
    later = snapshot(steps=[*steps, *(step(n, events=[("finished", "req-1", "eos")])
                                     for n in range(3, 9))])  # fmt: skip
    assert _judge("chat_burst", _board("chat_burst", later, _users())) == found  # never changes
    early = _judge("chat_burst", _board("chat_burst", snapshot(steps=steps[:1]), _users()))
    assert early == Measuring("5 of 8 users admitted")
    one_each = [step(n, events=[admitted[n - 1]]) for n in range(1, 9)]
    assert _judge("chat_burst", _board("chat_burst", snapshot(steps=one_each), _users())).answer \
        == "one_each"  # fmt: skip


def _chunked(rid, n, total, *, decode, at):
    """A long prompt of `total` tokens over n steps from step `at`, `decode` decodes beside."""
    return [step(at + i, prefill=64, decode=decode, budget=64,
                 events=[("prefill_chunk" if i < n - 1 else "prefill_done", rid,
                          f"{64 * (i + 1)}/{total} tokens")])
            for i in range(n)]  # fmt: skip


def test_long_vs_short_ends_once_a_long_prompt_is_prefilled_next_to_decoding_chats():
    chats = step(1, prefill=40, events=[("prefill_done", "chat", "20/20 tokens")])
    alone = _chunked("long-0", 3, 180, decode=0, at=2)  # prefilled before any chat decoded
    board = _board("long_vs_short", snapshot(steps=alone))
    assert isinstance(_judge("long_vs_short", board), Measuring)  # no chat to stall: no verdict
    together = [chats, *_chunked("long-1", 3, 180, decode=1, at=2)]
    found = _judge("long_vs_short", _board("long_vs_short", snapshot(steps=together)))
    assert found.answer == "together" and found.step == 4
    assert "long-1's prompt went in 3 chunks (steps 2 to 4); in 3 of the 3 steps" in found.words
    stalled = [chats, *_chunked("long-1", 3, 180, decode=0, at=2)]
    assert _judge("long_vs_short", _board("x", snapshot(steps=stalled))).answer == "stall"
    short = [chats, step(2, decode=1, events=[("prefill_chunk", "c2", "40/80 tokens")])]
    assert isinstance(_judge("long_vs_short", _board("x", snapshot(steps=short))), Measuring)


def test_kv_pressure_ends_at_the_first_preemption():
    preempted = [("preempted", "req-7", "")]
    steps = [step(1, running=8), step(2, running=8, free=0, events=preempted), step(3)]
    found = _judge("kv_pressure", _board("kv_pressure", snapshot(steps=steps), _users()))
    assert found.answer == "preempt" and found.step == 2
    assert found.words.startswith("step 2: 8 requests ran and 0 of 16 KV blocks were free when "
                                  "req-7 was preempted")  # fmt: skip
    later = snapshot(steps=[*steps, step(4, events=[("preempted", "req-6", "")])])
    assert _judge("kv_pressure", _board("kv_pressure", later, _users())) == found
    filling = _judge("kv_pressure", _board("kv_pressure", snapshot(steps=steps[:1]), _users()))
    assert filling.progress.startswith("the pool is filling")
    done = [replace(r, finished=True, stop_reason="length") for r in _users()]
    slow = _judge("kv_pressure", _board("kv_pressure", snapshot(steps=steps[:1]), done))
    assert slow.answer == "slow"
    refused = [replace(_users()[0], finished=True, error="no room"), *_users()[1:]]
    assert _judge("kv_pressure", _board("kv_pressure", snapshot(), refused)).answer == "refuse"


def test_prefix_cache_measures_the_first_requests_at_their_admission():
    admitted = [("admitted", f"req-{i}", f"100 tokens, {0 if i == 0 else 64} cached")
                for i in range(8)]  # fmt: skip
    steps = [step(1, events=admitted[:1]), step(2, events=admitted[1:])]
    found = _judge("prefix_cache", _board("prefix_cache", snapshot(steps=steps), _users()))
    assert found.answer == "most" and found.step == 2
    assert found.words.startswith("the first 8 requests brought 800 prompt tokens; 448 of them")
    assert "(56%)" in found.words
    early = _board("prefix_cache", snapshot(steps=steps[:1]), _users())
    assert _judge("prefix_cache", early) == Measuring("1 of 8 requests admitted")


def test_static_vs_continuous_measures_the_speedup_once_both_lanes_are_done():
    snap = snapshot()
    stats = {"continuous": LaneStats("continuous", "continuous", 16, 16, 90, 9.0, 8.0, 80),
             "static": LaneStats("static", "static", 16, 16, 200, 20.0, 20.0, 190)}  # fmt: skip
    board = _board("static_vs_continuous", snap, lanes=("continuous", "static"),
                   snapshots={"continuous": snap, "static": snap}, stats=stats)  # fmt: skip
    found = _judge("static_vs_continuous", board)
    assert found.answer == "lot" and "2.50x" in found.words and found.step == 190
    running = replace(board, stats={**stats, "static": replace(stats["static"], num_finished=9)})
    assert isinstance(_judge("static_vs_continuous", running), Measuring)


def test_vip_users_measures_steps_from_arrival_to_a_seat():
    def req(rid, priority, arrival, scheduled=None):
        return replace(request(rid, arrival=arrival, scheduled=scheduled), priority=priority)

    regulars = [req(f"req-{i}", 1, 0.0, 0.1 if i < 4 else None) for i in range(8)]
    vips = [req("req-8", 0, 2.0, 2.1), req("req-9", 0, 2.0, 2.1)]
    steps = [step(n, start=n * 0.1) for n in range(1, 20)]
    steps += [
        step(
            20,
            start=2.0,
            events=[
                ("preempted", "req-3", ""),
                ("preempted", "req-2", ""),
                ("admitted", "req-8", ""),
                ("admitted", "req-9", ""),
            ],
        )
    ]
    records = [RequestRecord(f"req-{i}", f"user:u{i}", "p", 0.0) for i in range(10)]
    snap = snapshot(steps=steps, requests=[*regulars, *vips])
    found = _judge("vip_users", _board("vip_users", snap, records))
    assert found.answer == "preempt" and found.step == 20
    assert "at most 0 step(s) later (step 20); 2 running regular(s) were preempted" in found.words
    assert "4 regular(s) who came earlier still waited" in found.words
    late = [*steps[:-1], step(20, start=2.0), step(30, start=3.0,
            events=[("admitted", "req-8", ""), ("admitted", "req-9", "")])]  # fmt: skip
    queued = _judge("vip_users", _board("vip_users", snapshot(steps=late, requests=[*regulars,
                                                              *vips]), records))  # fmt: skip
    assert queued.answer == "queue"
    early = _board("vip_users", snapshot(steps=steps[:-1], requests=regulars), records)
    assert _judge("vip_users", early) == Measuring("0 of 2 VIPs admitted")


def test_beam_search_counts_the_physical_blocks_of_live_beams():
    waiting = snapshot(requests=[request("req-1")])
    assert isinstance(_judge("beam_search", _board("beam_search", waiting)), Measuring)
    tables = ((0, 1, 2), (0, 1, 3), (0, 1, 4), (0, 1, 5))
    beams = replace(request("req-1", output=5), beam_width=4, seq_block_tables=tables,
                    copied_blocks=((3, 2, 4),))  # fmt: skip
    found = _judge("beam_search", _board("beam_search", snapshot(requests=[beams])))
    assert found.answer == "shared"
    assert "4 beams hold 12 KV blocks between them in 6 physical blocks: 2 shared" in found.words
    apart = replace(beams, seq_block_tables=((0, 1), (2, 3), (4, 5), (6, 7)))
    assert _judge("beam_search", _board("beam_search", snapshot(requests=[apart]))).answer \
        == "copies"  # fmt: skip


def _prefix_board(cached=64):
    admitted = [("admitted", f"req-{i}", f"100 tokens, {cached} cached") for i in range(8)]
    return _board("prefix_cache", snapshot(steps=[step(1, events=admitted)]), _users())


def test_the_panel_asks_first_then_puts_the_verdict_next_to_the_guess():
    board, book = _prefix_board(), VerdictBook()
    asked = render_lesson(board, "prefix_cache", None, book=book)
    assert "pg-q" in asked and "Pick an answer" in asked and "Prefix caching is on" in asked
    assert "enable_prefix_caching True" in asked and "the first request computes" not in asked
    wrong = render_lesson(board, "prefix_cache", "none", book=book)
    assert "your guess: <b>under 10 %</b>" in wrong and "not quite" in wrong
    assert "measured at step 1: <b>over 50 %</b>" in wrong
    assert "See the chart <b>Tokens per step</b>" in wrong  # the explanation, after the verdict
    assert ">right<" in render_lesson(board, "prefix_cache", "most", book=book)
    skipped = render_lesson(board, "prefix_cache", "", book=book)
    assert "no guess" in skipped and "right" not in skipped and "measured at" in skipped
    assert "Pick a preset" in render_lesson(board, None, None, book=book)


def test_the_first_verdict_of_a_run_is_latched_for_every_viewer():
    book = VerdictBook()
    first = render_lesson(_prefix_board(64), "prefix_cache", "most", 0, book=book)
    changed = render_lesson(_prefix_board(0), "prefix_cache", "most", 0, book=book)
    assert changed == first and "over 50 %" in changed  # the end point passed: it holds
    reset = replace(_prefix_board(0), run=1)  # the next run measures afresh
    assert "under 10 %" in render_lesson(reset, "prefix_cache", "none", 1, book=book)
    assert render_lesson(reset, "prefix_cache", "most", 0, book=book) == first  # still run 0's


def test_a_run_reset_or_ended_before_its_evidence_is_inconclusive():
    book = VerdictBook()
    early = _board("prefix_cache", snapshot(steps=[step(1)]), _users())
    assert "measuring: 0 of 8 requests admitted" in render_lesson(early, "prefix_cache", "most",
                                                                 0, book=book)  # fmt: skip
    reset = replace(early, run=1, workload="chat_burst")
    text = render_lesson(reset, "prefix_cache", "most", 0, book=book)
    assert "inconclusive" in text and "reset before the evidence was complete" in text
    assert "0 of 8 requests admitted" in text
    done = replace(early, users=tuple(replace(u, state="done") for u in early.users))
    text = render_lesson(done, "prefix_cache", "most", 0, book=VerdictBook())
    assert "inconclusive" in text and "the run ended before the evidence was complete" in text


def test_totals_default_to_no_preemption_cost():
    assert Totals().num_recomputed_tokens == 0 and Totals().preemption_time_lost == 0.0
