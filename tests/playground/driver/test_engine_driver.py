"""EngineDriver on a tiny random model: streaming, concurrency, aborts, resets, inspection."""

import asyncio
import threading
import time

import pytest

from engine import EngineConfig, StopReason
from playground.driver import EngineDriver, RequestRejected
from playground.server.outbox import outputs
from playground.workload.users import UserProfile, Workload
from tests.playground.driving import fixed, loop_on_thread, settled
from tests.tiny_models import TINY_ENGINE


def test_submit_streams_outputs_in_order(driver):
    handle = driver.submit("Hello there", fixed(8), owner="visitor:x", wait=True)
    outs = list(handle)
    assert [len(o.token_ids) for o in outs] == list(range(1, 9))
    assert outs[-1].finished and outs[-1].stop_reason == StopReason.MAX_TOKENS
    assert "".join(o.outputs[0].delta for o in outs) == outs[-1].text
    state = settled(driver, lambda s: s.records and s.records[-1].finished)
    record = next(r for r in state.records if r.request_id == handle.request_id)
    assert record.finished and record.text == outs[-1].text and record.owner == "visitor:x"
    deltas = driver.deltas(handle.request_id)
    assert "".join(d for _, d in deltas) == outs[-1].text
    assert [s for s, _ in deltas] == sorted(s for s, _ in deltas)


def test_a_finished_output_is_never_ahead_of_the_board(driver):
    """Whoever holds a request's last output reads a board (and /metrics) that counts it."""
    for i in range(12):
        before = driver.snapshot().totals.num_generated_tokens
        final = driver.submit(f"count me {i}", fixed(1 + i % 4), wait=True).result(timeout=30)
        state = driver.state()  # no waiting: it must be there already
        assert state.snapshot.totals.num_generated_tokens >= before + 1 + i % 4
        record = next(r for r in state.records if r.request_id == final.request_id)
        assert record.finished and record.text == final.text


def test_a_step_ends_once_the_event_loop_has_sent_its_outputs(driver):
    """A stream's chunk of a step is written before the next step's forward starts: the
    loop's reader has run when step_once returns, even though its work holds the loop."""
    with loop_on_thread() as loop:
        driver.pause()
        handle = driver.submit("stream me", fixed(6), wait=True)
        listening, seen = threading.Event(), []

        async def read():
            stream = outputs(handle, heartbeat_s=5)
            loop.call_soon(listening.set)  # runs once the stream below waits, listening
            async for out in stream:
                time.sleep(0.005)  # the stream's work on the loop (under SEND_WAIT)
                seen.append(len(out.outputs[0].token_ids))

        reading = asyncio.run_coroutine_threadsafe(read(), loop)
        assert listening.wait(5)
        for n in range(1, 7):
            assert driver.step_once()
            assert seen[-1:] == [n]
        reading.result(5)


def test_concurrent_submits_from_8_threads_lose_nothing(driver):
    handles, lock = [], threading.Lock()

    def client(i: int):
        for j in range(4):
            h = driver.submit(f"client {i} request {j}", fixed(3 + j), wait=(j % 2 == 0))
            with lock:
                handles.append(h)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    results = [h.result(timeout=60) for h in handles]
    assert len({h.request_id for h in handles}) == 32
    assert all(r.finished and r.stop_reason == StopReason.MAX_TOKENS for r in results)
    stats = settled(driver, lambda s: s.stats["main"].num_finished == 32).stats["main"]
    assert stats.num_submitted == stats.num_finished == 32


def test_abort_and_abort_owner_finish_cancelled(driver):
    driver.set_pace(50)
    a = driver.submit("abort me", fixed(200), owner="visitor:a", wait=True)
    b = driver.submit("me too", fixed(200), owner="visitor:b", wait=True)
    a.get(timeout=30)
    driver.abort(a.request_id)
    driver.abort_owner("visitor:b")
    assert a.result(timeout=30).stop_reason == StopReason.CANCELLED
    assert b.result(timeout=30).stop_reason == StopReason.CANCELLED
    driver.abort("no-such-request")  # ignored


