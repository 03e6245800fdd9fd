"""The remote lane against a fake server: streams folded into outputs, and every way a
server can fail (refusal, dropped stream, stall, down, slow /metrics) ending the request
with ERROR and a message, never an exception."""

import time

import pytest

from engine import EngineConfig, SamplingParams, StopReason
from playground.remote import connection as connection_module
from playground.remote.connection import Connection, normalize_url
from playground.remote.engine import REMOTE_TOKEN_ID, RemoteEngine
from tests.api.server import Server, wait_for
from tests.playground.remote.fake_server import PIECES, FakeState, fake_app


@pytest.fixture
def fake():
    state = FakeState(api_key="sesame")
    server = Server(fake_app(state))
    yield state, server
    server.stop()


def remote(url: str, **kw) -> tuple[Connection, RemoteEngine]:
    conn = Connection(url, **{"api_key": "sesame", "poll_s": 0.1, **kw})
    return conn, RemoteEngine(conn, EngineConfig(num_kv_blocks=64))


def ask(engine: RemoteEngine, text: str, rid: str = "r1", **params):
    engine.add_request(rid, [{"role": "user", "content": text}], SamplingParams(**params))


def run(engine: RemoteEngine, timeout: float = 20.0) -> dict:
    """Step until no request is out; every output by request id."""
    outs: dict[str, list] = {}
    deadline = time.monotonic() + timeout
    while engine._live:
        assert time.monotonic() < deadline, "requests still out"
        for out in engine.step():
            outs.setdefault(out.request_id, []).append(out)
    return outs


def test_a_stream_becomes_outputs_measured_here(fake):
    state, server = fake
    conn, engine = remote(server.url + "/v1")  # a /v1 base URL works too
    try:
        ask(engine, "hello", max_tokens=8, temperature=0.0)
        outs = run(engine)["r1"]
        last = outs[-1]
        assert last.finished and last.stop_reason is StopReason.EOS and last.error is None
        assert last.text == "".join(o.outputs[0].delta for o in outs) == "".join(PIECES)
        assert last.token_ids == [REMOTE_TOKEN_ID] * 4  # the server's usage, not the 3 chunks
        m = last.metrics
        assert m.num_prompt_tokens == 7 and m.ttft > 0 and m.e2e >= m.ttft
        body, auth = state.seen[0]
        assert auth == "Bearer sesame" and body["model"] == "fake"
        assert (body["max_tokens"], body["temperature"], body["stream"]) == (8, 0.0, True)
        snap = engine.snapshot()
        assert snap.finish_reasons == {"stop": 1} and snap.totals.stop_reasons == {"eos": 1}
        assert snap.num_finished == 1 and snap.ttfts and snap.requests[0].status == "finished"
    finally:
        conn.close()


@pytest.mark.parametrize(("text", "key", "error"), [
    ("hello", "wrong", "HTTP 401: invalid api key"),
    ("drop", "sesame", "the server dropped the stream"),
])  # fmt: skip
def test_a_refusal_or_a_dropped_stream_ends_with_error_and_says_why(fake, text, key, error):
    _, server = fake
    conn, engine = remote(server.url, api_key=key)
    try:
        ask(engine, text)
        last = run(engine)["r1"][-1]
        assert last.finished and last.stop_reason is StopReason.ERROR
        assert last.error.startswith(error), last.error
        assert last.text == ("Hel" if text == "drop" else "")  # what came is kept
        snap = engine.snapshot()
        assert snap.finish_reasons == {"error": 1} and snap.errors[-1][1].startswith("r1: ")
        assert not snap.ttfts  # a failed request's latency is not counted
    finally:
        conn.close()


def test_a_stalled_stream_times_out_as_an_error(fake):
    _, server = fake
    conn, engine = remote(server.url, read_timeout_s=0.5)
    try:
        ask(engine, "slow")
        last = run(engine)["r1"][-1]
        assert last.stop_reason is StopReason.ERROR and "server slow" in last.error
    finally:
        conn.close()


def test_abort_and_timeout_end_the_stream_from_this_side(fake):
    _, server = fake
    conn, engine = remote(server.url)
    try:
        ask(engine, "slow", "cut")
        ask(engine, "slow", "late", timeout_s=0.3)
        wait_for(lambda: any(o.request_id == "cut" for o in engine.step()))  # its first token
        assert engine.abort_request("cut") and not engine.abort_request("unknown")
        outs = run(engine)
        assert outs["cut"][-1].stop_reason is StopReason.CANCELLED
        assert outs["late"][-1].stop_reason is StopReason.TIMEOUT
        assert engine.snapshot().finish_reasons == {"abort": 2}
    finally:
        conn.close()


def test_health_follows_metrics_and_requests_fail_while_the_server_is_down(fake, monkeypatch):
    state, server = fake
    monkeypatch.setattr(connection_module, "SLOW_S", 0.2)
    conn, engine = remote(server.url)
    try:
        wait_for(lambda: conn.health.state == "ok")
        state.running = 3
        wait_for(lambda: engine.snapshot().samples[-1].running == 3)
        state.metrics_delay_s = 0.4
        wait_for(lambda: conn.health.state == "slow")
        state.metrics_delay_s, state.metrics_status = 0.0, 503
        wait_for(lambda: conn.health.state == "down")
        assert "HTTP 503" in conn.health.message
        state.metrics_status = 200
        wait_for(lambda: conn.health.state == "ok")
        server.stop()
        wait_for(lambda: conn.health.state == "down")
        assert conn.health.message.startswith("cannot reach")
        ask(engine, "hello")
        last = run(engine)["r1"][-1]
        assert last.stop_reason is StopReason.ERROR and last.error.startswith("cannot reach")
        engine.step()
        logged = [text for _, _, text in engine.snapshot().log]
        assert any(line.startswith("server down") for line in logged)
    finally:
        conn.close()


@pytest.mark.parametrize(("typed", "url"), [
    ("127.0.0.1:8000", "http://127.0.0.1:8000"),
    ("http://gpu-box:8000/v1/", "http://gpu-box:8000"),
    ("https://vllm.example.org", "https://vllm.example.org"),
])  # fmt: skip
def test_urls_as_people_type_them(typed, url):
    assert normalize_url(typed) == url


def test_a_url_that_is_not_http_names_the_flag():
    with pytest.raises(ValueError, match="^engine-url:"):
        normalize_url("ftp://x")
