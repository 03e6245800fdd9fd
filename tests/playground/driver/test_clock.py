"""RunClock and StepCounter alone, then pace, pause and single steps through the driver."""

import time

import pytest

from engine import StopReason
from playground.driver.clock import RunClock, StepCounter, parse_pace
from tests.playground.driving import fixed


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
    for bad in (0, -1, "0"):
        with pytest.raises(ValueError, match="pace"):
            parse_pace(bad)


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
