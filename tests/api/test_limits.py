"""The public limits on the HTTP API: 400 naming the field past a size limit, 429 past the
per-client in-flight limit; nothing is queued and the server keeps serving."""

from dataclasses import replace

import httpx
from fastapi.testclient import TestClient

from playground.server.serving import client_owner
from tests.api.server import TINY_MODEL, bare_app, wait_for


def _error(r: httpx.Response) -> dict:
    return r.json()["error"]


def test_size_limits_answer_400_naming_the_field(make_driver):
    driver = make_driver()
    driver.limits = replace(driver.limits, max_prompt_tokens=40, max_tokens=5, max_n=2)
    long = "word " * 60
    hi = [{"role": "user", "content": "hi"}]
    cases = [  # (path, body, param)
        ("/v1/completions", {"prompt": long}, "prompt"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": long}]}, "messages"),
        ("/v1/completions", {"prompt": "x", "max_tokens": 6}, "max_tokens"),
        ("/v1/chat/completions", {"messages": hi, "max_completion_tokens": 6},
         "max_completion_tokens"),
        ("/v1/completions", {"prompt": "x", "max_tokens": 2, "n": 3}, "n"),
    ]  # fmt: skip
    with TestClient(bare_app(lambda: driver)) as http:
        for path, body, param in cases:
            r = http.post(path, json={"model": TINY_MODEL, **body})
            error = _error(r)
            assert (r.status_code, error["param"], error["code"]) == (400, param, "limit_exceeded")
            assert error["message"].startswith(param), error["message"]
        assert driver.snapshot().num_waiting == 0 and driver.snapshot().num_running == 0
        # within the limits it serves, and a chat without max_tokens gets the limit, not more
        chat = {"model": TINY_MODEL, "messages": hi, "temperature": 0, "ignore_eos": True}
        r = http.post("/v1/chat/completions", json=chat)
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 5
    driver.stop()


def test_in_flight_limit_answers_429_per_client(make_driver):
    driver = make_driver()
    driver.limits = replace(driver.limits, max_in_flight=1)
    driver.pause()  # the first request stays in flight
    body = {"model": TINY_MODEL, "prompt": "hold", "max_tokens": 2}
    with TestClient(bare_app(lambda: driver)) as http:
        first = driver.submit("the first", owner=client_owner(_Fake("testclient")),
                              max_in_flight=1, wait=True)  # fmt: skip
        r = http.post("/v1/completions", json=body)
        error = _error(r)
        assert r.status_code == 429 and error["type"] == "rate_limit_error"
        assert error["param"] == "requests" and "at most 1" in error["message"]
        wait_for(lambda: driver.snapshot().num_waiting == 1)  # the first one, published
        assert driver.snapshot().num_waiting == 1  # and only the first
        driver.resume()
        first.result(timeout=30)
        assert http.post("/v1/completions", json=body).status_code == 200
    driver.stop()


class _Fake:
    """Just enough of a starlette Request for client_owner()."""

    def __init__(self, host: str):
        self.client = type("Client", (), {"host": host})()


def test_client_owner_hides_the_address():
    owner = client_owner(_Fake("203.0.113.7"))
    assert owner.startswith("api:") and "203.0.113.7" not in owner
    assert owner == client_owner(_Fake("203.0.113.7")) != client_owner(_Fake("203.0.113.8"))
