"""The board's callbacks: escaped refusals, the timer's interval and what a tick brings (the
board itself comes over the stream), the seat, the inspector."""

import time

import gradio as gr
import pytest

from playground.access.audience import MAX_INTERVAL_S, TICKS_PER_S, WATCHER_TICK_S
from playground.access.seat import Seat
from playground.access.seat_pass import SeatPass
from playground.board import cards
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
    _callback(demo, "arrive")(-1, None, TICK_S, "", "", None, 0, request)
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
    """The tick answers the session's timer interval (the board itself comes over the stream):
    a watcher's own things every WATCHER_TICK_S while few watch, rarer for a crowd, never rarer
    than MAX_INTERVAL_S; a session with a live request of its own keeps TICK_S."""
    demo = build_ui(driver)
    tick = _callback(demo, "tick")  # timer and page load

    def interval(session: str, every: float):  # the timer output of one tick
        return tick(-1, None, every, "", "", None, 0, gr.Request(session_hash=session)).timer

    assert interval("s0", WATCHER_TICK_S) == gr.skip()  # left as it is
    assert interval("s0", TICK_S) == WATCHER_TICK_S
    for i in range(1, 80):
        interval(f"s{i}", TICK_S)
    assert interval("s0", TICK_S) == 80 / TICKS_PER_S
    for i in range(80, int(MAX_INTERVAL_S * TICKS_PER_S) + 20):
        interval(f"s{i}", TICK_S)
    assert interval("s0", TICK_S) == MAX_INTERVAL_S
    me = visitor(demo, "mine")
    handle = driver.submit("a long one", fixed(400), owner=cards.visitor_owner("mine"))
    settled(driver, lambda s: any(r.request_id == handle.request_id for r in s.records))
    driver.pause()  # the request stays unfinished
    assert tick(-1, None, MAX_INTERVAL_S, "", "", None, 0, me).timer == TICK_S
    assert tick(-1, None, MAX_INTERVAL_S, "", "", 3, 0, visitor(demo, "back")).timer == TICK_S
    driver.abort(handle.request_id)
    driver.resume()


def test_a_watchers_tick_brings_only_its_own_things_and_the_slider_while_live(driver):
    """No stat tiles, log, banner or charts in a tick (the stream's); the rewind slider's range
    follows the steps kept while the session is live, and stays the visitor's while rewound."""
    demo = build_ui(driver)
    tick, me = _callback(demo, "tick"), visitor(demo, "a")
    driver.submit("some steps", fixed(4)).result(timeout=30)
    settled(driver, lambda s: driver.history.steps() is not None)
    window = driver.history.steps()
    out = tick(-1, None, TICK_S, "", "", None, 0, me)
    assert set(out._fields) == {"version", "timer", "board", "inspector", "own_charts",
                                "stream_pass", "slider", "seat", "role"}  # fmt: skip
    assert out.board == gr.skip() and out.inspector == gr.skip() and out.own_charts == gr.skip()
    assert out.slider.maximum >= window[1] and out.slider.value == out.slider.maximum
    assert tick(-1, None, TICK_S, "", "", None, driver.history.steps()[1], me).slider == gr.skip()
    rewound = tick(-1, None, TICK_S, "", "", window[0], 0, me)
    assert rewound.slider == gr.skip() and rewound.version == gr.skip()


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
    early = tick(-1, None, TICK_S, "", "", None, 0, gr.Request(session_hash="s"))
    assert early.role == gr.skip() and early.seat == gr.skip()  # its load has not run yet
    first = _callback(demo, "arrive")(-1, None, TICK_S, "", "", None, 0, visitor(demo, "s"))
    assert first.role == "driver:running" and first.seat == gr.skip()  # open: no banner
    late = tick(-1, None, TICK_S, "stranger:running", "", None, 0, visitor(demo, "s"))
    assert late.role == "driver:running"  # a late answer left the page behind: sent again
    assert tick(-1, None, TICK_S, "driver:running", "", None, 0, visitor(demo, "s")).role \
        == gr.skip()  # fmt: skip


