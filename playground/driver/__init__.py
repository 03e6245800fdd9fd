"""EngineDriver: the one thread that touches the engine(s).

Everybody else (UI callbacks, simulated users, the HTTP API) talks to the driver through its
inbox: every call that changes something (a request, an abort, pace, pause, a reset) is a
command run by the driver thread between steps. They read what it publishes: a BoardState
(frozen; the latest snapshot of every lane, the request ledger, the users) and one output
stream per request (RequestHandle). The jobs live next to this file: inbox, lanes (one or
two engines), streams, publisher (BoardState), clock (pace, pause) and watchdog.
"""

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import replace

from engine import EngineConfig, EngineSnapshot, LLMEngine, RequestDetail, RequestOutput, StopReason
from playground.board import BoardState
from playground.driver.clock import RunClock, StepCounter, parse_pace
from playground.driver.inbox import Inbox
from playground.driver.lanes import MAIN_LANE, Lane, Lanes
from playground.driver.publisher import Publisher
from playground.driver.streams import Streams
from playground.driver.watchdog import STUCK_AFTER_S, Watchdog
from playground.limits import PublicLimits
from playground.requests import (
    Ledger,
    RequestHandle,
    RequestRecord,
    RequestRejected,
    final_output,
    preview,
)

__all__ = ["STUCK_AFTER_S", "EngineDriver", "RequestHandle", "RequestRejected"]

