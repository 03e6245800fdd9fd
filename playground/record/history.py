"""StepHistory: the last N engine steps, kept as per-step deltas, for the board's rewind.

The driver thread calls `record(snapshot, users)` after every step of the first lane. What
changed since the previous step is kept, not a copy of the board: for each request only the
fields that moved, its text as the characters added and its block table as the blocks added
(both as "keep the first i, then add these"), the cached blocks that came and went, and the
step's own StepRecord (shared with the engine's telemetry). `frame(k)` replays the deltas on a
base frame (the state before the oldest step kept) and returns an EngineSnapshot as it was
after step k, plus the simulated users of that moment: every board view draws from it with
the same functions as the live board. Past `max_steps` the oldest delta is folded into the
base frame.
"""

import sys
import threading
from collections import deque
from dataclasses import dataclass, fields, replace
from typing import NamedTuple

from engine import EngineSnapshot, StepRecord
from engine.telemetry import RequestState, Totals

MAX_HISTORY_STEPS = 512
_FIELDS = tuple(f.name for f in fields(RequestState) if f.name not in ("text", "block_table"))


class RequestChange(NamedTuple):
    """One request's change in one step: keep `text[:text_from]` and add `text_tail`, likewise
    the block table; `values` are the other fields that moved, flat: (name, value, name, ...).
    A tuple, the most compact record Python has: one of these per request and step."""

    request_id: str
    text_from: int
    text_tail: str
    blocks_from: int
    blocks_tail: tuple[int, ...]
    values: tuple

    def apply(self, old: RequestState | None) -> RequestState:
        values = dict(zip(self.values[::2], self.values[1::2], strict=True))
        if old is None:  # a new request: every field is in `values`
            return RequestState(**values, text=self.text_tail, block_table=self.blocks_tail)
        text, table = old.text, old.block_table
        if self.text_tail or self.text_from != len(text):
            text = text[: self.text_from] + self.text_tail
        if self.blocks_tail or self.blocks_from != len(table):
            table = table[: self.blocks_from] + self.blocks_tail
        return replace(old, text=text, block_table=table, **values)


@dataclass(frozen=True, slots=True)
class StepDelta:
    step: int
    record: StepRecord | None  # None: the step scheduled nothing and logged no event
    changes: tuple[RequestChange, ...]
    removed: tuple[str, ...]  # requests the snapshot no longer shows
    cached_added: tuple[int, ...]
    cached_removed: tuple[int, ...]
    counts: tuple[int, int, int, int, int]  # waiting, running, finished, KV used, KV cached
    totals: Totals
    num_ttfts: int
    num_tpots: int
    users: tuple | None  # the workload's UserViews, when they changed in this step


@dataclass(slots=True)
class _Frame:
    """The board's state after one step, as the history rebuilds it."""

    step: int
    requests: dict[str, RequestState]
    cached: set[int]
    counts: tuple[int, int, int, int, int]
    totals: Totals
    num_ttfts: int
    num_tpots: int
    users: tuple

    def copy(self) -> "_Frame":
        return replace(self, requests=dict(self.requests), cached=set(self.cached))

    def apply(self, d: StepDelta) -> None:
        """Move this frame to after `d.step` (mutates it)."""
        for rid in d.removed:
            self.requests.pop(rid, None)
        for c in d.changes:
            self.requests[c.request_id] = c.apply(self.requests.get(c.request_id))
        self.cached.difference_update(d.cached_removed)
        self.cached.update(d.cached_added)
        self.step, self.counts, self.totals = d.step, d.counts, d.totals
        self.num_ttfts, self.num_tpots = d.num_ttfts, d.num_tpots
        if d.users is not None:
            self.users = d.users


