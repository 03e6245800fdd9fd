"""API requests while the board is paused: they wait, visibly, and never longer than the
driver's max_pause_s (the pause resumes by itself); a stream says why it waits in SSE comments
(which clients skip) and then finishes normally."""

import time

import httpx
import pytest

from engine import EngineConfig
from playground.driver import EngineDriver
from tests.api.conftest import SERVER_ENGINE
from tests.api.server import TINY_MODEL, Server, bare_app, openai_client
from tests.api.test_sse import parse_data
from tests.tiny_models import make_engine

BOUND_S = 2.0  # the driver's max_pause_s here
HI = [{"role": "user", "content": "Tell me a story."}]


@pytest.fixture(scope="module")
def paused_server(tiny_model):
    model, tokenizer = tiny_model
    config = EngineConfig(**SERVER_ENGINE)
    driver = EngineDriver(make_engine(model, tokenizer, config), max_pause_s=BOUND_S)
    server = Server(bare_app(lambda: driver, sse_keep_alive_interval=0.5))
    server.driver = driver
    yield server
    server.stop()
    driver.stop()


@pytest.fixture
def paused(paused_server):
    paused_server.driver.pause()
    yield paused_server
    paused_server.driver.resume()


def test_a_stream_started_during_a_pause_finishes_within_the_bound(paused):
    body = {"model": TINY_MODEL, "messages": HI, "max_tokens": 5, "temperature": 0,
            "ignore_eos": True, "stream": True}  # fmt: skip
    t0 = time.monotonic()
    with httpx.stream("POST", paused.url + "/v1/chat/completions", json=body, timeout=30) as r:
        first_line_at = None
        raw = ""
        for text in r.iter_text():
            first_line_at = first_line_at or time.monotonic()
            raw += text
    waited = time.monotonic() - t0
    assert r.status_code == 200 and BOUND_S * 0.8 <= waited < BOUND_S + 10, waited
    events = raw.removesuffix("\n\n").split("\n\n")
    comments = [e for e in events if e.startswith(":")]
    assert comments and all("paused; it resumes by itself within" in c for c in comments)
    assert first_line_at - t0 < BOUND_S  # the client hears from the server during the pause
    chunks = parse_data([e for e in events if not e.startswith(":")])
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert not paused.driver.is_paused  # nobody resumed it: the bound did


def test_the_openai_client_reads_through_the_comments(paused):
    client = openai_client(paused.url)
    t0 = time.monotonic()
    stream = client.chat.completions.create(model=TINY_MODEL, messages=HI, max_tokens=4,
                                            temperature=0, stream=True)  # fmt: skip
    reasons = [c.choices[0].finish_reason for c in stream if c.choices]
    assert reasons[-1] == "length" and time.monotonic() - t0 < BOUND_S + 10


def test_a_request_without_stream_is_answered_within_the_bound(paused):
    t0 = time.monotonic()
    body = {"model": TINY_MODEL, "prompt": "Once", "max_tokens": 3, "temperature": 0}
    r = httpx.post(paused.url + "/v1/completions", json=body, timeout=30)
    assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] in ("length", "stop")
    assert BOUND_S * 0.8 <= time.monotonic() - t0 < BOUND_S + 10
