"""The board's callbacks: escaped refusals, the timer's interval, the watchdog banner, the
inspector."""

import time

import gradio as gr
import pytest

from playground.access.seat import Seat
from playground.ui import TICK_S, build_ui
from playground.ui.callbacks import BoardCallbacks
from playground.ui.controls import NUM_DRIVE_CONTROLS, Knobs
from tests.playground.driving import fixed, settled

XSS = "<img src=x onerror=alert(1)>"


def _callback(demo: gr.Blocks, name: str):
    return next(f.fn for f in demo.fns.values() if f.name == name)


def visitor(demo: gr.Blocks, session: str, **query) -> gr.Request:
    """A session whose page loaded (the load event ran): its request."""
    request = gr.Request(session_hash=session, query_params=query)
    _callback(demo, "arrive")(-1, -1, 0.0, None, TICK_S, "", "", request)
    return request


def test_refusals_in_toasts_and_the_send_status_are_escaped(driver):
    """Gradio renders gr.Warning toasts and the status Markdown as HTML, and a refusal can
    quote the visitor's own text: a stop string over 256 characters, a custom pace, a knob."""
    demo = build_ui(driver)
    submit = _callback(demo, "submit_prompt")
    me = visitor(demo, "a")
    with pytest.warns(UserWarning) as toasts:  # gr.Warning outside a request warns
        _, status = submit("hi", 8, 0.7, 0.95, 0, -1, XSS * 10, True, me)
        _callback(demo, "set_pace")(XSS, me)
        _callback(demo, "start")("chat_burst", 2, "all at once", 1.0, XSS, "fcfs", False, 256,
                                 16, 128, me)  # fmt: skip
        _callback(demo, "reset_board")("continuous", XSS, 256, 16, 128, me)
    shown = [status, *(str(w.message) for w in toasts if "img" in str(w.message))]
    assert len(shown) == 5 and status.startswith("Refused: stop strings")
    for text in shown:
        assert "<img" not in text and "&lt;img src=x onerror=alert(1)&gt;" in text, text
    assert driver.state().workload is None  # the refused knobs started nothing


def test_the_timer_slows_down_while_many_sessions_watch(driver):
    """The tick answers the session's timer interval: TICK_S for a few watchers, longer for
    more (charts likewise), so a small CPU is not spent on redraws."""
    demo = build_ui(driver)
    tick = next(f.fn for f in demo.fns.values() if f.name == "tick")  # timer and page load

    def interval(session: str, every: float):  # the timer output of one tick
        out = tick(-1, -1, 0.0, None, every, "", "", gr.Request(session_hash=session))
        return out.timer

    assert interval("s0", TICK_S) == gr.skip()  # one watcher: the timer is left as it is
    assert interval("s0", 1.0) == TICK_S  # a slowed-down timer is set back
    for i in range(1, 8):
        interval(f"s{i}", TICK_S)
    assert interval("s0", TICK_S) == 2 * TICK_S  # 8 watchers, 4 at full rate


def test_the_watchdog_banner_is_sent_only_when_it_can_have_changed(driver):
    demo = build_ui(driver)
    tick = next(f.fn for f in demo.fns.values() if f.name == "tick")
    request = gr.Request(session_hash="a")
    first = tick(-1, -1, 0.0, None, TICK_S, "", "", request)
    assert first.alert == ""  # a new board version: the (empty) banner comes with it
    version = first.version
    assert tick(version, version, 0.0, None, TICK_S, "", "", request).alert == gr.skip()


def test_a_preset_shows_its_knobs_and_starts_with_them(driver):
    cb = BoardCallbacks(driver)
    cb.seat.arrive("a", time.monotonic())
    values = cb.answer_lesson(-1, {"key": "kv_pressure"}, gr.Request(session_hash="a"))
    knobs = Knobs(*values[: len(Knobs._fields)])
    assert knobs.scenario == "kv_pressure" and knobs.kv_blocks == 40
    assert driver.config.num_kv_blocks == 40 and driver.config.block_size == 16
    assert driver.state().workload == "kv_pressure" and not driver.is_paused


def test_a_role_change_sets_what_the_session_may_use(driver):
    cb = BoardCallbacks(driver, Seat("seat", on_handover=driver.resume))
    pause, *drive, seat_button = cb.show_role("watcher:paused")
    assert pause["value"] == "Resume" and pause["interactive"] is False
    assert len(drive) == NUM_DRIVE_CONTROLS and all(u["interactive"] is False for u in drive)
    assert seat_button["value"] == "Queue for the seat" and seat_button["visible"] is True
    pause, *drive, seat_button = cb.show_role("free:running")
    assert pause["value"] == "Pause" and all(u["interactive"] for u in [pause, *drive])
    assert seat_button["value"] == "Take the seat"
    _, *_, seat_button = BoardCallbacks(driver).show_role("driver:running")  # open mode
    assert seat_button["visible"] is False


def test_the_tick_sends_the_role_until_the_page_shows_it_and_none_before_the_load(driver):
    demo = build_ui(driver)
    tick = _callback(demo, "tick")
    early = tick(-1, -1, 0.0, None, TICK_S, "", "", gr.Request(session_hash="s"))
    assert early.role == gr.skip() and early.seat == gr.skip()  # its load has not run yet
    first = _callback(demo, "arrive")(-1, -1, 0.0, None, TICK_S, "", "", visitor(demo, "s"))
    assert first.role == "driver:running" and first.seat == gr.skip()  # open: no banner
    late = tick(-1, -1, 0.0, None, TICK_S, "stranger:running", "", visitor(demo, "s"))
    assert late.role == "driver:running"  # a late answer left the page behind: sent again
    assert tick(-1, -1, 0.0, None, TICK_S, "driver:running", "", visitor(demo, "s")).role \
        == gr.skip()  # fmt: skip


def test_the_inspector_draws_the_drivers_answer_and_the_tick_keeps_an_unpicked_one(driver):
    """Picking a request answers with its detail as the driver holds it now, even on a paused
    board that publishes nothing new; and a tick sent before the pick (no request yet) does
    not put the "pick a request" text back over it."""
    demo = build_ui(driver)
    me = visitor(demo, "a")
    handle = driver.submit("inspect me", fixed(4), wait=True)
    handle.result(timeout=30)
    driver.pause()
    html = _callback(demo, "inspect_request")(handle.request_id, me)
    assert 'class="pg-inspector"' in html and handle.request_id in html, html
    tick = _callback(demo, "tick")
    unpicked = tick(-1, -1, 0.0, None, TICK_S, "", "", me)
    assert unpicked.board != gr.skip() and unpicked.inspector == gr.skip()
    settled(driver, lambda s: handle.request_id in s.details)  # the watch reaches the board
    picked = tick(-1, -1, 0.0, handle.request_id, TICK_S, "", "", me)
    assert 'class="pg-inspector"' in picked.inspector
