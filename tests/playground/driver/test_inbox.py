"""Inbox: commands run on the driver thread in order; a caller that gives up drops its command."""

import threading
from concurrent.futures import TimeoutError as FutureTimeout

import pytest

from playground.driver import EngineDriver
from playground.driver.inbox import Inbox
from tests.playground.driving import fixed, settled


def _drainer(inbox: Inbox, stop: threading.Event) -> threading.Thread:
    def run():
        while not stop.is_set():
            inbox.wake.wait(0.01)
            inbox.wake.clear()
            inbox.drain()

    thread = threading.Thread(target=run, daemon=True)
    inbox.thread = thread
    thread.start()
    return thread


def test_commands_run_in_order_on_the_driver_thread_and_answer():
    inbox, stop, ran = Inbox(), threading.Event(), []
    thread = _drainer(inbox, stop)
    try:
        inbox.call(lambda: ran.append(("a", threading.current_thread())), wait=False)
        assert inbox.call(lambda: ran.append("b") or 42, wait=True) == 42
        assert ran == [("a", thread), "b"]
        with pytest.raises(ValueError, match="bad"):
            inbox.call(lambda: (_ for _ in ()).throw(ValueError("bad")), wait=True)
    finally:
        stop.set()


def test_a_command_whose_caller_timed_out_never_runs():
    inbox, ran = Inbox(), []
    with pytest.raises(FutureTimeout):
        inbox.call(lambda: ran.append(1), wait=True, timeout=0.01)  # nobody drains yet
    assert inbox.drain() is False and ran == []


def test_a_submit_that_times_out_is_dropped(make_engine):
    driver = EngineDriver(make_engine(), start=False)  # nobody drains the inbox yet
    try:
        with pytest.raises(FutureTimeout):
            driver.submit("too late", fixed(2), wait=True, timeout=0.05)
        driver.start()
        handle = driver.submit("on time", fixed(2), wait=True)
        assert handle.result(timeout=30).finished
        state = settled(driver, lambda s: s.records and s.records[-1].finished)
        assert [r.prompt for r in state.records] == ["on time"]
    finally:
        driver.stop()
