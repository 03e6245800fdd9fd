"""Who is watching the board, and how often each session's own timer ticks.

The board itself reaches every watcher over the stream (playground/server/board_stream.py),
built once for all; a session's tick is the per-session rest (its own card, the inspected
request, the seat banner, the rewind slider's range), and each tick is an event through
Gradio's queue, paid per session (nothing follows it). So the
sessions together tick about `ticks_per_s` times a second: a watcher ticks every
`watcher_tick_s` while the audience is small, less often as it grows, never rarer than
`max_interval_s` (how stale a watcher's seat banner and rewind range may get; ticks_per_s holds
up to ticks_per_s x max_interval_s watchers). A session with something live of its own (the
seat's holder or queue, a running request, an inspected one, a rewind) keeps `tick_s`; the
page ticks right after each of the session's own actions (playground/ui/__init__.py), so one
that becomes such a session gets `tick_s` at once, well inside the seat's gone_s.
"""

import threading
from dataclasses import dataclass

from playground.access.seat import require_positive

TICK_S = 0.25  # the full rate: the page's timer, 4 times a second
WATCHER_TICK_S = 1.0  # a watcher's tick while the audience is small
TICKS_PER_S = 8.0  # all watchers' ticks together: one Gradio event each, nothing chained
MAX_INTERVAL_S = 120.0  # a watcher's banner and rewind range are this stale at most


@dataclass(frozen=True, slots=True)
class TickPolicy:
    tick_s: float = TICK_S
    watcher_tick_s: float = WATCHER_TICK_S
    ticks_per_s: float = TICKS_PER_S
    max_interval_s: float = MAX_INTERVAL_S

    def __post_init__(self):
        require_positive(self, ("tick_s", "watcher_tick_s", "ticks_per_s", "max_interval_s"))
        if not self.tick_s <= self.watcher_tick_s <= self.max_interval_s:
            raise ValueError(
                "tick_s <= watcher_tick_s <= max_interval_s must hold, got "
                f"{self.tick_s}, {self.watcher_tick_s}, {self.max_interval_s}"
            )


class Audience:
    def __init__(self, policy: TickPolicy | None = None):
        self.policy = policy or TickPolicy()
        self.window_s = 2 * self.policy.max_interval_s  # a session unseen this long has left
        self._last_seen: dict[str, float] = {}
        self._lock = threading.Lock()  # ticks of different sessions run in parallel threads

    def seen(self, session: str | None, now: float) -> int:
        """Note a tick of `session` at `now` (monotonic s); returns the watchers right now."""
        with self._lock:
            self._last_seen[session] = now
            cutoff = now - self.window_s
            self._last_seen = {s: t for s, t in self._last_seen.items() if t >= cutoff}
            return len(self._last_seen)

    def interval(self, session: str | None, now: float, full_rate: bool = False) -> float:
        """Seconds until this session's next tick (and notes this one)."""
        watchers, p = self.seen(session, now), self.policy
        if full_rate:
            return p.tick_s
        return round(min(p.max_interval_s, max(p.watcher_tick_s, watchers / p.ticks_per_s)), 2)
