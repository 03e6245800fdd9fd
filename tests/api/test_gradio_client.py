"""The board's Gradio doors: `/generate` is the one public endpoint; every other handler is
private to the page (not in view_api(), refused by gradio_client) and answers only sessions
whose page loaded. In seat mode a second visitor cannot pause, slow or reset the holder's run,
and the seat passes on leave and on timeout."""

import time

import pytest
from gradio_client import Client

import app as app_module
from playground.access.seat import Seat, SeatPolicy
from tests.api.server import Page, Server, wait_for

GENERATE_ENDPOINT = "/generate"  # prompt (+ max_tokens, temperature) in, generated text out
INTERNAL = ["/start", "/open_lesson", "/answer_lesson", "/toggle_pause", "/single_step",
            "/reset_board", "/set_pace", "/submit_prompt", "/tick", "/arrive", "/toggle_seat",
            "/cancel_mine", "/inspect_request", "/list_requests"]  # fmt: skip
STRANGER = "the board's controls answer the board's own page only"


@pytest.fixture(scope="module")
def gradio(app_server):
    return Client(app_server.url + "/", verbose=False)


def test_generate_endpoint_returns_the_text(gradio):
    text = gradio.predict("Say hello", api_name=GENERATE_ENDPOINT)
    assert isinstance(text, str) and text


def test_only_generate_is_in_the_gradio_api(gradio):
    for every in (False, True):
        api = gradio.view_api(print_info=False, return_format="dict", all_endpoints=every)
        assert list(api["named_endpoints"]) == [GENERATE_ENDPOINT] and not api["unnamed_endpoints"]
    for name in INTERNAL:
        with pytest.raises(ValueError, match="Cannot find a function"):
            gradio.predict("1e-9", api_name=name)


def test_a_call_without_the_pages_session_is_refused(app_server):
    driver = app_server.driver
    stranger = Page(app_server.url, "never-loaded")
    pace, config = driver.state().pace, driver.config
    for name, data in [("set_pace", ["1e-9"]), ("toggle_pause", []), ("single_step", []),
                       ("reset_board", ["static", "fcfs", 16, 1, 8]),
                       ("open_lesson", ["chat_burst"]),
                       ("answer_lesson", [-1, {"key": "chat_burst"}]),
                       ("submit_prompt", ["hi", 4, 0.0, 1.0, 0, -1, "", False]),
                       ("toggle_seat", ["", ""]), ("inspect_request", ["req-1"])]:  # fmt: skip
        r = stranger.call(name, *data)
        assert r.status_code >= 400 and STRANGER in r.json()["error"], (name, r.text)
    time.sleep(0.2)
    assert driver.state().pace == pace and not driver.is_paused and driver.config is config


def test_a_pages_session_sends_prompts_and_drives_in_open_mode(app_server):
    driver = app_server.driver
    page = Page(app_server.url, "a-page").load()
    r = page.call("submit_prompt", "Say hello", 5, 0.0, 1.0, 0, -1, "", False)
    assert r.status_code == 200 and "Sent as" in r.json()["data"][1], r.text
    record = wait_for(
        lambda: next(
            (r for r in driver.state().records if r.owner == "visitor:a-page" and r.finished), None
        )
    )
    assert record.num_output_tokens == 5  # fmt: skip
    try:
        assert page.call("set_pace", "1e-9").status_code == 200  # refused with a warning
        assert driver.state().pace is None
        page.call("set_pace", "2")
        wait_for(lambda: driver.state().pace == 2.0)
    finally:
        driver.set_pace("max")
    assert page.tick() == ""  # open mode, running: no seat banner


@pytest.fixture(scope="module")
def seat_server(make_driver):
    driver = make_driver()
    policy = SeatPolicy(term_s=30, idle_s=1.5, gone_s=30, burst=20, actions_per_s=10)
    seat = Seat("seat", policy, on_handover=driver.resume)
    server = Server(app_module.create_app(driver, seat=seat))
    server.driver = driver
    yield server
    server.stop()


def test_a_second_visitor_cannot_pause_slow_or_reset_the_holders_run(seat_server):
    driver = seat_server.driver
    a, b = Page(seat_server.url, "aaaa1").load(), Page(seat_server.url, "bbbb2").load()
    assert "controls are free" in b.tick()
    a.call("toggle_pause")  # a free seat: a takes it by pausing
    wait_for(lambda: driver.is_paused)
    assert "You drive" in a.tick() and "Visitor aaaa</b> drives" in b.tick()
    engine, pace = driver.config, driver.state().pace
    for name, data in [("toggle_pause", []), ("set_pace", ["1e-9"]), ("set_pace", ["0.5"]),
                       ("reset_board", ["static", "fcfs", 16, 1, 8]),
                       ("answer_lesson", [-1, {"key": "chat_burst"}]),
                       ("single_step", []), ("start", ["chat_burst", 2, "all at once", 1.0,
                       "continuous", "fcfs", False, 64, 4, 32])]:  # fmt: skip
        assert b.call(name, *data).status_code == 200  # answered, with a warning
    time.sleep(0.3)
    assert driver.is_paused and driver.state().pace == pace and driver.config is engine
    assert driver.state().workload is None
    # b queues; a leaves: the seat passes to b and the engine resumes
    b.call("toggle_seat", b.role, b.banner)
    assert "1st in the queue" in b.tick()
    a.leave()
    wait_for(lambda: not driver.is_paused)
    assert "You drive" in b.tick()
    # b does nothing for idle_s: the seat is free again, and a visitor c takes it
    c = Page(seat_server.url, "cccc3").load()
    wait_for(lambda: "controls are free" in c.tick(), timeout=10)
    c.call("toggle_pause")
    wait_for(lambda: driver.is_paused)
    assert "Visitor cccc</b> drives" in b.tick()
    time.sleep(1.6)  # c's seat times out while paused: the engine resumes
    b.tick()
    wait_for(lambda: not driver.is_paused, timeout=5)
