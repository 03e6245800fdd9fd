"""The control seat: who may drive the shared board (start, presets, pause, step, pace, reset).

Every browser session that opened the board is a visitor, and every visitor may send prompts.
The controls act on the one engine everybody watches, so ControlMode says who may use them:

- open: every visitor (a laptop: one person, or friends around it).
- seat: one visitor at a time, the holder. A control action on a free seat takes it (the
  visitor who starts a run drives it); the others watch, see who drives and for how long, and
  may queue. The seat passes to the first present visitor in the queue (or is free again) when
  the holder gives it up, leaves (the tab closed, or no tick for `gone_s`), makes no control
  action for `idle_s`, or, while others queue for it, has held it `term_s` in all.
- locked: only presenter sessions, those that opened the board with the presenter key in the
  URL (`?presenter=KEY`).

Each control action also spends a token of the session's RateLimiter, in every mode. Pure of
Gradio and of the driver: times come in as `now` (monotonic s), and `on_handover` is called
(outside the lock) whenever the seat leaves a holder, so the board can resume an engine that
holder paused.
"""

import hmac
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from playground.access.rate_limit import RateLimiter

PRESENTER_PARAM = "presenter"  # the URL's query parameter that carries the presenter key
FORGET_AFTER_S = 3600.0  # a visitor unseen this long (no unload came) is forgotten


class ControlMode(StrEnum):
    OPEN = "open"
    SEAT = "seat"
    LOCKED = "locked"


class Role(StrEnum):
    """What one session may do with the controls right now."""

    DRIVER = "driver"  # may drive: every visitor in open mode, the holder, a presenter
    FREE = "free"  # seat mode, nobody holds it: a control action takes the seat
    WATCHER = "watcher"  # seat mode, another visitor holds it
    QUEUED = "queued"  # a watcher in the queue for the seat
    AUDIENCE = "audience"  # locked mode, not a presenter
    STRANGER = "stranger"  # not a session of the board's page: refused everything

    @property
    def may_drive(self) -> bool:
        return self in (Role.DRIVER, Role.FREE)


def require_positive(policy, names: tuple[str, ...]) -> None:
    """ValueError naming the first of `policy`'s fields `names` that is not a finite number > 0."""
    for name in names:
        value = getattr(policy, name)
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not 0 < value < math.inf
        ):
            raise ValueError(f"{name} must be a number > 0, got {value!r}")


@dataclass(frozen=True, slots=True)
class SeatPolicy:
    term_s: float = 180.0  # the longest one visitor holds the seat while others queue
    idle_s: float = 60.0  # the holder's seat passes after this long without a control action
    gone_s: float = 30.0  # a session whose page has not ticked for this long has left
    burst: int = 6  # control actions a session may make at once ...
    actions_per_s: float = 1.0  # ... and then this many per second

    def __post_init__(self):
        require_positive(self, ("term_s", "idle_s", "gone_s", "actions_per_s"))
        if isinstance(self.burst, bool) or not isinstance(self.burst, int) or self.burst < 1:
            raise ValueError(f"burst must be an integer >= 1, got {self.burst!r}")


@dataclass(frozen=True, slots=True)
class SeatView:
    """What one session sees of the seat."""

    mode: ControlMode
    role: Role
    holder: str | None = None  # the holder's session (seat mode)
    left_s: float | None = None  # until the seat passes: term or idle, whichever comes first
    position: int | None = None  # 1-based place in the queue (QUEUED)
    num_queued: int = 0


