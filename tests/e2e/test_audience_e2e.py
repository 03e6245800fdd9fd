"""A crowd on one board: two chromium pages and 50 simulated viewers (two processes of their
own, tests/e2e/crowd.py) watch a running engine. Both pages update over the stream, the seat's
controls answer at once, killing 20 viewers mid-stream leaves no writer, watcher or buffer
of theirs on the server (the fan-out's counters, GET /board/stream/stats). (The lesson panel
the frames fill: tests/e2e/test_lessons_e2e.py, whose measured answer comes only with them.)"""

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

import app
from engine import EngineConfig, SamplingParams
from playground.access.seat import Seat
from playground.driver import EngineDriver
from tests.api.server import Server, wait_for
from tests.tiny_models import make_engine

pytestmark = pytest.mark.e2e
CROWD = Path(__file__).resolve().parent / "crowd.py"
KILLED, KEPT = 20, 30
# the board version the page shows from the stream (NaN before the first frame)
APPLIED = "() => Number((document.querySelector('#pg-stats [data-live]') || {}).dataset?.v)"
SLACK_S = 10.0  # on a loaded 2-core machine a click's answer varies by seconds anyway


@pytest.fixture
def board(tiny_model):
    """The board over the tiny model in this process, the seat in seat mode; its driver."""
    model, tokenizer = tiny_model
    config = EngineConfig(max_num_seqs=8, num_kv_blocks=256, block_size=16)
    driver = EngineDriver(make_engine(model, tokenizer, config), base_config=config, pace="20")
    server = Server(app.create_app(driver, seat=Seat("seat", on_handover=driver.resume)))
    yield server.url, driver
    server.stop()
    driver.stop()


def _crowds(url: str, sizes: tuple[int, ...], seconds: float) -> list[subprocess.Popen]:
    """A process of simulated viewers per size, started together; once each one watches."""
    procs = [subprocess.Popen([sys.executable, str(CROWD), url, str(n), str(seconds)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for n in sizes]  # fmt: skip
    for proc in procs:
        assert proc.stdout.readline().strip() == "watching"
    return procs


def _open(browser, url):
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    page.set_default_timeout(90_000)  # a loaded 2-core machine starves the renderers
    page.goto(url)
    page.wait_for_function(f"() => ({APPLIED})() >= 0")  # the stream's first frame shows
    return page


def _stats(url: str) -> dict:
    return httpx.get(url + "/board/stream/stats", timeout=10).json()


def _click_answers(page, button: str, text: str) -> float:
    t0 = time.monotonic()
    page.click(button)
    page.wait_for_function(f"() => document.querySelector('{button}').innerText === '{text}'")
    return time.monotonic() - t0


def test_a_crowd_watches_and_the_viewers_that_die_leave_nothing_behind(board, browser):
    url, driver = board
    a, b = _open(browser, url), _open(browser, url)
    alone = _click_answers(a, "#pg-pause", "Resume")  # a takes the seat and pauses
    killed, kept = _crowds(url, (KILLED, KEPT), 300)
    params = SamplingParams(max_tokens=400, temperature=0.0, ignore_eos=True)
    for i in range(8):
        driver.submit(f"viewer crowd {i}", params, owner=f"api:crowd{i}")  # a card each
    # streams end after their lifetime and reconnect at once: nearly all are on at any moment
    wait_for(lambda: _stats(url)["num_viewers"] >= KILLED + KEPT, timeout=60)
    crowded = _click_answers(a, "#pg-pause", "Pause")  # and resumes, in the crowd
    assert crowded < 3 * alone + SLACK_S, (crowded, alone)  # the seat's controls still answer
    for page in (a, b):  # both pages draw new frames, and the cards stream
        seen = page.evaluate(APPLIED)
        page.wait_for_function(f"() => ({APPLIED})() > {seen} + 4")
        assert page.locator("#pg-board [data-live] .pg-card").count() >= 4
        assert "What the stop reasons say" in page.inner_text("#pg-stops")
    b.wait_for_function("() => document.querySelector('#pg-pause').disabled")  # b watches
    killed.kill()  # mid-stream: its sockets close under the server's writers
    killed.wait()
    left = KEPT + 2

    def settled(limit: int):  # at most `limit` viewers, a writer and a watcher each, no more
        s = _stats(url)
        return s["num_viewers"] <= limit and s["num_tasks"] == 2 * s["num_viewers"] and s

    stats = wait_for(lambda: settled(left), timeout=60)
    assert stats["num_viewers"] >= KEPT - 5, stats  # the kept ones still watch
    assert stats["num_buffered_frames"] <= left * 2, stats
    updates = json.loads(kept.communicate("stop\n", timeout=60)[0].splitlines()[-1])
    assert len(updates) == KEPT and min(updates) >= 10, updates  # every one saw the run
    for page in (a, b):
        page.context.close()
    stats = wait_for(lambda: settled(0), timeout=60)
    assert stats["num_tasks"] == 0 and stats["num_buffered_frames"] == 0, stats
