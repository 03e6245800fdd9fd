"""EngineDriver: the one thread that touches the engine(s).

Everybody else (UI callbacks, simulated users, the HTTP API) talks to the driver through a
thread-safe inbox of commands, drained before each step, and reads what it publishes: a
`BoardState` (immutable; the latest snapshot of every lane, the request ledger, the users),
and one output queue per request (`RequestHandle`) for streaming.

A lane is one engine. Normally there is one ("main"); compare mode runs two ("continuous"
and "static") that share one set of weights; the driver steps them alternately so each gets
the same CPU, and every submitted request goes to both. Handles, cards and simulated users
follow the first lane.
"""

import itertools
import logging
import queue
import sys
import threading
import time
import traceback
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import replace
from functools import partial

from engine import EngineConfig, EngineSnapshot, LLMEngine, RequestDetail, RequestOutput, StopReason
from playground.board import BoardState, LaneStats
from playground.lanes import Lane
from playground.limits import PublicLimits
from playground.requests import (
    Ledger,
    RequestHandle,
    RequestRecord,
    RequestRejected,
    final_output,
    preview,
)

__all__ = [
    "BoardState",
    "EngineDriver",
    "LaneStats",
    "RequestHandle",
    "RequestRecord",
    "RequestRejected",
]

log = logging.getLogger(__name__)

MAIN_LANE = "main"
COMPARE_LANES = ("continuous", "static")  # the first one is followed by handles and cards
MAX_WATCHED = 8  # requests whose RequestDetail is refreshed after every step
PUBLISH_INTERVAL = 0.05  # s; flat out, a BoardState at most 20 times a second
IDLE_WAIT = 0.05  # s between looks at the inbox when there is nothing to step
ERROR_BACKOFF = 0.1  # s after a failed step, so a broken engine does not spin
STUCK_AFTER_S = 60.0  # a step running longer than this is reported as stuck


