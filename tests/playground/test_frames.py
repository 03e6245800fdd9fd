"""The board's frame: built once per BoardState, its bytes ready to send (frames.py)."""

import json
import re

import pytest

from playground.board.frames import FrameBuilder, event
from playground.board.views import COMPARE_KEYS, PLOT_KEYS
from playground.teaching.lessons import LESSONS, render_lesson
from playground.workload.scenarios import SCENARIOS
from tests.playground.driving import fixed, settled

EVENT = re.compile(rb"event: (\w+)\n(?:id: (\d+)\n)?data: (.*)\n\n")


def events(data: bytes) -> list[tuple[str, dict]]:
    found = [(m[1].decode(), json.loads(m[3])) for m in EVENT.finditer(data)]
    assert b"".join(m[0] for m in EVENT.finditer(data)) == data  # nothing but whole events
    return found


def test_a_frame_holds_the_shared_board_and_every_chart_for_a_new_viewer(driver):
    handle = driver.submit("frames for all", fixed(6), owner="visitor:abcdef")
    handle.result(timeout=30)
    state = settled(driver, lambda s: any(r.finished for r in s.records))
    frame = FrameBuilder().build(state, now=100.0)
    (name, board), *charts = events(frame.full)
    assert name == "board" and board["version"] == state.version == frame.version
    assert handle.request_id in board["cards"] and "Visitor abcd" in board["cards"]
    assert not board["cards"].startswith('<div class="pg-cards">')  # into the page's own grid
    assert "You" not in board["cards"] and {"stats", "log", "scoreboard"} <= board.keys()
    assert "What the stop reasons say" in board["stops"] and board["alert"] == ""
    assert board["compare"] is False and board["lessons"] == []  # no preset runs
    assert board["published"] == round(state.published_at, 3) <= board["at"]  # the driver's
    assert [n for n, _ in charts] == ["charts"] and set(charts[0][1]) == set(PLOT_KEYS)
    assert frame.delta == frame.full  # the first frame: every chart changed
    banner = FrameBuilder().build(state, alert="<b>stuck</b>", now=100.0)
    assert events(banner.delta)[0][1]["alert"] == "<b>stuck</b>" == banner.alert


def test_later_frames_carry_only_the_charts_that_changed_and_when_they_are_due(driver):
    builder = FrameBuilder(chart_interval_s=0.5)
    first = builder.build(driver.state(), now=100.0)
    driver.submit("one more", fixed(4)).result(timeout=30)
    state = settled(driver, lambda s: s.version > first.version and s.snapshot.num_running == 0)
    early = builder.build(state, now=100.2)  # charts not due yet
    assert [n for n, _ in events(early.delta)] == ["board"] and builder.charts_due(state, 100.6)
    assert events(early.full)[1:] == events(first.full)[1:]  # a new viewer: the charts sent
    due = builder.build(state, now=100.6)
    changed = events(due.delta)[1][1]
    assert 0 < len(changed) < len(PLOT_KEYS) + len(COMPARE_KEYS)  # the step charts moved
    assert not builder.charts_due(state, 101.2)  # this version's charts were sent
    again = builder.build(state, now=101.2)  # a new banner, say: the board event alone
    assert [n for n, _ in events(again.delta)] == ["board"]
    assert set(events(again.full)[1][1]) == set(PLOT_KEYS)


def test_an_event_is_one_line_of_data_and_a_bad_interval_is_refused():
    assert event("board", b'{"a":1}', 3) == b'event: board\nid: 3\ndata: {"a":1}\n\n'
    with pytest.raises(AssertionError):
        event("board", b"two\nlines")
    with pytest.raises(ValueError, match="chart_interval_s"):
        FrameBuilder(chart_interval_s=-1)


def test_the_running_lesson_comes_for_every_guess_and_the_last_run_stays(driver):
    """The panel of each guess ("" skipped) of the running preset's run, so every session's
    panel is a lookup; after a reset the old run's panels say how it ended, once."""
    sc = SCENARIOS["chat_burst"]
    workload = sc.workload(2, "all at once", 1.0, seed=1)
    sc.start(driver, sc.engine_config(driver.base_config), workload=workload)
    driver.pause()
    state = settled(driver, lambda s: s.workload == "chat_burst")
    builder = FrameBuilder()
    (lesson,) = events(builder.build(state).delta)[0][1]["lessons"]
    guesses = ["", *(k for k, _ in LESSONS["chat_burst"].answers)]
    assert lesson["key"] == "chat_burst" and lesson["run"] == state.run
    assert list(lesson["panels"]) == guesses
    assert "your guess: <b>1 or 2 steps</b>" in lesson["panels"]["few"]
    assert "no guess" in lesson["panels"][""]
    driver.reset(driver.base_config)
    after = settled(driver, lambda s: s.run > state.run)
    (old,) = events(builder.build(after).delta)[0][1]["lessons"]  # no preset runs now
    assert old["run"] == state.run and "measuring" not in old["panels"]["few"]  # it ended
    assert old["panels"]["few"] == render_lesson(after, "chat_burst", "few", state.run)
