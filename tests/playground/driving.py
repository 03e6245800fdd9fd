"""For tests that drive a real EngineDriver: fixed-length requests, a settled board, an
event loop on a thread of its own (as uvicorn's is to the driver).

The make_engine and driver fixtures are in tests/conftest.py."""

import asyncio
import contextlib
import threading
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


@contextlib.contextmanager
def loop_on_thread():
    """A running event loop on a thread of its own; stopped and closed afterwards."""
    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever)
    runner.start()
    try:
        yield loop
    finally:
        loop.call_soon_threadsafe(loop.stop)
        runner.join()
        loop.close()
