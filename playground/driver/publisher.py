"""Publisher: builds the BoardState the board reads, and keeps the inspector's watched
RequestDetails fresh. Used by the driver thread only; the BoardState it hands out is frozen,
the only view of the driver that other threads get."""

import logging
import time
from collections import OrderedDict
from collections.abc import Callable

from engine import EngineSnapshot, RequestDetail
from playground.board.state import BoardState
from playground.driver.busy import BusyTime
from playground.driver.clock import RunClock
from playground.driver.lanes import Lanes
from playground.handles import Ledger

log = logging.getLogger(__name__)

PUBLISH_INTERVAL = 0.05  # s; flat out, a BoardState at most 20 times a second
MAX_WATCHED = 8  # requests whose RequestDetail is refreshed after every step

Inspect = Callable[[str], RequestDetail | None]


class Publisher:
    def __init__(self):
        self.state: BoardState | None = None
        self.dirty = True  # something changed since the last BoardState
        self._version, self._last = 0, 0.0
        self._watched: OrderedDict[str, None] = OrderedDict()  # most recently watched last
        self._details: dict[str, RequestDetail] = {}
        self._stale: set[str] = set()  # watched requests that got outputs since
        self.run = 0  # which run since the driver started: one more with every reset
        self._busy: dict[str, BusyTime] = {}  # lane name -> its snapshots on the busy clock

    def watch(self, request_id: str, inspect: Inspect) -> RequestDetail | None:
        """Keep `request_id`'s detail fresh from now on; its detail as of now."""
        self._watched[request_id] = None
        self._watched.move_to_end(request_id)
        while len(self._watched) > MAX_WATCHED:
            self._details.pop(self._watched.popitem(last=False)[0], None)
        self._refresh(request_id, inspect)
        self.dirty = True
        return self._details.get(request_id)

    def touched(self, request_id: str) -> None:
        """The request got an output: its detail is refreshed with the next BoardState."""
        if request_id in self._watched:
            self._stale.add(request_id)

    def forget(self) -> None:
        """The engines were replaced: a new run, nothing is watched any more."""
        self.run += 1
        self._busy.clear()
        self._watched.clear()
        self._details.clear()
        self._stale.clear()

    def on_busy_clock(self, lane: str, snap: EngineSnapshot) -> EngineSnapshot:
        """A lane's snapshot as the board shows it: on the engine-busy clock (busy.py)."""
        return self._busy.setdefault(lane, BusyTime()).convert(snap)

    def publish(self, force: bool, lanes: Lanes, ledger: Ledger, workload, clock: RunClock,
                first: EngineSnapshot | None = None):  # fmt: skip
        """A new BoardState if something changed and PUBLISH_INTERVAL has passed (or force).
        `first`: the first lane's snapshot of this moment on the busy clock, if the caller
        took it already (a snapshot of 64 running requests takes half a millisecond, once a
        step is enough)."""
        now = time.monotonic()
        if not force and (not self.dirty or now - self._last < PUBLISH_INTERVAL):
            return
        inspect = lanes.first.engine.inspect  # the lanes of this moment
        for rid in self._stale & self._watched.keys():
            self._refresh(rid, inspect)
        self._stale.clear()
        self._version += 1
        taken = {lanes.first.name: first} if first is not None else {}
        self.state = BoardState(
            version=self._version,
            lanes=tuple(lane.name for lane in lanes.all),
            snapshots={
                lane.name: taken.get(lane.name)
                or self.on_busy_clock(lane.name, lane.engine.snapshot())
                for lane in lanes.all
            },
            stats={lane.name: lane.stats() for lane in lanes.all},
            records=ledger.records(),
            users=workload.views() if workload is not None else (),
            workload=workload.name if workload is not None else None,
            paused=clock.paused,
            paused_until=clock.paused_until,
            pace=clock.pace,
            clock=clock.now(),
            details=dict(self._details),
            run=self.run,
            published_at=time.time(),
        )
        self.dirty, self._last = False, now

    def _refresh(self, request_id: str, inspect: Inspect) -> None:
        try:
            detail = inspect(request_id)
        except Exception:  # noqa: BLE001 - the inspector must never stop the loop
            log.exception("inspect(%s) failed", request_id)
            return
        if detail is not None:
            self._details[request_id] = detail
