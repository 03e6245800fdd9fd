"""EngineDriver on a tiny random model: streaming, concurrency, pace, pause/step, failures."""

import threading
import time
from concurrent.futures import TimeoutError as FutureTimeout

import pytest

from engine import EngineConfig, SamplingParams, StopReason
from playground.driver import EngineDriver, RequestRejected
from playground.users import UserProfile, Workload
from tests.playground.conftest import TINY_CONFIG

FIXED = dict(temperature=0.0, ignore_eos=True)  # random weights: make lengths exact


def _params(n: int, **kw) -> SamplingParams:
    return SamplingParams(max_tokens=n, **{**FIXED, **kw})


def _settled(driver, predicate, timeout: float = 30.0):
    """The first published BoardState that satisfies predicate (states lag by <= 50 ms)."""
    deadline = time.monotonic() + timeout
    while not predicate(state := driver.state()) and time.monotonic() < deadline:
        time.sleep(0.02)
    return state


def test_submit_streams_outputs_in_order(driver):
    handle = driver.submit("Hello there", _params(8), owner="visitor:x", wait=True)
    outs = list(handle)
    assert [len(o.token_ids) for o in outs] == list(range(1, 9))
    assert outs[-1].finished and outs[-1].stop_reason == StopReason.MAX_TOKENS
    assert "".join(o.outputs[0].delta for o in outs) == outs[-1].text
    state = _settled(driver, lambda s: s.records and s.records[-1].finished)
    record = next(r for r in state.records if r.request_id == handle.request_id)
    assert record.finished and record.text == outs[-1].text and record.owner == "visitor:x"
    deltas = driver.deltas(handle.request_id)
    assert "".join(d for _, d in deltas) == outs[-1].text
    assert [s for s, _ in deltas] == sorted(s for s, _ in deltas)


def test_a_finished_output_is_never_ahead_of_the_board(driver):
    """Whoever holds a request's last output reads a board (and /metrics) that counts it."""
    for i in range(12):
        before = driver.snapshot().totals.num_generated_tokens
        final = driver.submit(f"count me {i}", _params(1 + i % 4), wait=True).result(timeout=30)
        state = driver.state()  # no waiting: it must be there already
        assert state.snapshot.totals.num_generated_tokens >= before + 1 + i % 4
        record = next(r for r in state.records if r.request_id == final.request_id)
        assert record.finished and record.text == final.text


def test_concurrent_submits_from_8_threads_lose_nothing(driver):
    handles, lock = [], threading.Lock()

    def client(i: int):
        for j in range(4):
            h = driver.submit(f"client {i} request {j}", _params(3 + j), wait=(j % 2 == 0))
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
    stats = _settled(driver, lambda s: s.stats["main"].num_finished == 32).stats["main"]
    assert stats.num_submitted == stats.num_finished == 32


def test_pause_holds_steps_and_step_once_runs_exactly_one(driver):
    driver.pause()
    handle = driver.submit("slow motion", _params(5), wait=True)
    before = driver.snapshot().step
    time.sleep(0.2)
    assert driver.snapshot().step == before  # paused: queued, not stepped
    assert driver.step_once()
    assert driver.snapshot().step == before + 1
    assert driver.state().paused
    assert driver.step_once() and driver.snapshot().step == before + 2
    driver.resume()
    assert handle.result(timeout=30).stop_reason == StopReason.MAX_TOKENS
    assert driver.step_once() is False  # idle: nothing to step


def test_pace_slows_the_loop(driver):
    driver.set_pace(20)
    t0 = time.monotonic()
    driver.submit("paced", _params(8), wait=True).result(timeout=30)
    assert time.monotonic() - t0 >= 7 / 20
    assert driver.state().pace == 20
    with pytest.raises(ValueError, match="pace"):
        driver.set_pace(0)


def test_abort_and_abort_owner_finish_cancelled(driver):
    driver.set_pace(50)
    a = driver.submit("abort me", _params(200), owner="visitor:a", wait=True)
    b = driver.submit("me too", _params(200), owner="visitor:b", wait=True)
    a.get(timeout=30)
    driver.abort(a.request_id)
    driver.abort_owner("visitor:b")
    assert a.result(timeout=30).stop_reason == StopReason.CANCELLED
    assert b.result(timeout=30).stop_reason == StopReason.CANCELLED
    driver.abort("no-such-request")  # ignored