def test_refusal_is_raised_with_the_field_named(driver):
    with pytest.raises(RequestRejected, match="prompt"):
        driver.submit("   ", wait=True)
    handle = driver.submit("x " * 600, fixed(4))  # longer than max_model_len (512)
    with pytest.raises(RequestRejected, match="max_model_len|KV blocks"):
        handle.get(timeout=10)
    assert driver.is_alive


def test_reset_with_a_refused_config_keeps_the_board(make_engine):
    def picky(config):
        if config.num_kv_blocks == 1:
            raise ValueError("num_kv_blocks too small")
        return make_engine(config)

    driver = EngineDriver(make_engine(), engine_factory=picky)
    try:
        with pytest.raises(ValueError, match="num_kv_blocks"):
            driver.reset(EngineConfig(**{**TINY_ENGINE, "num_kv_blocks": 1}))
        assert driver.submit("still here", fixed(2), wait=True).result(timeout=30).finished
    finally:
        driver.stop()


def test_inspect_and_watch(driver):
    handle = driver.submit("inspect me", fixed(6), wait=True)
    driver.watch(handle.request_id)
    handle.result(timeout=30)
    detail = driver.inspect(handle.request_id)
    assert detail.request_id == handle.request_id
    assert len(detail.seqs[0].output_token_ids) == 6
    rid = handle.request_id
    state = settled(
        driver, lambda s: rid in s.details and s.details[rid].seqs[0].status == "finished"
    )
    watched = state.details[rid]
    assert watched.seqs[0].status == "finished"


def test_workload_users_run_closed_loop(driver):
    profiles = [
        UserProfile(
            name,
            "#000",
            max_tokens=3,
            temperature=0.0,
            ignore_eos=True,
            think_time=(0.0, 0.05),
            max_requests=2,
        )  # fmt: skip
        for name in ("Ada", "Bo")
    ]
    driver.reset(workload=Workload("test", profiles, seed=1))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not all(u.state == "done" for u in driver.state().users):
        time.sleep(0.05)
    state = driver.state()
    assert [u.num_requests for u in state.users] == [2, 2]
    assert len(state.records) == 4 and all(r.finished for r in state.records)
    assert {r.owner for r in state.records} == {"user:Ada", "user:Bo"}


def test_stop_ends_open_streams(make_engine):
    driver = EngineDriver(make_engine(), pace=5)
    handle = driver.submit("never mind", fixed(200), wait=True)
    driver.stop()
    assert not driver.is_alive
    assert handle.result(timeout=5).stop_reason == StopReason.CANCELLED


def test_one_snapshot_a_step_and_a_fresh_one_after_a_users_abort(make_engine):
    """The run's record and the board share the step's snapshot of the first lane; a simulated
    user that aborts while its output is routed changes the engine: the board shows that."""
    calls = []

    def counting(config=None):
        engine = make_engine(config)
        real = engine.snapshot
        engine.snapshot = lambda: (calls.append(1), real())[1]
        return engine

    d = EngineDriver(counting(), engine_factory=counting)
    try:
        d.pause()
        d.submit("one snapshot a step", fixed(6), wait=True)
        for _ in range(3):
            calls.clear()
            assert d.step_once()
            assert len(calls) == 1
        quitter = UserProfile("Quits", "#000", max_tokens=8, temperature=0.0, ignore_eos=True,
                              think_time=(0.0, 0.0), max_requests=1, cancel_after=2)  # fmt: skip
        d.reset(workload=Workload("test", [quitter], seed=1, cancel_fraction=1.0))
        d.pause()
        for _ in range(8):
            calls.clear()
            assert d.step_once()
            if len(calls) == 2:  # the step's, then the board's after the abort
                break
        [request] = d.snapshot().requests
        assert request.num_output_tokens == 2 and request.stop_reason == "cancelled"
    finally:
        d.stop()
