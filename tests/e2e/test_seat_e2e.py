"""The control seat in a real chromium, two browser sessions on one board (`--controls
seat`): the first to act drives, the other watches with the controls disabled and queues;
the seat passes when the holder leaves and when it goes idle; a pause ends by itself. Then
`--controls locked`: only the page opened with the presenter key drives."""

import pytest

import app
from engine import EngineConfig
from playground.access.seat import PRESENTER_PARAM, Seat
from playground.driver import EngineDriver
from tests.api.server import Server
from tests.tiny_models import make_engine

pytestmark = pytest.mark.e2e
# the watcher must see the pause before it ends: a loaded 2-core machine shows it seconds late
IDLE_S, MAX_PAUSE_S = 24, 10
SERVER_ARGS = ["--controls", "seat", "--seat-idle", str(IDLE_S), "--max-pause", str(MAX_PAUSE_S),
               "--max-num-seqs", "8"]  # fmt: skip
SEAT = "() => (document.querySelector('#pg-seat') || {}).innerText || ''"
KEY = "lecture-42"
DRIVE = ["#pg-start", "#pg-pause", "#pg-step", "#pg-reset", "#pg-pace input"]


def _open(browser, url):
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    page.set_default_timeout(90_000)  # a loaded 2-core machine starves the renderers
    page.goto(url)
    page.wait_for_selector("#pg-board .pg-cards", timeout=60_000)
    return page


def _seat_says(page, text: str, timeout_s: float = 90, absent: bool = False) -> str:
    check = f"(t) => ({SEAT})().includes(t) === {'false' if absent else 'true'}"
    page.wait_for_function(check, arg=text, timeout=timeout_s * 1000)
    return page.evaluate(SEAT)


def test_the_seat_passes_on_leave_and_on_timeout(server, browser, tmp_path):
    a, b = _open(browser, server), _open(browser, server)
    for page in (a, b):
        _seat_says(page, "The controls are free")
        assert not page.locator("#pg-pause").is_disabled()
    a.click("#pg-pause")  # the free seat: a takes it, and the board pauses
    _seat_says(a, "You drive")
    watching = _seat_says(b, "drives the board")
    assert "Paused: resumes by itself in" in watching
    b.wait_for_function("() => document.querySelector('#pg-pause').disabled")
    for selector in DRIVE:
        assert b.locator(selector).is_disabled(), selector
    assert b.get_by_role("button", name="Chat burst").is_disabled()
    assert not b.locator("#pg-send").is_disabled()  # everyone may send prompts
    b.click("#pg-seat-btn")  # "Queue for the seat"
    _seat_says(b, "1st in the queue")
    _seat_says(a, "1 queued")
    b.screenshot(path=str(tmp_path / "watcher.png"))
    a.context.close()  # the holder leaves: the seat passes to b, the engine resumes
    _seat_says(b, "You drive")
    _seat_says(b, "Paused", absent=True, timeout_s=60)
    b.wait_for_function("() => !document.querySelector('#pg-pause').disabled")
    b.click("#pg-pause")  # b pauses; nobody resumes: the pause ends by itself
    _seat_says(b, "Paused: resumes by itself")
    b.wait_for_function("() => document.querySelector('#pg-pause').innerText === 'Resume'")
    _seat_says(b, "Paused", absent=True, timeout_s=MAX_PAUSE_S + 60)
    assert "You drive" in b.evaluate(SEAT)  # still b's seat (idle_s > max_pause_s)
    b.wait_for_function("() => document.querySelector('#pg-pause').innerText === 'Pause'")
    _seat_says(b, "The controls are free", timeout_s=IDLE_S + 60)  # b went idle
    b.context.close()


@pytest.fixture
def locked_url(tiny_model):
    """The app with `--controls locked` over the tiny model, served in this process."""
    model, tokenizer = tiny_model
    config = EngineConfig(max_num_seqs=8, num_kv_blocks=64, block_size=16)
    driver = EngineDriver(make_engine(model, tokenizer, config), base_config=config)
    seat = Seat("locked", presenter_key=KEY, on_handover=driver.resume)
    server = Server(app.create_app(driver, seat=seat))
    yield server.url
    server.stop()
    driver.stop()


def test_locked_controls_answer_only_the_presenter(browser, locked_url):
    presenter = _open(browser, f"{locked_url}/?{PRESENTER_PARAM}={KEY}")
    student = _open(browser, locked_url)
    _seat_says(presenter, "You present")
    _seat_says(student, "Controls locked")
    student.wait_for_function("() => document.querySelector('#pg-pause').disabled")
    for selector in DRIVE:
        assert student.locator(selector).is_disabled(), selector
    assert not student.locator("#pg-seat-btn").is_visible()  # no seat to queue for
    presenter.click("#pg-pause")
    _seat_says(student, "Paused: resumes by itself")
    presenter.click("#pg-pause")  # Resume
    _seat_says(student, "Paused", absent=True, timeout_s=60)
    for page in (presenter, student):
        page.context.close()
