"""What a preemption costs its victim: the tokens it computes again and the time it loses.

A preempted sequence loses the K/V of all its computed tokens (recompute: its blocks are
freed). Once readmitted it computes them again, less whatever the prefix cache still holds,
until it is back where it was: its high-water mark of computed tokens. The time lost is from
the preemption to that moment (or to its end, if it finishes first); had it not been
preempted it would have been there at once, so this is the delay the preemption added.
A second preemption before it is back closes the first one's span and opens its own.
"""

from dataclasses import dataclass


@dataclass(slots=True)
class Preemption:
    step: int  # the step that preempted it
    num_dropped_tokens: int  # computed tokens whose K/V were freed
    start: float  # time.monotonic() at the start of that step
    num_recomputed_tokens: int = 0  # computed again since (prefix-cache hits excluded)
    time_lost: float | None = None  # seconds until it was back (None: not yet)

    def close(self, now: float) -> None:
        self.time_lost = max(0.0, now - self.start)

    def lost_so_far(self, now: float) -> float:
        return self.time_lost if self.time_lost is not None else max(0.0, now - self.start)


class PreemptionLog:
    """One sequence's preemptions and its high-water mark of computed tokens."""

    __slots__ = ("events", "num_computed_high")

    def __init__(self):
        self.events: list[Preemption] = []
        self.num_computed_high = 0  # the most tokens it ever had computed

    @property
    def open(self) -> Preemption | None:
        """The latest preemption, while the sequence is not back where it was."""
        last = self.events[-1] if self.events else None
        return last if last is not None and last.time_lost is None else None

    def preempted(self, step: int, num_computed: int, start: float) -> None:
        if (previous := self.open) is not None:
            previous.close(start)
        self.num_computed_high = max(self.num_computed_high, num_computed)
        self.events.append(Preemption(step, num_computed, start))

    def computed(self, first: int, num_new: int, now: float) -> int:
        """Tokens [first, first + num_new) were computed at `now`; returns how many of them
        were computed again. Being back at the high-water mark ends the open span."""
        end = first + num_new
        recomputed = 0
        if (p := self.open) is not None:
            recomputed = max(0, min(end, self.num_computed_high) - first)
            p.num_recomputed_tokens += recomputed
            if end >= self.num_computed_high:
                p.close(now)
        self.num_computed_high = max(self.num_computed_high, end)
        return recomputed

    def finished(self, now: float) -> None:
        """The sequence ended: an open span ends with it."""
        if (p := self.open) is not None:
            p.close(now)

    @property
    def num_recomputed_tokens(self) -> int:
        return sum(p.num_recomputed_tokens for p in self.events)

    def time_lost(self, now: float) -> float:
        return sum(p.lost_so_far(now) for p in self.events)

    def spans(self, now: float) -> tuple[tuple[float, float], ...]:
        """(start, end) of each preemption's lost time, the open one up to `now`."""
        return tuple((p.start, p.start + p.lost_so_far(now)) for p in self.events)