class Seat:
    """Thread-safe: the board's callbacks run in many threads."""

    def __init__(
        self,
        mode: ControlMode | str = ControlMode.OPEN,
        policy: SeatPolicy | None = None,
        presenter_key: str | None = None,
        on_handover: Callable[[], None] = lambda: None,
    ):
        self.mode = ControlMode(mode)
        if self.mode is ControlMode.LOCKED and not presenter_key:
            raise ValueError("presenter_key: locked controls need a presenter key")
        self.policy = policy or SeatPolicy()
        self.presenter_key = presenter_key
        self.on_handover = on_handover
        self.rate = RateLimiter(self.policy.burst, self.policy.actions_per_s)
        self._lock = threading.Lock()
        self._seen: dict[str, float] = {}  # visitor session -> its page's last tick
        self._presenters: set[str] = set()
        self.holder: str | None = None  # seat mode: the session that drives
        self._since = self._last_action = 0.0  # when the holder took the seat, last acted
        self._queue: list[str] = []  # sessions waiting for the seat, first first

    # -- visitors come and go ----------------------------------------------------------------
    def arrive(self, session: str | None, now: float, key: str | None = None) -> None:
        """A page opened (its load event); `key`: the presenter key it carries, if any."""
        if not session:
            return
        with self._lock:
            self._seen[session] = now
            if (
                key
                and self.presenter_key
                and hmac.compare_digest(key.encode(), self.presenter_key.encode())
            ):
                self._presenters.add(session)

    def leave(self, session: str | None, now: float) -> None:
        """A page closed (its unload event): the seat passes on if it held it."""
        with self._lock:
            self._seen.pop(session, None)
            self._presenters.discard(session)
            if session in self._queue:
                self._queue.remove(session)
            handed = self._pass_on(now) if session == self.holder else False
        self.rate.forget(session)
        self._handed(handed)

    def seen(self, session: str | None, now: float) -> None:
        """The page's timer ticked: the session is present. Also expires the holder's turn."""
        with self._lock:
            if session in self._seen:
                self._seen[session] = now
            handed = self._expire(now)
        self._handed(handed)

    def is_visitor(self, session: str | None) -> bool:
        with self._lock:
            return session in self._seen

    # -- the controls ------------------------------------------------------------------------
    def act(self, session: str | None, now: float) -> Role:
        """A control action of `session`: the session's role, DRIVER if the action may go
        ahead (a free seat is taken by it; the holder's idle time starts again), else why not.
        RateLimited (nothing changed) past the session's rate limit."""
        handed = False
        try:
            with self._lock:
                handed = self._expire(now)
                role = self._role(session, now)
                if role.may_drive:
                    self.rate.spend(session, now)
                    if role is Role.FREE:
                        self._take(session, now)
                    elif session == self.holder:
                        self._last_action = now
                    role = Role.DRIVER
        finally:
            self._handed(handed)
        return role

    def toggle(self, session: str | None, now: float) -> Role:
        """The seat button (seat mode): take a free seat, give it up, queue for it or leave
        the queue. The session's role afterwards; RateLimited like a control action."""
        handed = False
        try:
            with self._lock:
                handed = self._expire(now)
                role = self._role(session, now)
                if self.mode is ControlMode.SEAT and role is not Role.STRANGER:
                    self.rate.spend(session, now)
                    if role is Role.FREE:
                        self._take(session, now)
                    elif session == self.holder:
                        handed = self._pass_on(now)
                    elif role is Role.QUEUED:
                        self._queue.remove(session)
                    else:
                        self._queue.append(session)
                role = self._role(session, now)
        finally:
            self._handed(handed)
        return role

    def view(self, session: str | None, now: float) -> SeatView:
        with self._lock:
            role = self._role(session, now)
            left = self._left(now) if self.holder is not None else None
            position = self._queue.index(session) + 1 if session in self._queue else None
            return SeatView(self.mode, role, self.holder, left, position, len(self._queue))

    # -- inside the lock ---------------------------------------------------------------------
    def _role(self, session, now) -> Role:
        if session not in self._seen:
            return Role.STRANGER
        if self.mode is ControlMode.OPEN:
            return Role.DRIVER
        if self.mode is ControlMode.LOCKED:
            return Role.DRIVER if session in self._presenters else Role.AUDIENCE
        if session == self.holder:
            return Role.DRIVER
        if session in self._queue:
            return Role.QUEUED
        return Role.FREE if self.holder is None else Role.WATCHER

    def _present(self, session, now) -> bool:
        return session in self._seen and now - self._seen[session] < self.policy.gone_s

    def _left(self, now) -> float:
        """Seconds until the holder's seat passes (the term counts only while others queue)."""
        idle_left = self._last_action + self.policy.idle_s - now
        if not self._queue:
            return idle_left
        return min(idle_left, self._since + self.policy.term_s - now)

    def _take(self, session, now) -> None:
        self.holder, self._since, self._last_action = session, now, now
        if session in self._queue:
            self._queue.remove(session)

    def _expire(self, now) -> bool:
        """Pass the seat on if its holder's turn is over; True if it left a holder."""
        for s in [s for s, t in self._seen.items() if now - t > FORGET_AFTER_S]:
            del self._seen[s]
            self._presenters.discard(s)
        if self.holder is None:
            return False
        if self._present(self.holder, now) and self._left(now) > 0:
            return False
        return self._pass_on(now)

    def _pass_on(self, now) -> bool:
        """The seat leaves its holder: to the first present visitor in the queue, else free.
        Queued visitors who are no longer present lose their place. True (it left a holder)."""
        self.holder = None
        while self._queue:
            nxt = self._queue.pop(0)
            if self._present(nxt, now):
                self._take(nxt, now)
                break
        return True

    def _handed(self, handed: bool) -> None:
        if handed:
            self.on_handover()
