"""Serving as vLLM and llama.cpp do: Bearer auth on /v1, GET /health, clients told apart
behind a trusted proxy only, SSE keep-alive comments while a request waits."""

import threading
import time
from dataclasses import replace

import httpx
import pytest
from fastapi.testclient import TestClient

import app as app_module
from playground.access import public
from playground.server.serving import client_owner
from tests.api.server import TINY_MODEL, Server, bare_app, openai_client


def _error(r) -> dict:
    assert set(r.json()) == {"error"}
    return r.json()["error"]


def test_api_key_guards_v1_with_bearer_auth_and_401_in_openais_shape(make_driver):
    driver = make_driver()
    with TestClient(bare_app(lambda: driver, api_keys=("sekret", "other"))) as http:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "sekret"}):
            models = http.get("/v1/models", headers=headers)
            for r in (models, http.post("/v1/completions", json={"prompt": "x"}, headers=headers)):
                assert r.status_code == 401
                error = _error(r)
                assert (error["type"], error["code"]) == (
                    "invalid_request_error",
                    "invalid_api_key",
                )
        ok = {"Authorization": "Bearer other"}
        assert http.get("/v1/models", headers=ok).json()["data"][0]["id"] == TINY_MODEL
        assert http.get("/health").status_code == 200  # probes and scrapes stay open, as in vLLM
        assert http.get("/metrics").status_code == 200
        spec = http.get("/openapi.json").json()
        assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    server = Server(bare_app(lambda: driver, api_keys=("sekret",)))
    try:
        r = (
            openai_client(server.url)
            .with_options(api_key="sekret")
            .completions.create(model=TINY_MODEL, prompt="hello", max_tokens=2)
        )
        assert r.usage.completion_tokens == 2
    finally:
        server.stop()


def test_api_key_flag_and_vllm_api_key_env(monkeypatch):
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    assert app_module.parse_args([]).api_key is None
    monkeypatch.setenv("VLLM_API_KEY", "from-env")
    assert app_module.parse_args([]).api_key == ["from-env"]
    assert app_module.parse_args(["--api-key", "a", "b"]).api_key == ["a", "b"]


def test_health_is_200_while_serving_and_503_once_the_driver_stopped(make_driver):
    driver = make_driver()
    with TestClient(bare_app(lambda: driver)) as http:
        health = http.get("/health")
        assert (health.status_code, health.json()["status"]) == (200, "ok")
        assert set(health.json()) == {"status", "step", "waiting", "running",
                                      "generated_tokens", "tokens_per_s"}  # fmt: skip
        driver.stop()
        r = http.get("/health")
        assert r.status_code == 503 and _error(r)["code"] == "model_not_ready"
    with TestClient(bare_app(lambda: None)) as http:  # no engine yet
        assert http.get("/health").status_code == 503


def _owners_of(driver, url: str, forwarded_for: list[str]) -> list[str]:
    owners = []
    for ip in forwarded_for:
        body = {"model": TINY_MODEL, "prompt": "who am I", "max_tokens": 1}
        r = httpx.post(url + "/v1/completions", json=body, headers={"X-Forwarded-For": ip})
        assert r.status_code == 200, r.text
        owners.append(
            next(x.owner for x in driver.state().records if x.request_id == r.json()["id"])
        )
    return owners


def _owner(ip: str) -> str:
    return client_owner(type("R", (), {"client": type("C", (), {"host": ip})})())


def test_forwarded_for_is_ignored_unless_it_comes_from_a_trusted_proxy(make_driver, monkeypatch):
    monkeypatch.delenv("SPACE_ID", raising=False)
    driver = make_driver()
    ips = ["203.0.113.7", "198.51.100.9"]
    untrusted = Server(
        bare_app(lambda: driver), **app_module.proxy_trust(app_module.parse_args([]))
    )
    try:  # anyone can send the header: from a client it means nothing
        assert _owners_of(driver, untrusted.url, ips) == [_owner("127.0.0.1")] * 2
    finally:
        untrusted.stop()
    args = app_module.parse_args(["--forwarded-allow-ips", "127.0.0.1"])  # the proxy's address
    trusted = Server(bare_app(lambda: driver), **app_module.proxy_trust(args))
    try:  # behind the proxy each client is its own: its own in-flight budget and card
        assert _owners_of(driver, trusted.url, ips) == [_owner(ip) for ip in ips]
    finally:
        trusted.stop()
    monkeypatch.setenv("SPACE_ID", "someone/space")  # a Space: its proxy is the only way in
    assert app_module.proxy_trust(app_module.parse_args([])) == {
        "proxy_headers": True, "forwarded_allow_ips": "*"}  # fmt: skip


