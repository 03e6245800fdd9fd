"""Lessons: every preset asks a question; each measure decides its answer from a board, and
the panel puts the measured answer next to the guess."""

from dataclasses import replace

from engine.telemetry import Totals
from playground.board.state import LaneStats
from playground.handles import RequestRecord
from playground.teaching.lessons import LESSONS, render_lesson
from playground.workload.scenarios import SCENARIOS
from tests.playground.boards import busy_board, request, snapshot, step
from tests.playground.test_scenarios import run_preset


def _board(workload, snap, records=(), num_users=8, **kw):
    board = busy_board(num_users=num_users, num_steps=1)
    kw = {"snapshots": {"main": snap}, **kw}
    return replace(board, workload=workload, records=tuple(records), **kw)


def test_every_preset_opens_with_a_question_of_two_or_three_answers():
    assert set(LESSONS) == set(SCENARIOS)
    for lesson in LESSONS.values():
        assert lesson.question.endswith("?") and 2 <= len(lesson.answers) <= 3
        assert len({k for k, _ in lesson.answers}) == len(lesson.answers)


def test_chat_burst_counts_the_steps_until_every_user_runs():
    records = [RequestRecord(f"req-{i}", f"user:u{i}", "p", 0.0) for i in range(8)]
    admitted = [("admitted", f"req-{i}", "") for i in range(8)]
    snap = snapshot(steps=[step(4, events=admitted[:5]), step(5, events=admitted[5:])])
    measured = LESSONS["chat_burst"].measure(_board("chat_burst", snap, records))
    assert measured.answer == "few" and "after 2 steps (step 5)" in measured.text
    early = snapshot(steps=[step(4, events=admitted[:5])])
    assert LESSONS["chat_burst"].measure(_board("chat_burst", early, records)).answer is None


def test_long_vs_short_sees_chunks_next_to_decodes():
    steps = [step(1, prefill=64, decode=3, events=[("prefill_chunk", "long", "")]),
             step(2, prefill=20, decode=3, events=[("prefill_done", "long", "")])]  # fmt: skip
    measured = LESSONS["long_vs_short"].measure(_board("long_vs_short", snapshot(steps=steps)))
    assert measured.answer == "together" and "in 1 steps" in measured.text
    alone = [step(1, prefill=64, events=[("prefill_chunk", "a", "")])]
    assert LESSONS["long_vs_short"].measure(_board("x", snapshot(steps=alone))).answer is None


def test_prefix_cache_measures_the_share_the_cache_served():
    done = [replace(request(f"r{i}", status="finished", prompt=100), num_cached_tokens=64)
            for i in range(8)]  # fmt: skip
    measured = LESSONS["prefix_cache"].measure(_board("prefix_cache", snapshot(requests=done)))
    assert measured.answer == "most" and "512 of 800 prompt tokens (64%)" in measured.text
    few = snapshot(requests=done[:3])
    assert LESSONS["prefix_cache"].measure(_board("prefix_cache", few)).answer is None


def test_static_vs_continuous_measures_the_speedup_once_both_lanes_are_done():
    snap = snapshot()
    stats = {"continuous": LaneStats("continuous", "continuous", 16, 16, 90, 9.0, 8.0, 80),
             "static": LaneStats("static", "static", 16, 16, 200, 20.0, 20.0, 190)}  # fmt: skip
    board = _board("static_vs_continuous", snap, lanes=("continuous", "static"),
                   snapshots={"continuous": snap, "static": snap}, stats=stats)  # fmt: skip
    measured = LESSONS["static_vs_continuous"].measure(board)
    assert measured.answer == "lot" and "2.50x" in measured.text
    running = replace(board, stats={**stats, "static": replace(stats["static"], num_finished=9)})
    assert LESSONS["static_vs_continuous"].measure(running).answer is None


def test_kv_pressure_on_a_real_engine_answers_preempted(make_engine):
    engine, workload, _ = run_preset(
        make_engine, "kv_pressure", 200, lambda e, w: e.snapshot().totals.num_preemptions
    )
    snap = engine.snapshot()
    board = _board("kv_pressure", snap, users=workload.views())
    measured = LESSONS["kv_pressure"].measure(board)
    assert measured.answer == "preempt"
    assert f"{snap.totals.num_preemptions} preemptions" in measured.text
    assert f"{snap.totals.num_recomputed_tokens} tokens recomputed" in measured.text


def test_the_panel_puts_the_measured_answer_next_to_the_guess():
    done = [replace(request(f"r{i}", status="finished", prompt=100), num_cached_tokens=64)
            for i in range(8)]  # fmt: skip
    board = _board("prefix_cache", snapshot(requests=done))
    asked = render_lesson(board, "prefix_cache", None)
    assert "pg-q" in asked and "Pick an answer" in asked
    wrong = render_lesson(board, "prefix_cache", "none")
    assert "your guess: <b>under 10 %</b>" in wrong and "not quite" in wrong
    assert "measured: <b>over 50 %</b>" in wrong
    assert ">right<" in render_lesson(board, "prefix_cache", "most")
    skipped = render_lesson(board, "prefix_cache", "")
    assert "no guess" in skipped and "right" not in skipped and "measured:" in skipped
    other = render_lesson(replace(board, workload="chat_burst"), "prefix_cache", "most")
    assert "another workload" in other
    assert "Pick a preset" in render_lesson(board, None, None)


def test_totals_default_to_no_preemption_cost():
    assert Totals().num_recomputed_tokens == 0 and Totals().preemption_time_lost == 0.0


def test_vip_users_measures_how_long_the_vips_waited_against_the_regulars():
    def req(rid, priority, arrival, scheduled):
        return replace(request(rid, arrival=arrival, scheduled=scheduled), priority=priority)

    regulars = [req(f"req-{i}", 1, 0.0, 0.5 * i) for i in range(8)]  # 1.75 s on average
    vips = [req("req-8", 0, 2.0, 2.1), req("req-9", 0, 2.0, 2.3)]
    preempted = Totals(num_preemptions=2)
    snap = snapshot(requests=[*regulars, *vips], totals=preempted)
    measured = LESSONS["vip_users"].measure(_board("vip_users", snap))
    assert measured.answer == "preempt" and "waited 0.2 s" in measured.text
    queued = snapshot(requests=[*regulars, req("req-8", 0, 2.0, 6.0), req("req-9", 0, 2.0, 7.0)])
    assert LESSONS["vip_users"].measure(_board("vip_users", queued)).answer == "queue"
    early = snapshot(requests=regulars)
    assert LESSONS["vip_users"].measure(_board("vip_users", early)).answer is None


def test_beam_search_reads_the_forks_and_prunes_of_the_step_log():
    none = snapshot(steps=[step(1, events=[("admitted", "req-1", "")])])
    assert LESSONS["beam_search"].measure(_board("beam_search", none)).answer is None
    events = [("beams", "req-1", "forked beam 4 from 1, forked beam 5 from 2, pruned 3")]
    snap = snapshot(steps=[step(1), step(2, events=events)])
    measured = LESSONS["beam_search"].measure(_board("beam_search", snap))
    assert measured.answer == "shared" and measured.text.startswith("2 beams forked")
    assert "1 prunings" in measured.text
