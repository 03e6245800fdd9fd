"""Who is watching the board: the sessions whose timer ticked in the last few seconds.

Every watcher's browser redraws the charts it is sent, and the server builds and sends them;
on a small shared CPU that competes with the engine itself. So charts come at most every
`CHART_INTERVAL_S x slowdown`, where the slowdown grows with the audience beyond
FULL_RATE_SESSIONS watchers.
"""

import threading

ACTIVE_WINDOW_S = 3.0  # a session that has not ticked for this long has left (or is hidden)
FULL_RATE_SESSIONS = 4  # up to this many watchers, everyone gets the full refresh rate


class Audience:
    def __init__(self, window_s: float = ACTIVE_WINDOW_S, full_rate: int = FULL_RATE_SESSIONS):
        if window_s <= 0 or full_rate < 1:
            raise ValueError(
                f"window_s must be > 0 and full_rate >= 1, got {window_s} and {full_rate}"
            )
        self.window_s = window_s
        self.full_rate = full_rate
        self._last_seen: dict[str, float] = {}
        self._lock = threading.Lock()  # ticks of different sessions run in parallel threads

    def seen(self, session: str | None, now: float) -> int:
        """Note a tick of `session` at `now` (monotonic s); returns the watchers right now."""
        with self._lock:
            self._last_seen[session] = now
            cutoff = now - self.window_s
            self._last_seen = {s: t for s, t in self._last_seen.items() if t >= cutoff}
            return len(self._last_seen)

    def slowdown(self, session: str | None, now: float) -> float:
        """How much longer than usual to wait between chart redraws (>= 1)."""
        return max(1.0, self.seen(session, now) / self.full_rate)
