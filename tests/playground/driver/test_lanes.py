"""Lanes: every request on every lane or none, a failed step ends its requests, compare mode."""

import pytest

from engine import EngineConfig, SamplingParams, StopReason
from playground.driver import EngineDriver
from playground.driver.lanes import Lane, Lanes
from tests.playground.driving import fixed, settled
from tests.tiny_models import TINY_ENGINE


def test_a_request_a_later_lane_refuses_is_on_no_lane(make_engine):
    roomy, small = make_engine(), make_engine(max_num_seqs=1, max_num_batched_tokens=64)
    lanes = Lanes([Lane("a", roomy), Lane("b", small)])
    with pytest.raises(ValueError, match="n must be"):
        lanes.add("r1", "two answers please", SamplingParams(max_tokens=2, n=2), 0)
    assert [lane.live for lane in lanes.all] == [{}, {}]
    assert [lane.num_submitted for lane in lanes.all] == [0, 0]
    first, _ = lanes.step()  # the first lane's copy was aborted: its CANCELLED echo is dropped
    assert first.outputs == [] and not lanes.has_work()
    lanes.add("r2", "one answer", fixed(2), 0)
    assert [lane.live for lane in lanes.all] == [{"r2": 1}, {"r2": 1}]


def test_a_failed_step_hands_back_the_live_requests_once(make_engine):
    engine = make_engine()
    lane = Lane("main", engine)
    engine.add_request("r1", "doomed", fixed(8))
    lane.add("r1")

    def boom():
        raise RuntimeError("boom")

    engine.step = boom
    result = lane.run_step()
    assert result.failed == ["r1"] and result.outputs == [] and "boom" in str(result.error)
    assert lane.live == {} and lane.num_finished == 1


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
        handles = [driver.submit(f"req {i}", fixed(20), wait=True) for i in range(3)]
        finals = [h.result(timeout=30) for h in handles]
        assert {f.stop_reason for f in finals} == {StopReason.ERROR}
        assert driver.is_alive
        state = settled(driver, lambda s: all(r.finished for r in s.records))
        errors = [r.error for r in state.records]
        assert all(e and "boom" in e for e in errors)
        after = driver.submit("after the storm", fixed(4), wait=True).result(timeout=30)
        assert after.stop_reason == StopReason.MAX_TOKENS
    finally:
        driver.stop()


def test_reset_in_compare_mode_feeds_both_lanes(driver):
    driver.reset(EngineConfig(**{**TINY_ENGINE, "max_num_seqs": 2}), compare=True)
    handles = [driver.submit(f"cmp {i}", fixed(2 + 4 * i), wait=True) for i in range(4)]
    for h in handles:
        assert h.result(timeout=60).finished
    state = settled(driver, lambda s: all(s.stats[x].num_finished == 4 for x in s.lanes))
    assert state.lanes == ("continuous", "static") and state.compare
    assert {state.snapshots[lane].batching for lane in state.lanes} == set(state.lanes)
    for lane in state.lanes:
        assert state.stats[lane].num_finished == 4 and state.stats[lane].finish_busy_s > 0
    # static waits for the whole batch of 2 before admitting more: it needs more steps.
    assert state.stats["static"].finish_step > state.stats["continuous"].finish_step