def test_refusal_is_raised_with_the_field_named(driver):
    with pytest.raises(RequestRejected, match="prompt"):
        driver.submit("   ", wait=True)
    handle = driver.submit("x " * 600, _params(4))  # longer than max_model_len (512)
    with pytest.raises(RequestRejected, match="max_model_len|KV blocks"):
        handle.get(timeout=10)
    assert driver.is_alive


def test_an_exception_in_a_step_fails_live_requests_and_the_loop_goes_on(make_engine):
    engine = make_engine()
    real_step, calls = engine.step, []

    def flaky_step():
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("boom")
        return real_step()

    engine.step = flaky_step
    driver = EngineDriver(engine, engine_factory=make_engine)
    try:
        handles = [driver.submit(f"req {i}", _params(20), wait=True) for i in range(3)]
        finals = [h.result(timeout=30) for h in handles]
        assert {f.stop_reason for f in finals} == {StopReason.ERROR}
        assert driver.is_alive
        state = _settled(driver, lambda s: all(r.finished for r in s.records))
        errors = [r.error for r in state.records]
        assert all(e and "boom" in e for e in errors)
        after = driver.submit("after the storm", _params(4), wait=True).result(timeout=30)
        assert after.stop_reason == StopReason.MAX_TOKENS
    finally:
        driver.stop()


def test_reset_in_compare_mode_feeds_both_lanes(driver):
    driver.reset(EngineConfig(**{**TINY_CONFIG, "max_num_seqs": 2}), compare=True)
    handles = [driver.submit(f"cmp {i}", _params(2 + 4 * i), wait=True) for i in range(4)]
    for h in handles:
        assert h.result(timeout=60).finished
    state = _settled(driver, lambda s: all(s.stats[x].num_finished == 4 for x in s.lanes))
    assert state.lanes == ("continuous", "static") and state.compare
    assert {state.snapshots[lane].scheduling_policy for lane in state.lanes} == set(state.lanes)
    for lane in state.lanes:
        assert state.stats[lane].num_finished == 4 and state.stats[lane].finish_busy_s > 0
    # static waits for the whole batch of 2 before admitting more: it needs more steps.
    assert state.stats["static"].finish_step > state.stats["continuous"].finish_step


def test_reset_with_a_refused_config_keeps_the_board(make_engine):
    def picky(config):
        if config.num_kv_blocks == 1:
            raise ValueError("num_kv_blocks too small")
        return make_engine(config)

    driver = EngineDriver(make_engine(), engine_factory=picky)
    try:
        with pytest.raises(ValueError, match="num_kv_blocks"):
            driver.reset(EngineConfig(**{**TINY_CONFIG, "num_kv_blocks": 1}))
        assert driver.submit("still here", _params(2), wait=True).result(timeout=30).finished
    finally:
        driver.stop()


def test_inspect_and_watch(driver):
    handle = driver.submit("inspect me", _params(6), wait=True)
    driver.watch(handle.request_id)
    handle.result(timeout=30)
    detail = driver.inspect(handle.request_id)
    assert detail.request_id == handle.request_id
    assert len(detail.seqs[0].output_token_ids) == 6
    rid = handle.request_id
    state = _settled(
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
    handle = driver.submit("never mind", _params(200), wait=True)
    driver.stop()
    assert not driver.is_alive
    assert handle.result(timeout=5).stop_reason == StopReason.CANCELLED


def test_a_submit_that_times_out_is_dropped(make_engine):
    driver = EngineDriver(make_engine(), start=False)  # nobody drains the inbox yet
    try:
        with pytest.raises(FutureTimeout):
            driver.submit("too late", _params(2), wait=True, timeout=0.05)
        driver.start()
        handle = driver.submit("on time", _params(2), wait=True)
        assert handle.result(timeout=30).finished
        state = _settled(driver, lambda s: s.records and s.records[-1].finished)
        assert [r.prompt for r in state.records] == ["on time"]
    finally:
        driver.stop()
