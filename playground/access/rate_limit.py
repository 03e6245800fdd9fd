"""RateLimiter: a token bucket per key (a browser session), for the board's control actions."""

import threading


class RateLimited(ValueError):
    """A control action past the session's rate; the message says when to try again."""


class RateLimiter:
    def __init__(self, burst: int, per_s: float):
        self.burst, self.per_s = burst, per_s  # a full bucket, and its refill rate
        self._lock = threading.Lock()
        self._buckets: dict[str | None, tuple[float, float]] = {}  # key -> (tokens, at)

    def spend(self, key: str | None, now: float) -> None:
        """Take one token of `key`'s bucket; RateLimited (nothing taken) if it is empty."""
        with self._lock:
            tokens, at = self._buckets.get(key, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - at) * self.per_s)
            if tokens < 1.0:
                wait = (1.0 - tokens) / self.per_s
                raise RateLimited(
                    f"too many control actions: at most {self.burst} at once, then "
                    f"{self.per_s:g} per second; try again in {wait:.1f} s"
                )
            self._buckets[key] = (tokens - 1.0, now)

    def forget(self, key: str | None) -> None:
        with self._lock:
            self._buckets.pop(key, None)