def test_the_seat_button_answers_with_the_banner_and_role_at_once(driver):
    """A watcher's own tick may be many seconds away: the button's answer shows the seat."""
    demo = build_ui(driver, Seat("seat", on_handover=driver.resume))
    toggle = _callback(demo, "toggle_seat")
    holder, other = visitor(demo, "h"), visitor(demo, "o")
    banner, role = toggle("free:running", "", holder)
    assert role == "driver:running" and "You drive" in banner, banner
    banner, role = toggle("watcher:running", "", other)
    assert role == "queued:running" and banner != gr.skip()
    assert toggle("driver:running", banner, other)[1] == "watcher:running"  # left the queue


def test_the_inspector_draws_the_drivers_answer_and_the_tick_keeps_an_unpicked_one(driver):
    """Picking a request answers with its detail as the driver holds it now, even on a paused
    board that publishes nothing new, and its block table; a tick sent before the pick (no
    request yet) does not put the "pick a request" text back over it."""
    demo = build_ui(driver)
    me = visitor(demo, "a")
    handle = driver.submit("inspect me", fixed(4), owner=cards.visitor_owner("a"), wait=True)
    handle.result(timeout=30)
    driver.pause()
    html, figures = _callback(demo, "inspect_request")(handle.request_id, me)
    assert 'class="pg-inspector"' in html and handle.request_id in html, html
    assert figures.startswith('{"blocks":{') and handle.request_id in figures
    assert _callback(demo, "inspect_request")(None, me)[1] == ""  # the board's pick back
    tick = _callback(demo, "tick")
    unpicked = tick(-1, None, TICK_S, "", "", None, 0, me)
    assert unpicked.board != gr.skip() and unpicked.inspector == gr.skip()  # its own card
    settled(driver, lambda s: handle.request_id in s.details)  # the watch reaches the board
    picked = tick(-1, handle.request_id, TICK_S, "", "", None, 0, me)
    assert 'class="pg-inspector"' in picked.inspector and picked.own_charts.startswith("{")


def test_only_the_seat_holders_tick_carries_a_stream_pass_and_it_lapses_when_it_leaves(driver):
    """The holder's page opens its board stream with the token (every frame, not the
    crowd's rate); a watcher gets none, and a holder that gives the seat up loses its token."""
    seat_pass = SeatPass()
    demo = build_ui(driver, Seat("seat", on_handover=driver.resume), seat_pass)
    tick, toggle = _callback(demo, "tick"), _callback(demo, "toggle_seat")
    holder, other = visitor(demo, "h"), visitor(demo, "o")
    toggle("free:running", "", holder)
    token = tick(-1, None, TICK_S, "", "", None, 0, holder).stream_pass
    assert token and seat_pass.tokens() == (token,)
    assert tick(-1, None, TICK_S, "", "", None, 0, other).stream_pass == ""
    toggle("driver:running", "", holder)  # gives the seat up
    assert tick(-1, None, TICK_S, "", "", None, 0, holder).stream_pass == ""
    assert seat_pass.tokens() == ()


def test_a_page_that_closes_leaves_no_state_in_gradio(driver):
    """Gradio would keep a closed session's state (a copy of each component it updated) until
    10000 newer sessions pushed it out; the board's unload drops it, and only its own."""
    from gradio.routes import App
    from starlette.requests import Request

    demo = build_ui(driver)
    app = App.create_app(demo)
    for session in ("gone", "stays"):
        app.state_holder[session]  # made by the session's first event, as Gradio does
    page = Request({"type": "http", "app": app, "headers": [], "query_string": b""})
    _callback(demo, "leave")(gr.Request(request=page, session_hash="gone"))
    assert "gone" not in app.state_holder and "stays" in app.state_holder
    _callback(demo, "leave")(gr.Request(session_hash="stays"))  # no app behind it: nothing
    assert "stays" in app.state_holder
