"""RunClock and StepCounter alone, then pace, pause and single steps through the driver."""

import time

import pytest

from engine import StopReason
from playground.driver import EngineDriver
from playground.driver.clock import MIN_PACE, RunClock, StepCounter, parse_pace
from tests.playground.driving import fixed, settled


def test_the_run_clock_stands_still_while_paused():
    clock = RunClock("max")
    clock.pause()
    frozen = clock.now()
    time.sleep(0.02)
    assert clock.now() == frozen and clock.paused
    clock.resume()
    time.sleep(0.02)
    assert clock.now() > frozen
    clock.restart()
    assert clock.now() < 0.01


def test_pace_is_a_step_slot():
    assert RunClock(None).slot(0.1) == 0.1 and RunClock("max").pace is None
    assert RunClock(4).slot(0.0) == 0.25 and RunClock("2").pace == 2.0
    for bad in (0, -1, "0", "1e-9", 0.49, "nan", "inf", "fast", [1]):
        with pytest.raises(ValueError, match=f"pace must be 'max' or .* >= {MIN_PACE:g}"):
            parse_pace(bad)
    assert parse_pace(MIN_PACE) == MIN_PACE


def test_a_pause_ends_by_itself_and_pausing_again_does_not_extend_it():
    clock = RunClock("max", max_pause_s=0.1)
    clock.pause()
    end = clock.paused_until
    assert not clock.resume_if_due()
    time.sleep(0.05)
    clock.pause()  # already paused: same end
    assert clock.paused_until == end
    time.sleep(0.06)
    assert clock.resume_if_due() and not clock.paused and clock.paused_until is None
    for bad in (0, -1, float("inf"), "5"):
        with pytest.raises(ValueError, match="max_pause_s"):
            RunClock("max", max_pause_s=bad)


def test_a_single_step_ask_is_released_when_there_is_nothing_to_step():
    steps = StepCounter()
    target = steps.ask_one()
    steps.drop_pending()
    assert steps.wait_until(target, timeout=1) is False
    target = steps.ask_one()
    steps.one_done()
    assert steps.wait_until(target, timeout=1) and steps.num_pending == 0


def test_pause_holds_steps_and_step_once_runs_exactly_one(driver):
    driver.pause()
    handle = driver.submit("slow motion", fixed(5), wait=True)
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
    driver.submit("paced", fixed(8), wait=True).result(timeout=30)
    assert time.monotonic() - t0 >= 7 / 20
    assert driver.state().pace == 20
    with pytest.raises(ValueError, match="pace"):
        driver.set_pace(0)


def test_a_tiny_pace_is_refused_and_the_engine_keeps_its_pace(driver):
    """`/set_pace "1e-9"` once froze every board: the floor refuses it, nothing changes."""
    driver.set_pace(20)
    for bad in ("1e-9", 1e-9, "0.1"):
        with pytest.raises(ValueError, match="pace"):
            driver.set_pace(bad)
    t0 = time.monotonic()
    driver.submit("still moving", fixed(4), wait=True).result(timeout=10)
    assert time.monotonic() - t0 < 5 and driver.state().pace == 20


def test_a_pause_nobody_lifts_resumes_within_the_bound(make_engine):
    """A request queued under a pause finishes once the pause has lasted max_pause_s."""
    bound = 0.6
    d = EngineDriver(make_engine(), engine_factory=make_engine, max_pause_s=bound)
    try:
        d.pause()
        t0 = time.monotonic()
        handle = d.submit("held", fixed(3), wait=True)
        assert settled(d, lambda s: s.paused).paused_until > t0
        out = handle.result(timeout=bound + 10)
        waited = time.monotonic() - t0
        assert out.stop_reason == StopReason.MAX_TOKENS and bound * 0.9 <= waited < bound + 5
        assert settled(d, lambda s: not s.paused).paused_until is None
    finally:
        d.stop()