class EngineDriver:
    """Owns the engine thread; see the module docstring. All public methods are thread-safe."""

    def __init__(
        self,
        engine: LLMEngine,
        *,
        pace: float | str | None = "max",
        engine_factory: Callable[[EngineConfig], LLMEngine] | None = None,
        base_config: EngineConfig | None = None,
        limits: PublicLimits | None = None,
        stuck_after_s: float = STUCK_AFTER_S,
        start: bool = True,
    ):
        self.model, self.tokenizer = engine.model, engine.tokenizer
        self.base_config = base_config or engine.config  # what reset() starts from
        self.limits = limits or PublicLimits()  # for the board and the API to apply
        if not stuck_after_s > 0:
            raise ValueError(f"stuck_after_s must be > 0, got {stuck_after_s!r}")
        self.stuck_after_s = stuck_after_s
        self._step_started: float | None = None  # time.monotonic() while a step runs
        self._stuck_reported = 0  # steps_done value of the last step reported stuck
        self.num_stuck_steps = 0
        self._factory = engine_factory or (lambda cfg: LLMEngine(self.model, self.tokenizer, cfg))
        self._lanes = [Lane(MAIN_LANE, engine)]
        self._inbox: queue.Queue = queue.Queue()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._cond = threading.Condition()  # guards _pending_steps / _steps_done
        self._pending_steps = 0
        self._steps_done = 0
        self._ids = itertools.count(1)
        self._ids_lock = threading.Lock()
        self._pace = _parse_pace(pace)
        self._paused = False
        self._clock_base, self._running_since = 0.0, time.monotonic()
        self._workload = None
        self._ledger = Ledger()  # the first lane's recent requests
        self._handles: dict[str, RequestHandle] = {}
        self._final: list[tuple[RequestHandle, RequestOutput]] = []  # sent after the publish
        self._finish_listeners: list[Callable[[RequestOutput], None]] = []  # e.g. /metrics
        self._watched: OrderedDict[str, None] = OrderedDict()
        self._details: dict[str, RequestDetail] = {}
        self._stale_details: set[str] = set()  # watched requests that got outputs
        self._version = 0
        self._dirty, self._last_publish = True, 0.0
        self._state: BoardState | None = None
        self._publish(force=True)
        self._thread = threading.Thread(target=self._loop, name="engine-driver", daemon=True)
        self._watchdog = threading.Thread(target=self._watch, name="driver-watchdog", daemon=True)
        if start:
            self.start()

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        if not self._watchdog.is_alive():
            self._watchdog.start()
        if not self._thread.is_alive():
            self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the thread; open streams end with CANCELLED."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)
        self._close_handles(StopReason.CANCELLED)

    @property
    def is_alive(self) -> bool:
        return self._thread.is_alive()

    # -- requests ------------------------------------------------------------------------------
    def submit(
        self,
        prompt: str | list[int] | list[dict],
        params=None,
        *,
        request_id: str | None = None,
        owner: str | None = None,
        priority: int = 0,
        max_in_flight: int | None = None,
        wait: bool = False,
        timeout: float = 30.0,
    ) -> RequestHandle:
        """Queue a request; outputs stream through the returned handle.

        max_in_flight: refuse it (LimitExceeded, HTTP 429) when `owner` already has this many
        unfinished requests (checked on the driver thread, so concurrent submits cannot slip
        past). wait=True blocks until the driver has handed it to the engine and raises
        RequestRejected (a ValueError) if the engine refused it, or
        concurrent.futures.TimeoutError if the driver did not get to it within `timeout`
        (the request is then dropped). Otherwise a refusal is raised by the handle's get().
        """
        handle = RequestHandle(request_id or self._next_id(), owner)
        add = partial(self._add_request, handle, prompt, params, priority, max_in_flight)
        self._call(add, wait, timeout)
        return handle

    def on_finish(self, fn: Callable[[RequestOutput], None]) -> None:
        """From now on, call `fn(out)` on the driver thread with the last output of every
        request of the first lane, before its stream gets it. `fn` must be quick."""
        self._call(lambda: self._finish_listeners.append(fn), wait=False)

    def abort(self, request_id: str) -> None:
        """Cancel a request (it finishes with CANCELLED); unknown ids are ignored."""
        self._call(lambda: self._abort(request_id), wait=False)

    def abort_owner(self, owner: str) -> None:
        """Cancel every live request of one owner (a visitor who left)."""

        def run():
            for rid in self._ledger.live_of(owner):
                self._abort(rid)

        self._call(run, wait=False)

    # -- pace ------------------------------------------------------------------------------
    def set_pace(self, pace: float | str | None) -> None:
        """'max' / None: as fast as possible; a number: that many steps per second."""
        self._pace = _parse_pace(pace)
        self._dirty = True
        self._wake.set()

    def pause(self) -> None:
        if not self._paused:
            self._clock_base = self.clock()
            self._paused = True
        self._dirty = True
        self._wake.set()

    def resume(self) -> None:
        if self._paused:
            self._running_since = time.monotonic()
            self._paused = False
        self._dirty = True
        self._wake.set()

    @property
    def is_paused(self) -> bool:
        return self._paused

    def step_once(self, wait: bool = True, timeout: float = 30.0) -> bool:
        """Run exactly one step (of every lane), typically while paused; False if idle."""
        with self._cond:
            target = self._steps_done + 1
            self._pending_steps += 1
        self._wake.set()
        if not wait:
            return True
        with self._cond:
            self._cond.wait_for(lambda: self._steps_done >= target or not self._pending_steps,
                                timeout)  # fmt: skip
            return self._steps_done >= target

    def clock(self) -> float:
        """Seconds the driver ran (not paused) since the last reset: the workload's time."""
        if self._paused:
            return self._clock_base
        return self._clock_base + time.monotonic() - self._running_since

    # -- workloads and engine configuration ---------------------------------------------------
    def reset(
        self,
        config: EngineConfig | None = None,
        *,
        compare: bool = False,
        workload=None,
        timeout: float = 60.0,
    ) -> None:
        """Drop every request and start fresh engines (config: default `base_config`).

        compare=True builds two lanes, continuous and static, with otherwise equal configs.
        A workload given here starts on the fresh clock. Blocks until done.
        """
        self._call(lambda: self._reset(config, compare, workload), wait=True, timeout=timeout)

    @property
    def config(self) -> EngineConfig:
        return self._lanes[0].engine.config

    # -- what the board reads (never waits for the driver) ---------------------------------------
    def state(self) -> BoardState:
        return self._state

    def snapshot(self) -> EngineSnapshot:
        return self._state.snapshot

    def deltas(self, request_id: str) -> tuple[tuple[int, str], ...]:
        """(step, delta) in the order the request's outputs were sent."""
        return self._ledger.deltas(request_id)

    def watch(self, request_id: str) -> None:
        """Keep this request's RequestDetail fresh in BoardState.details (inspector)."""

        def run():
            self._watched[request_id] = None
            self._watched.move_to_end(request_id)
            while len(self._watched) > MAX_WATCHED:
                self._details.pop(self._watched.popitem(last=False)[0], None)
            self._refresh_detail(request_id)
            self._dirty = True

        self._call(run, wait=False)

    def inspect(self, request_id: str, timeout: float = 10.0) -> RequestDetail | None:
        """engine.inspect() run by the driver thread; blocks until it answers."""
        return self._call(lambda: self._lanes[0].engine.inspect(request_id), True, timeout)

    # -- inside the driver thread ------------------------------------------------------------
    def _next_id(self) -> str:
        with self._ids_lock:
            return f"req-{next(self._ids)}"

    def _call(self, fn, wait: bool, timeout: float = 30.0):
        if threading.current_thread() is self._thread:
            return fn()
        fut: Future = Future()
        self._inbox.put((fn, fut))
        self._wake.set()
        if not wait:
            return None
        try:
            return fut.result(timeout)
        except FutureTimeout:
            fut.cancel()  # still in the inbox: it will not run (a running one finishes)
            raise

    def _drain_inbox(self) -> None:
        while True:
            try:
                fn, fut = self._inbox.get_nowait()
            except queue.Empty:
                return
            if not fut.set_running_or_notify_cancel():
                continue  # its caller timed out and gave up
            self._dirty = True
            try:
                fut.set_result(fn())
            except BaseException as exc:  # noqa: BLE001 - handed to whoever waits
                if not isinstance(exc, ValueError):
                    log.exception("driver command failed")
                fut.set_exception(exc)

    def _add_request(
        self, handle: RequestHandle | None, prompt, params, priority, max_in_flight=None
    ) -> str:
        rid = handle.request_id if handle else self._next_id()
        record = RequestRecord(rid, handle.owner if handle else None, preview(prompt),
                               time.monotonic())  # fmt: skip
        added = []
        try:
            if max_in_flight is not None and handle is not None:
                mine = len(self._ledger.live_of(handle.owner))
                if mine >= max_in_flight:
                    raise self.limits.in_flight_error(mine)
            for lane in self._lanes:
                lane.engine.add_request(rid, prompt, params, priority=priority)
                added.append(lane)
        except Exception as exc:
            for lane in added:  # a later lane refused: keep the lanes equal
                lane.engine.abort_request(rid)
            if isinstance(exc, RequestRejected):
                error = exc
            else:
                error = RequestRejected(str(exc))
                error.__cause__ = exc  # e.g. QueueFullError, for the API's 429
            self._ledger.put(replace(record, finished=True, error=str(exc)))
            if handle is not None:
                handle._queue.put(error)
            raise error from exc
        for lane in self._lanes:
            lane.add(rid)
        self._ledger.put(record)
        self._dirty = True  # the board shows it waiting, even while paused
        if handle is not None:
            self._handles[rid] = handle
        return rid

    def _submit_from_workload(self, prompt, params, owner: str) -> str:
        handle = RequestHandle(self._next_id(), owner)
        try:
            self._add_request(handle, prompt, params, 0)
        except RequestRejected:
            if self._workload is not None:
                self._workload.on_rejected(handle.request_id, self.clock())
        self._handles.pop(handle.request_id, None)  # users listen through on_output
        return handle.request_id

    def _abort(self, request_id: str) -> None:
        for lane in self._lanes:
            if request_id in lane.live:
                lane.engine.abort_request(request_id)

    def _reset(self, config, compare: bool, workload) -> None:
        cfg = config or self.base_config
        if compare and cfg.num_kv_blocks is None:  # two pools sized from free memory won't fit
            cfg = replace(cfg, num_kv_blocks=self._state.snapshot.kv_blocks_total)
        if compare:
            names = COMPARE_LANES
            configs = [replace(cfg, scheduling_policy=p) for p in ("continuous", "static")]
        else:
            names, configs = (MAIN_LANE,), [cfg]
        # Built before the old lanes go: a config the engine refuses leaves the board as it was.
        lanes = [Lane(n, self._factory(c)) for n, c in zip(names, configs, strict=True)]
        self._close_handles(StopReason.CANCELLED)
        self._lanes = lanes
        self._ledger.clear()
        self._watched.clear()
        self._details.clear()
        self._workload = workload
        self._clock_base, self._running_since = 0.0, time.monotonic()
        self._publish(force=True)

    def _close_handles(self, reason: StopReason) -> None:
        for rid, handle in list(self._handles.items()):
            record = self._ledger.get(rid)
            handle._queue.put(final_output(rid, record.text if record else "", reason))
        self._handles.clear()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            self._drain_inbox()
            stepping = not self._paused or self._pending_steps > 0
            if self._workload is not None and stepping:
                self._workload.tick(self.clock(), self._submit_from_workload)
            has_work = any(lane.engine.has_unfinished_requests() for lane in self._lanes)
            if not (stepping and has_work):
                with self._cond:
                    if self._pending_steps:  # nothing to step: release step_once() waiters
                        self._pending_steps = 0
                        self._cond.notify_all()
                self._publish(force=False)
                self._wake.wait(IDLE_WAIT)
                continue
            t0 = self._step_started = time.monotonic()
            failed = False
            try:
                for lane in list(self._lanes):
                    if lane.engine.has_unfinished_requests():
                        failed |= self._step_lane(lane, lane is self._lanes[0])
            finally:
                self._step_started = None
            single = self._pending_steps > 0
            # before step_once() returns, and before a finished request's last output is sent,
            # so whoever holds that output sees a board (and /metrics) that counts it
            self._publish(force=single or self._paused or bool(self._final))
            for handle, out in self._final:
                handle._queue.put(out)
            self._final.clear()
            with self._cond:
                self._pending_steps = max(0, self._pending_steps - 1)
                self._steps_done += 1
                self._cond.notify_all()
            self._wait_for_pace(t0, ERROR_BACKOFF if failed else 0.0)
        self._publish(force=True)

    def stuck_for(self) -> float | None:
        """Seconds the running step has taken, once past `stuck_after_s`; else None."""
        started = self._step_started
        if started is None:
            return None
        elapsed = time.monotonic() - started
        return elapsed if elapsed >= self.stuck_after_s else None

    def _watch(self) -> None:
        """The watchdog: logs each stuck step once, with where the driver thread is."""
        while not self._stop.wait(min(1.0, self.stuck_after_s / 4)):
            elapsed, step = self.stuck_for(), self._steps_done + 1
            if elapsed is None or self._stuck_reported == step:
                continue
            self._stuck_reported = step
            self.num_stuck_steps += 1
            frame = sys._current_frames().get(self._thread.ident)
            where = "".join(traceback.format_stack(frame)[-6:]) if frame else "?"
            log.warning("engine step %d has run for %.0f s (stuck?); the driver is at:\n%s",
                        step, elapsed, where)  # fmt: skip

    def _step_lane(self, lane: Lane, is_first: bool) -> bool:
        """One step of one lane; the first lane's outputs go to handles, ledger and users."""
        outs, error = lane.run_step()
        self._dirty = True
        if not is_first:
            return error is not None
        for out in outs:
            record = self._ledger.get(out.request_id)
            if error is not None and record is not None:  # keep what was streamed so far
                out = final_output(out.request_id, record.text, StopReason.ERROR)
                self._ledger.put(replace(record, error=f"{type(error).__name__}: {error}"))
            self._route(out, lane.step)
        return error is not None

    def _route(self, out: RequestOutput, step: int) -> None:
        rid = out.request_id
        self._ledger.update(out, step)
        if rid in self._watched:
            self._stale_details.add(rid)
        if out.finished:
            for fn in self._finish_listeners:
                try:
                    fn(out)
                except Exception:  # noqa: BLE001 - a listener must never stop the loop
                    log.exception("finish listener failed")
        handle = self._handles.get(rid)
        if handle is not None:
            if out.finished:
                self._final.append((handle, out))
                del self._handles[rid]
            else:
                handle._queue.put(out)
        if self._workload is not None:
            self._workload.on_output(out, self.clock(), self._abort)

    def _refresh_detail(self, request_id: str) -> None:
        try:
            detail = self._lanes[0].engine.inspect(request_id)
        except Exception:  # noqa: BLE001 - the inspector must never stop the loop
            log.exception("inspect(%s) failed", request_id)
            return
        if detail is not None:
            self._details[request_id] = detail

    def _wait_for_pace(self, t0: float, at_least: float) -> None:
        """Sleep out the rest of this step's time slot, answering the inbox meanwhile."""
        while not self._stop.is_set():
            slot = at_least if self._pace is None else max(at_least, 1.0 / self._pace)
            left = t0 + slot - time.monotonic()
            if left <= 0 or (self._pending_steps and self._paused):
                return
            self._wake.wait(min(left, IDLE_WAIT))
            self._wake.clear()
            self._drain_inbox()
            if self._dirty:
                self._publish(force=False)

    def _publish(self, force: bool) -> None:
        now = time.monotonic()
        if not self._dirty and not force:
            return
        if not force and now - self._last_publish < PUBLISH_INTERVAL:
            return
        self._version += 1
        for rid in self._stale_details & self._watched.keys():
            self._refresh_detail(rid)
        self._stale_details.clear()
        workload = self._workload
        self._state = BoardState(
            version=self._version,
            lanes=tuple(lane.name for lane in self._lanes),
            snapshots={lane.name: lane.engine.snapshot() for lane in self._lanes},
            stats={lane.name: lane.stats() for lane in self._lanes},
            records=self._ledger.records(),
            users=workload.views() if workload is not None else (),
            workload=workload.name if workload is not None else None,
            paused=self._paused,
            pace=self._pace,
            clock=self.clock(),
            details=dict(self._details),
        )
        self._dirty, self._last_publish = False, now


def _parse_pace(pace) -> float | None:
    if pace is None or pace == "max":
        return None
    value = float(pace)
    if not value > 0:
        raise ValueError(f"pace must be 'max' or a number of steps per second > 0, got {pace!r}")
    return value