class StepHistory:
    """See the module docstring. Written by the driver thread; `frame()`, `steps()` and
    `nbytes()` may be called from any thread: the lock keeps the base frame and the deltas
    in step with each other (held for a copy, never for a rebuild)."""

    def __init__(self, max_steps: int = MAX_HISTORY_STEPS):
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.max_steps = max_steps
        self.epoch = 0  # moves on clear(): a frame cached for another run is stale
        self._lock = threading.Lock()
        self.clear()

    def clear(self) -> None:
        with self._lock:
            self.epoch += 1
            self._deltas: deque[StepDelta] = deque()
            self._base = _Frame(0, {}, set(), (0, 0, 0, 0, 0), Totals(), 0, 0, ())
            self._live = self._base.copy()  # the newest frame: the next delta is taken from it
            self._latest: EngineSnapshot | None = None

    # -- recording (driver thread) ----------------------------------------------------------
    def record(self, snap: EngineSnapshot, users: tuple = ()) -> None:
        """After a step of the first lane: keep what changed since the previous one."""
        live, old = self._live, self._live.requests
        changes, seen = [], set()
        for new in snap.requests:
            rid = new.request_id
            seen.add(rid)
            prev = old.get(rid)
            if prev is new:
                continue
            change = _change(prev, new)
            if change is not None:
                changes.append(change)
        removed = tuple(rid for rid in old if rid not in seen)
        cached = set(snap.kv_cached_block_ids)
        record = snap.steps[-1] if snap.steps and snap.steps[-1].step == snap.step else None
        delta = StepDelta(
            step=snap.step,
            record=record,
            changes=tuple(changes),
            removed=removed,
            cached_added=tuple(sorted(cached - live.cached)),
            cached_removed=tuple(sorted(live.cached - cached)),
            counts=(
                snap.num_waiting,
                snap.num_running,
                snap.num_finished,
                snap.kv_blocks_used,
                snap.kv_blocks_cached,
            ),  # fmt: skip
            totals=snap.totals,
            num_ttfts=len(snap.ttfts),
            num_tpots=len(snap.tpots),
            users=users if users is not live.users else None,
        )
        # the snapshot's own objects: a finished request's state is the same object from one
        # snapshot to the next, so the identity check above skips it
        users = users if delta.users is not None else live.users
        requests = {r.request_id: r for r in snap.requests}
        self._live = _Frame(snap.step, requests, cached, delta.counts, snap.totals,
                            delta.num_ttfts, delta.num_tpots, users)  # fmt: skip
        with self._lock:
            self._deltas.append(delta)
            self._latest = snap
            while len(self._deltas) > self.max_steps:
                self._base.apply(self._deltas.popleft())

    # -- reading -------------------------------------------------------------------------------
    def steps(self) -> tuple[int, int] | None:
        """(oldest, newest) step that can be shown, or None before the first step."""
        with self._lock:
            deltas = self._deltas
            return (deltas[0].step, deltas[-1].step) if deltas else None

    def frame(self, step: int) -> tuple[EngineSnapshot, tuple] | None:
        """(the EngineSnapshot as it was after `step`, the users' views then); a step older
        than the oldest kept shows the oldest; None before the first step."""
        with self._lock:
            latest, base, deltas = self._latest, self._base.copy(), tuple(self._deltas)
        if latest is None or not deltas:
            return None
        records = []
        for d in deltas:
            if d.step > step and d is not deltas[0]:
                break
            base.apply(d)
            if d.record is not None:
                records.append(d.record)
        f = base
        waiting, running, finished, used, cached = f.counts
        snap = replace(
            latest,
            step=f.step,
            num_waiting=waiting,
            num_running=running,
            num_finished=finished,
            kv_blocks_used=used,
            kv_blocks_cached=cached,
            requests=tuple(f.requests.values()),
            steps=tuple(records),
            totals=f.totals,
            ttfts=latest.ttfts[: f.num_ttfts],
            tpots=latest.tpots[: f.num_tpots],
            kv_cached_block_ids=tuple(sorted(f.cached)),
        )
        return snap, f.users

    def nbytes(self) -> int:
        """Memory the deltas hold (deep sys.getsizeof, each object once); the StepRecords and
        Totals are counted too, though the engine's telemetry shares the newest of them."""
        with self._lock:
            deltas = tuple(self._deltas)
        seen: set[int] = set()
        return sum(_deep_size(d, seen) for d in deltas)

    def __len__(self) -> int:
        return len(self._deltas)


def _change(old: RequestState | None, new: RequestState) -> RequestChange | None:
    if old is None:
        values = tuple(x for name in _FIELDS for x in (name, getattr(new, name)))
        return RequestChange(new.request_id, 0, new.text, 0, new.block_table, values)
    values = tuple(
        x for name in _FIELDS if (v := getattr(new, name)) != getattr(old, name) for x in (name, v)
    )
    text_from = len(old.text) if new.text.startswith(old.text) else 0
    text_tail = new.text[text_from:]
    blocks_from = _common_prefix(old.block_table, new.block_table)
    blocks_tail = new.block_table[blocks_from:]
    if not values and not text_tail and text_from == len(old.text) and not blocks_tail and (
        blocks_from == len(old.block_table)
    ):  # fmt: skip
        return None
    return RequestChange(new.request_id, text_from, text_tail, blocks_from, blocks_tail, values)


def _common_prefix(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    i = 0
    while a[i] == b[i]:
        i += 1
    return i


def _deep_size(obj, seen: set[int]) -> int:
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    size = sys.getsizeof(obj)
    if isinstance(obj, str | bytes | int | float | bool) or obj is None:
        return size
    if isinstance(obj, dict):
        return size + sum(_deep_size(k, seen) + _deep_size(v, seen) for k, v in obj.items())
    if isinstance(obj, tuple | list | set | frozenset):
        return size + sum(_deep_size(x, seen) for x in obj)
    slots = getattr(type(obj), "__slots__", ())
    return size + sum(_deep_size(getattr(obj, s), seen) for s in slots if hasattr(obj, s))
