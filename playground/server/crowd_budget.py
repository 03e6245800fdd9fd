"""The crowd budget: how many viewer-updates the board's fan-out writes per second, in all.

Each update is a socket write on the server's one event loop, on the cores the engine steps on,
so the crowd's write work must not grow with the crowd. Below the budget (viewers x frame rate
fit) every viewer gets every frame. Above it the viewers take turns: a frame goes to as many
of them as the time since the last frame buys, those that waited longest first, so each one
gets an update every len(viewers) / budget seconds and the writes are spread over the frames
(no bursts: a frame goes to a second's budget of viewers at most, even after a still board).
A viewer that missed frames gets its next one in full (playground/server/board_stream.py),
since the deltas it missed are gone. The seat's stream is not rationed.
"""

from itertools import islice

# a class of about a hundred viewers at the feed's usual frame rate fits; past that each
# viewer's cadence stretches
VIEWER_UPDATES_PER_S = 500.0


class CrowdBudget:
    """The rotation of viewers and the updates not yet spent; the fan-out's loop only."""

    def __init__(self, updates_per_s: float = VIEWER_UPDATES_PER_S):
        if updates_per_s <= 0:
            raise ValueError(f"updates_per_s must be > 0, got {updates_per_s}")
        self.updates_per_s = updates_per_s
        self._turns: dict = {}  # every viewer (an ordered set), the longest waiting first
        self._credit = 0.0  # the part of an update the last frames bought, carried over
        self._last: float | None = None  # when the last frame went out
        self.gap_s = 0.0  # between the last two frames

    def add(self, viewer) -> None:
        self._turns[viewer] = None

    def remove(self, viewer) -> None:
        self._turns.pop(viewer, None)

    def due(self, now: float) -> list:
        """The viewers a frame published at `now` goes to; they move to the back of the turns.
        All of them while the time since the last frame buys an update for each (and they fit
        in a second's budget: the first frame after a still board is no burst for a crowd)."""
        num_viewers = len(self._turns)
        if self._last is None:
            credit = float(num_viewers)
        else:
            self.gap_s = max(0.0, now - self._last)
            credit = self._credit + self.gap_s * self.updates_per_s
        self._last = now
        # a still board saves up no burst: a frame goes to a second's budget of viewers at most
        credit = min(credit, float(num_viewers), self.updates_per_s)
        num_due = int(credit + 1e-9)  # not one short of an exact fit by a rounding error
        self._credit = credit - num_due
        picked = list(islice(self._turns, num_due))
        for viewer in picked:
            del self._turns[viewer]
            self._turns[viewer] = None
        return picked

    def interval_s(self) -> float:
        """Seconds between two updates of one viewer now: the frames' gap below the budget,
        len(viewers) / budget above it."""
        return max(self.gap_s, len(self._turns) / self.updates_per_s)
