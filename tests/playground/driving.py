"""For tests that drive a real EngineDriver: fixed-length requests, a settled board.

The make_engine and driver fixtures are in tests/conftest.py."""

import time

from engine import SamplingParams

FIXED = dict(temperature=0.0, ignore_eos=True)  # random weights: make lengths exact


def fixed(max_tokens: int, **kw) -> SamplingParams:
    """Greedy SamplingParams that run exactly `max_tokens` tokens."""
    return SamplingParams(max_tokens=max_tokens, **{**FIXED, **kw})


def settled(driver, predicate, timeout: float = 30.0):
    """The first published BoardState that satisfies predicate (states lag by <= 50 ms)."""
    deadline = time.monotonic() + timeout
    while not predicate(state := driver.state()) and time.monotonic() < deadline:
        time.sleep(0.02)
    return state
