"""The board over this project's own API, started in a second process: the presets run
through the remote lane, cards stream, the queue and KV charts move with the server's
/metrics, and the stop reasons the streams gave match what the server counted. Then the
server is killed mid-run and restarted: the board says so, and recovers."""

import logging
import time
from dataclasses import replace

import orjson
import pytest

from engine import SamplingParams
from playground.board.views import _figures, board_values
from playground.remote.engine import RemoteSnapshot
from playground.remote.prometheus import finished_grown
from playground.remote.views import render_banner
from playground.workload.scenarios import SCENARIOS
from tests.api.server import wait_for
from tests.playground.remote.conftest import close, remote_driver

pytestmark = pytest.mark.slow
PRESETS = ("chat_burst", "long_vs_short", "kv_pressure", "prefix_cache")


def once(key: str):
    """The preset with one request per user, so that it ends."""
    sc = SCENARIOS[key]
    users = sc.users if isinstance(sc.users, list) else [sc.users]
    return replace(sc, users=[replace(u, max_requests=1) for u in users])


def all_done(driver) -> bool:
    state = driver.state()
    return (
        bool(state.users)
        and all(u.state == "done" for u in state.users)
        and all(r.finished for r in state.records)
    )


@pytest.fixture
def driver(api_server):
    d = remote_driver(api_server.url)
    yield d
    close(d)


def test_presets_run_cards_stream_charts_move_and_stop_reasons_match(driver, caplog):
    for key in PRESETS:
        once(key).start(driver)
        running_seen, kv_seen = 0.0, 0.0
        deadline = time.monotonic() + 90
        while not all_done(driver):
            assert time.monotonic() < deadline, f"{key}: the preset did not finish"
            samples = driver.snapshot().samples
            running_seen = max([running_seen, *(s.running or 0 for s in samples)])
            kv_seen = max([kv_seen, *(s.kv_usage or 0 for s in samples)])
            time.sleep(0.1)
        state = driver.state()
        snap = state.snapshot
        assert isinstance(snap, RemoteSnapshot)
        assert running_seen >= 2, f"{key}: the server's running gauge never moved"
        assert kv_seen > 0, f"{key}: the server's KV usage never moved"
        records = state.records
        assert len(records) == len(state.users) and all(r.stop_reason for r in records)
        assert not any(r.error for r in records), [r.error for r in records]
        for r in records:  # the cards streamed: many deltas, joined they are the text
            deltas = driver.deltas(r.request_id)
            assert "".join(d for _, d in deltas) == r.text
        assert max(len(driver.deltas(r.request_id)) for r in records) >= 8
        # what the streams said equals what the server counted (vLLM's words)
        wait_for(lambda: finished_grown(driver.snapshot().samples)
                 == driver.snapshot().finish_reasons, timeout=10)  # fmt: skip
        reasons = driver.snapshot().finish_reasons
        assert sum(reasons.values()) == len(records) and "error" not in reasons
        if key == "chat_burst":  # a quarter of the chatty users cancel on purpose
            assert set(reasons) <= {"stop", "length", "abort"}
        figures = {k: orjson.loads(v) for k, v in _figures(state).items()}
        running = next(t for t in figures["queue"]["data"] if t["name"] == "running")
        assert max(y for y in running["y"] if y is not None) >= 2
        kv = figures["kv"]["data"][0]
        assert max(y for y in kv["y"] if y is not None) > 0
        assert "block map" in figures["kv"]["layout"]["title"]["text"]
        assert "does not export" in figures["batch"]["layout"]["title"]["text"]
        stats, cards, log, inspector, _ = board_values(state, None, None, ())
        assert state.users[0].name in cards and "finished" in cards
        assert "server ok" in stats and "finished:" in log and "inspector" in inspector
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_compare_mode_sends_every_request_to_both_servers(api_server):
    # the same server under two names: two lanes, two connections
    d = remote_driver(api_server.url, api_server.url.replace("127.0.0.1", "localhost"))
    try:
        once("static_vs_continuous").start(d)
        state = wait_for(lambda: all_done(d) and d.state(), timeout=90)
        wait_for(lambda: all(s.num_finished == 16 for s in d.state().snapshots.values()),
                 timeout=30)  # fmt: skip
        state = d.state()
        assert state.compare and len(set(state.lanes)) == 2
        scoreboard = board_values(state, None, None, ())[4]
        assert "finished the workload in" in scoreboard
        figures = _figures(state)
        assert {"cmp_queue0", "cmp_queue1", "cmp_batch0", "cmp_batch1"} <= set(figures)
    finally:
        close(d)


def test_a_refusal_killed_server_and_restart(api_server, driver, caplog):
    # a 4xx: the server's own limit on max_tokens (256) refuses; the card says why
    handle = driver.submit([{"role": "user", "content": "hi"}], SamplingParams(max_tokens=300))
    out = handle.result(timeout=30)
    assert out.stop_reason.value == "error"
    record = next(r for r in driver.state().records if r.request_id == handle.request_id)
    assert record.error.startswith("HTTP 400") and "max_tokens" in record.error
    assert "failed in the last" in render_banner(driver.state())
    # kill the server mid-run: streams break, the board says so, nothing escapes the driver
    SCENARIOS["chat_burst"].start(driver)
    wait_for(lambda: driver.snapshot().num_finished >= 4, timeout=60)
    api_server.kill()
    killed = time.monotonic()
    banner = wait_for(lambda: "not answering" in render_banner(driver.state())
                      and render_banner(driver.state()), timeout=20)  # fmt: skip
    assert api_server.url.removeprefix("http://") in banner
    errors = wait_for(lambda: [r for r in driver.state().records
                               if r.stop_reason == "error"], timeout=20)  # fmt: skip
    assert all(r.error for r in errors)
    assert driver.is_alive
    # it comes back on the same port: the banner goes, requests finish again
    api_server.start()
    restarted = time.monotonic()
    wait_for(lambda: driver.snapshot().health.state == "ok", timeout=20)
    wait_for(lambda: render_banner(driver.state()) == "", timeout=60)

    def finished_after_restart():
        snap = driver.snapshot()
        return [r for r in snap.requests if r.finished and r.arrival > restarted
                and r.stop_reason in ("eos", "max_tokens", "cancelled")]  # fmt: skip

    wait_for(finished_after_restart, timeout=60)
    assert driver.is_alive and killed < restarted
    snap = driver.snapshot()
    assert any(s.t > restarted for s in snap.samples)  # scraping again
    assert not [r for r in caplog.records if "engine step failed" in r.getMessage()]