def test_a_queued_stream_sends_keep_alive_comments_until_its_tokens_come(make_driver):
    driver = make_driver()
    server = Server(bare_app(lambda: driver, sse_keep_alive_interval=0.3))
    lines: list[tuple[float, str]] = []

    def read():
        body = {"model": TINY_MODEL, "prompt": "wait for it", "max_tokens": 3, "stream": True}
        with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=30) as r:
            for line in r.iter_lines():
                lines.append((time.monotonic(), line))

    try:
        driver.pause()  # the request waits: no step runs
        reader = threading.Thread(target=read)
        reader.start()
        time.sleep(2.0)
        resumed = time.monotonic()
        driver.resume()
        reader.join(30)
    finally:
        driver.resume()
        server.stop()
    waiting = [line for t, line in lines if t < resumed and line]
    assert len(waiting) >= 2 and all(line.startswith(": ") for line in waiting), lines[:6]
    assert "paused" in waiting[0]  # it says why nothing comes
    data = [line for _, line in lines if line.startswith("data: ")]
    assert data[-1] == "data: [DONE]" and len(data) >= 2


@pytest.mark.parametrize("method", ["PUT", "DELETE", "PATCH"])
def test_other_methods_get_405_with_allow(driver, method):
    with TestClient(app_module.create_app(driver)) as http:
        r = http.request(method, "/v1/chat/completions")
        assert r.status_code == 405 and r.headers["allow"] == "POST"
        assert http.request(method, "/health").headers["allow"] == "GET"


def _hold(driver, http: httpx.Client, body: dict) -> threading.Event:
    """Hold the driver thread (in a finish listener of a request sent for it) until the
    returned event is set: it runs no command and no step meanwhile."""
    holding, release = threading.Event(), threading.Event()

    def hold(out):
        if not holding.is_set():
            holding.set()
            release.wait(30)

    driver.on_finish(hold)
    threading.Thread(target=http.post, args=("/v1/completions",),
                     kwargs={"json": {**body, "prompt": "hold on"}}).start()  # fmt: skip
    assert holding.wait(30)
    return release


def test_a_burst_that_comes_while_the_driver_is_busy_starts_in_one_step(make_driver):
    """Requests wait for the driver to queue them without holding a thread each: a burst of
    48 that arrives while it is busy is in the engine by its next step, not six a step (the
    event loop's executor has six threads on 2 cores)."""
    driver = make_driver(max_num_seqs=64, max_num_batched_tokens=2048, num_kv_blocks=256)
    driver.limits = replace(driver.limits, max_in_flight=64)
    server = Server(app_module.create_app(driver))
    http = httpx.Client(base_url=server.url, timeout=60)
    model = http.get("/v1/models").json()["data"][0]["id"]
    body = {"model": model, "max_tokens": 2, "temperature": 0, "ignore_eos": True}
    release = _hold(driver, http, body)
    try:
        ids = []

        def send(i: int):
            r = http.post("/v1/completions", json={**body, "prompt": f"burst {i}"})
            ids.append(r.json()["id"])

        burst = [threading.Thread(target=send, args=(i,)) for i in range(48)]
        for t in burst:
            t.start()
        time.sleep(3)  # every request of the burst reaches the server meanwhile
        release.set()
        for t in burst:
            t.join(60)
        admitted = {
            e.request_id: s.step
            for s in driver.snapshot().steps
            for e in s.events
            if e.kind == "admitted" and e.request_id in ids
        }
        assert len(ids) == 48 and set(admitted) == set(ids)
        assert len(set(admitted.values())) == 1
    finally:
        release.set()
        server.stop()


def test_a_request_the_driver_does_not_take_in_time_is_503_and_never_runs(make_driver, monkeypatch):
    driver = make_driver()
    server = Server(bare_app(lambda: driver))
    http = httpx.Client(base_url=server.url, timeout=60)
    body = {"model": TINY_MODEL, "max_tokens": 2}
    release = _hold(driver, http, body)
    try:
        monkeypatch.setattr(public, "SUBMIT_TIMEOUT_S", 0.2)
        r = http.post("/v1/completions", json={**body, "prompt": "too late"})
        assert r.status_code == 503 and _error(r)["code"] == "model_not_ready"
        release.set()
        r = http.post("/v1/completions", json={**body, "prompt": "on time"})
        assert r.status_code == 200
        prompts = [rec.prompt for rec in driver.state().records]
        assert "on time" in prompts and "too late" not in prompts
    finally:
        release.set()
        server.stop()
