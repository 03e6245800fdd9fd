"""The watchdog: a step that hangs is reported once, on the board and in the log."""

import threading
import time

import pytest

from engine import SamplingParams, StopReason
from playground.board.cards import render_alert
from playground.driver import EngineDriver

GREEDY = dict(temperature=0.0, ignore_eos=True)


class _Hang:
    """A model wrapper whose forward blocks until released (a hung step)."""

    def __init__(self, model):
        self.model, self.release = model, threading.Event()
        self.hang = False

    def __call__(self, *args, **kwargs):
        if self.hang:
            self.release.wait(30)
        return self.model(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.model, name)


def test_watchdog_reports_a_stuck_step_and_clears(make_engine):
    engine = make_engine()
    hang = _Hang(engine.runner.forward)
    engine.runner.forward = hang
    d = EngineDriver(engine, stuck_after_s=0.3)
    try:
        assert d.stuck_for() is None and render_alert(d.stuck_for()) == ""
        hang.hang = True
        handle = d.submit("hang on", SamplingParams(max_tokens=2, **GREEDY), wait=True)
        deadline = time.monotonic() + 10
        while d.num_stuck_steps == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert d.num_stuck_steps == 1 and d.stuck_for() >= 0.3  # reported (and logged) once
        assert "stuck" in render_alert(d.stuck_for())
        hang.hang = False
        hang.release.set()
        assert handle.result(timeout=30).stop_reason == StopReason.MAX_TOKENS
        assert d.stuck_for() is None and d.num_stuck_steps == 1
    finally:
        hang.release.set()
        d.stop()


def test_stuck_after_must_be_positive(make_engine):
    with pytest.raises(ValueError, match="stuck_after_s"):
        EngineDriver(make_engine(), stuck_after_s=0, start=False)
