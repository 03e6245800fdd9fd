"""RunClock (pace, pause and the workload's clock) and StepCounter (steps done, single steps
asked for). RunClock is written by the driver thread only: pace / pause / resume reach it
through the inbox. StepCounter is shared with step_once() callers, under its condition.

Two bounds protect the shared engine whoever holds the controls: the pace has a floor
(MIN_PACE), and a pause ends by itself `max_pause_s` after it began (single steps taken
meanwhile do not extend it), so nothing that waits on the engine (a visitor's card, an API
stream) waits longer than that for a pause.
"""

import math
import threading
import time

MIN_PACE = 0.5  # steps per second: the slowest slow motion anyone may set
MAX_PAUSE_S = 120.0  # a pause resumes by itself after this long


class RunClock:
    def __init__(self, pace: float | str | None, max_pause_s: float = MAX_PAUSE_S):
        if not (isinstance(max_pause_s, int | float) and 0 < max_pause_s < math.inf):
            raise ValueError(f"max_pause_s must be a number of seconds > 0, got {max_pause_s!r}")
        self.pace = parse_pace(pace)  # steps per second; None = as fast as possible
        self.max_pause_s = max_pause_s
        self.paused = False
        self.paused_until: float | None = None  # monotonic s when the pause ends by itself
        self._base, self._since = 0.0, time.monotonic()  # seconds run before `_since`

    def now(self) -> float:
        """Seconds run (not paused) since the last restart: the workload's time."""
        if self.paused:
            return self._base
        return self._base + time.monotonic() - self._since

    def pause(self) -> None:
        """Pause (a pause already running keeps its end: pressing Pause again does not
        extend it)."""
        if not self.paused:
            self._base, self.paused = self.now(), True
            self.paused_until = time.monotonic() + self.max_pause_s

    def resume(self) -> None:
        if self.paused:
            self._since, self.paused, self.paused_until = time.monotonic(), False, None

    def resume_if_due(self) -> bool:
        """Resume a pause that has lasted max_pause_s; True if it did."""
        if self.paused and time.monotonic() >= self.paused_until:
            self.resume()
            return True
        return False

    def restart(self) -> None:
        self._base, self._since = 0.0, time.monotonic()

    def slot(self, at_least: float) -> float:
        """Seconds one step may take at this pace, and at least `at_least`."""
        return at_least if self.pace is None else max(at_least, 1.0 / self.pace)


class StepCounter:
    def __init__(self):
        self._cond = threading.Condition()  # guards the two counts
        self.num_pending = 0  # single steps asked for (step_once) and not run yet
        self.num_done = 0

    def ask_one(self) -> int:
        """Ask for one more step; the value num_done will have once it ran."""
        with self._cond:
            self.num_pending += 1
            return self.num_done + 1

    def wait_until(self, target: int, timeout: float) -> bool:
        """True once `target` steps ran; False if the loop dropped the ask (idle) or timed out."""
        with self._cond:
            self._cond.wait_for(lambda: self.num_done >= target or not self.num_pending, timeout)
            return self.num_done >= target

    def one_done(self) -> None:
        with self._cond:
            self.num_pending = max(0, self.num_pending - 1)
            self.num_done += 1
            self._cond.notify_all()

    def drop_pending(self) -> None:
        """Nothing to step: release whoever waits in wait_until()."""
        with self._cond:
            if self.num_pending:
                self.num_pending = 0
                self._cond.notify_all()


def parse_pace(pace) -> float | None:
    """'max' / None: as fast as possible; a number: that many steps per second, at least
    MIN_PACE. ValueError naming the pace otherwise."""
    if pace is None or pace == "max":
        return None
    try:
        value = float(pace)
    except (TypeError, ValueError):
        value = math.nan
    if not MIN_PACE <= value < math.inf:  # also refuses nan
        raise ValueError(
            f"pace must be 'max' or a number of steps per second >= {MIN_PACE:g}, got {pace!r}"
        )
    return value
