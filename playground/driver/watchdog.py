"""Watchdog: a thread that reports an engine step running longer than `stuck_after_s`.

`stuck_for()` tells the board (its banner); each stuck step is logged once, with the stack
of the driver thread, so the server log says where it hangs.
"""

import logging
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager

log = logging.getLogger(__name__)

STUCK_AFTER_S = 60.0  # a step running longer than this is reported as stuck


class Watchdog:
    def __init__(self, stuck_after_s: float, stop: threading.Event):
        if not stuck_after_s > 0:
            raise ValueError(f"stuck_after_s must be > 0, got {stuck_after_s!r}")
        self.stuck_after_s = stuck_after_s
        self.num_stuck_steps = 0
        self._stop = stop  # the driver's: set when it stops
        self._started: float | None = None  # time.monotonic() while a step runs
        self._step = 0  # the number of the running (or last) step
        self._reported = 0  # the step last reported stuck
        self._watched: threading.Thread | None = None
        self._thread = threading.Thread(target=self._watch, name="driver-watchdog", daemon=True)

    def start(self, watched: threading.Thread) -> None:
        self._watched = watched
        if not self._thread.is_alive():
            self._thread.start()

    @contextmanager
    def step(self, number: int) -> Iterator[None]:
        """Times one step (called by the driver thread around it)."""
        self._step, self._started = number, time.monotonic()
        try:
            yield
        finally:
            self._started = None

    def stuck_for(self) -> float | None:
        """Seconds the running step has taken, once past `stuck_after_s`; else None."""
        started = self._started
        if started is None:
            return None
        elapsed = time.monotonic() - started
        return elapsed if elapsed >= self.stuck_after_s else None

    def _watch(self) -> None:
        while not self._stop.wait(min(1.0, self.stuck_after_s / 4)):
            elapsed, step = self.stuck_for(), self._step
            if elapsed is None or self._reported == step:
                continue
            self._reported = step
            self.num_stuck_steps += 1
            frame = sys._current_frames().get(self._watched.ident) if self._watched else None
            where = "".join(traceback.format_stack(frame)[-6:]) if frame else "?"
            log.warning("engine step %d has run for %.0f s (stuck?); the driver is at:\n%s",
                        step, elapsed, where)  # fmt: skip