IDLE_WAIT = 0.05  # s between looks at the inbox when there is nothing to step
ERROR_BACKOFF = 0.1  # s after a failed step, so a broken engine does not spin


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
        self.limits = limits or PublicLimits()  # for the public doors (playground/public.py)
        self._factory = engine_factory or (lambda cfg: LLMEngine(self.model, self.tokenizer, cfg))
        self._stop = threading.Event()
        self._watchdog = Watchdog(stuck_after_s, self._stop)
        self._inbox, self._steps = Inbox(), StepCounter()
        self._lanes = Lanes([Lane(MAIN_LANE, engine)])
        self._clock, self._ledger = RunClock(pace), Ledger()  # the ledger: the first lane's
        self._streams, self._publisher = Streams(), Publisher()
        self._workload = None
        self._ids, self._ids_lock = itertools.count(1), threading.Lock()
        self._publish(force=True)
        self._thread = threading.Thread(target=self._loop, name="engine-driver", daemon=True)
        self._inbox.thread = self._thread
        if start:
            self.start()

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        self._watchdog.start(self._thread)
        if not self._thread.is_alive():
            self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the thread; open streams end with CANCELLED."""
        self._stop.set()
        self._inbox.wake.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)
        self._streams.close_all(self._text_of, StopReason.CANCELLED)

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
        label: str | None = None,
        priority: int = 0,
        max_in_flight: int | None = None,
        wait: bool = False,
        timeout: float = 30.0,
    ) -> RequestHandle:
        """Queue a request; outputs stream through the returned handle.

        label: what the board shows of the prompt (default: a preview of it).
        max_in_flight: refuse it (LimitExceeded, HTTP 429) when `owner` already has this many
        unfinished requests (checked on the driver thread, so concurrent submits cannot slip
        past). wait=True blocks until the driver has handed it to the engine and raises
        RequestRejected if it was refused, or concurrent.futures.TimeoutError if the driver
        did not get to it within `timeout` (the request is then dropped). Otherwise a
        refusal is raised by the handle's get().
        """
        handle = RequestHandle(request_id or self._next_id(), owner)
        label = preview(prompt) if label is None else label

        def add():
            try:
                self._add_request(handle.request_id, owner, prompt, label, params, priority,
                                  max_in_flight)  # fmt: skip
            except RequestRejected as exc:
                handle.put(exc)
                raise
            self._streams.open(handle)

        self._inbox.call(add, wait, timeout)
        return handle

    def on_finish(self, fn: Callable[[RequestOutput], None]) -> None:
        """From now on, call `fn(out)` on the driver thread with the last output of every
        request of the first lane, before its stream gets it. `fn` must be quick."""
        self._inbox.call(lambda: self._streams.on_finish(fn), wait=False)

    def abort(self, request_id: str) -> None:
        """Cancel a request (it finishes with CANCELLED); unknown ids are ignored."""
        self._inbox.call(lambda: self._lanes.abort(request_id), wait=False)

    def abort_owner(self, owner: str) -> None:
        """Cancel every live request of one owner (a visitor who left)."""

        def run():
            for rid in self._ledger.live_of(owner):
                self._lanes.abort(rid)

        self._inbox.call(run, wait=False)

    # -- pace ------------------------------------------------------------------------------
    def set_pace(self, pace: float | str | None) -> None:
        """'max' / None: as fast as possible; a number: that many steps per second."""
        value = parse_pace(pace)  # a bad one is refused here, in the caller's thread
        self._inbox.call(lambda: setattr(self._clock, "pace", value), wait=False)

    def pause(self) -> None:
        self._inbox.call(self._clock.pause, wait=False)

    def resume(self) -> None:
        self._inbox.call(self._clock.resume, wait=False)

    @property
    def is_paused(self) -> bool:
        return self._clock.paused

    def step_once(self, wait: bool = True, timeout: float = 30.0) -> bool:
        """Run exactly one step (of every lane), typically while paused; False if idle."""
        target = self._steps.ask_one()
        self._inbox.wake.set()
        return self._steps.wait_until(target, timeout) if wait else True

    def clock(self) -> float:
        """Seconds the driver ran (not paused) since the last reset: the workload's time."""
        return self._clock.now()

    # -- workloads and engine configuration ---------------------------------------------------
    def reset(self, config: EngineConfig | None = None, *, compare: bool = False,
              workload=None, timeout: float = 60.0) -> None:  # fmt: skip
        """Drop every request and start fresh engines (config: default `base_config`).

        compare=True builds two lanes, continuous and static, with otherwise equal configs.
        A workload given here starts on the fresh clock. Blocks until done.
        """
        self._inbox.call(lambda: self._reset(config, compare, workload), True, timeout)

    @property
    def config(self) -> EngineConfig:
        return self._lanes.first.engine.config

    # -- what the board reads (never waits for the driver) ---------------------------------------
    def state(self) -> BoardState:
        return self._publisher.state

    def snapshot(self) -> EngineSnapshot:
        return self._publisher.state.snapshot

    def deltas(self, request_id: str) -> tuple[tuple[int, str], ...]:
        """(step, delta) in the order the request's outputs were sent."""
        return self._ledger.deltas(request_id)

    def stuck_for(self) -> float | None:
        """Seconds the running step has taken, once past `stuck_after_s`; else None."""
        return self._watchdog.stuck_for()

    @property
    def num_stuck_steps(self) -> int:
        return self._watchdog.num_stuck_steps

    def watch(self, request_id: str) -> None:
        """Keep this request's RequestDetail fresh in BoardState.details (inspector)."""

        def run():
            self._publisher.watch(request_id, self._lanes.first.engine.inspect)

        self._inbox.call(run, wait=False)

    def inspect(self, request_id: str, timeout: float = 10.0) -> RequestDetail | None:
        """engine.inspect() run by the driver thread; blocks until it answers."""
        return self._inbox.call(lambda: self._lanes.first.engine.inspect(request_id), True,
                                timeout)  # fmt: skip

    # -- inside the driver thread ------------------------------------------------------------
    def _next_id(self) -> str:
        with self._ids_lock:
            return f"req-{next(self._ids)}"

    def _text_of(self, request_id: str) -> str:
        record = self._ledger.get(request_id)
        return record.text if record else ""

    def _add_request(self, rid, owner, prompt, label, params, priority, max_in_flight) -> None:
        record = RequestRecord(rid, owner, label, time.monotonic())
        try:
            mine = len(self._ledger.live_of(owner)) if max_in_flight is not None else 0
            if max_in_flight is not None and mine >= max_in_flight:
                raise self.limits.in_flight_error(mine)
            self._lanes.add(rid, prompt, params, priority)
        except Exception as exc:
            error = exc if isinstance(exc, RequestRejected) else RequestRejected.from_engine(exc)
            self._ledger.put(replace(record, finished=True, error=str(error)))
            raise error from exc
        self._ledger.put(record)  # the board shows it waiting, even while paused

    def _submit_from_workload(self, prompt, params, owner: str) -> str:
        rid = self._next_id()
        try:
            self._add_request(rid, owner, prompt, preview(prompt), params, 0, None)
        except RequestRejected:
            self._workload.on_rejected(rid, self._clock.now())
        return rid

    def _reset(self, config, compare: bool, workload) -> None:
        cfg = config or self.base_config
        if compare and cfg.num_kv_blocks is None:  # two pools sized from free memory won't fit
            cfg = replace(cfg, num_kv_blocks=self.snapshot().kv_blocks_total)
        # Built before the old lanes go: a config the engine refuses leaves the board as it was.
        lanes = Lanes.build(self._factory, cfg, compare)
        self._streams.close_all(self._text_of, StopReason.CANCELLED)
        self._lanes, self._workload = lanes, workload
        self._ledger.clear()
        self._publisher.forget()
        self._clock.restart()
        self._publish(force=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._inbox.wake.clear()
            self._drain()
            stepping = not self._clock.paused or self._steps.num_pending > 0
            if self._workload is not None and stepping:
                self._workload.tick(self._clock.now(), self._submit_from_workload)
            if not (stepping and self._lanes.has_work()):
                self._steps.drop_pending()
                self._publish(force=False)
                self._inbox.wake.wait(IDLE_WAIT)
                continue
            t0 = time.monotonic()
            with self._watchdog.step(self._steps.num_done + 1):
                result, failed = self._lanes.step()
            self._publisher.dirty = True
            for out in result.outputs:
                self._route(out)
            for rid in result.failed:  # keep what was streamed so far
                self._ledger.note_error(rid, f"{type(result.error).__name__}: {result.error}")
                self._route(final_output(rid, self._text_of(rid), StopReason.ERROR))
            # before step_once() returns, and before a finished request's last output is sent,
            # so whoever holds that output sees a board (and /metrics) that counts it
            single = self._steps.num_pending > 0
            self._publish(force=single or self._clock.paused or self._streams.has_finished)
            self._streams.send_finished()
            self._steps.one_done()
            self._wait_for_pace(t0, ERROR_BACKOFF if failed else 0.0)
        self._publish(force=True)

    def _route(self, out: RequestOutput) -> None:
        """An output of the first lane: to the ledger, the inspector, its stream, the users."""
        self._ledger.update(out, self._lanes.first.step)
        self._publisher.touched(out.request_id)
        self._streams.deliver(out)
        if self._workload is not None:
            self._workload.on_output(out, self._clock.now(), self._lanes.abort)

    def _drain(self) -> None:
        if self._inbox.drain():
            self._publisher.dirty = True

    def _wait_for_pace(self, t0: float, at_least: float) -> None:
        """Sleep out the rest of this step's time slot, answering the inbox meanwhile."""
        while not self._stop.is_set():
            left = t0 + self._clock.slot(at_least) - time.monotonic()
            if left <= 0 or (self._steps.num_pending and self._clock.paused):
                return
            self._inbox.wake.wait(min(left, IDLE_WAIT))
            self._inbox.wake.clear()
            self._drain()
            self._publish(force=False)

    def _publish(self, force: bool) -> None:
        self._publisher.publish(force, self._lanes, self._ledger, self._workload, self._clock)
