"""EngineDriver: the one thread that touches the engine(s).

Everybody else (UI callbacks, simulated users, the HTTP API) talks to the driver through its
inbox: every call that changes something (a request, an abort, pace, pause, a reset) is a
command that the driver thread runs between steps. They read what it publishes: a BoardState
(frozen; the latest snapshot of every lane, the request ledger, the users) and one output
stream per request (RequestHandle). This file is the public face; the jobs live next to it:
loop (the thread's state and loop), inbox, lanes (one or two engines), streams, publisher
(BoardState), clock (pace, pause, single steps) and watchdog.
"""

import json
import threading
from collections.abc import Callable
from pathlib import Path

from engine import (
    EngineConfig,
    EngineSnapshot,
    LLMEngine,
    RequestDetail,
    RequestOutput,
    StepRecord,
    StopReason,
)
from playground.access.limits import PublicLimits
from playground.board.state import BoardState
from playground.driver.clock import MAX_PAUSE_S, MIN_PACE, parse_pace
from playground.driver.loop import DriverLoop
from playground.driver.watchdog import STUCK_AFTER_S
from playground.handles import RequestHandle, RequestRejected, preview
from playground.record.history import StepHistory
from playground.record.replay import Replay
from playground.record.rerun import ReplayWorkload
from playground.record.trace import chrome_trace

__all__ = [
    "MAX_PAUSE_S",
    "MIN_PACE",
    "STUCK_AFTER_S",
    "EngineDriver",
    "RequestHandle",
    "RequestRejected",
]


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
        lanes: Callable | None = None,
        max_pause_s: float = MAX_PAUSE_S,
        start: bool = True,
    ):
        """lanes: `(EngineConfig, compare) -> Lanes`, the lanes a reset builds (the first
        ones too); default: engines from `engine_factory`, a continuous and a static one in
        compare mode. A remote board passes its servers' lanes (playground/remote/)."""
        self.model, self.tokenizer = engine.model, engine.tokenizer
        self.base_config = base_config or engine.config  # what reset() starts from
        self.limits = limits or PublicLimits()  # for the public doors (playground/access/public.py)
        factory = engine_factory or (lambda cfg: LLMEngine(self.model, self.tokenizer, cfg))
        self._loop = DriverLoop(engine, factory, pace, stuck_after_s, max_pause_s, lanes)
        self._inbox = self._loop.inbox
        self._thread = threading.Thread(target=self._loop.run, name="engine-driver", daemon=True)
        self._inbox.thread = self._thread
        if start:
            self.start()

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        self._loop.watchdog.start(self._thread)
        if not self._thread.is_alive():
            self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the thread; open streams end with CANCELLED."""
        self._loop.stop.set()
        self._inbox.wake.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)
        self._loop.streams.close_all(self._loop.text_of, StopReason.CANCELLED)

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
        max_num_queued_reqs: int | None = None,
        wait: bool = False,
        timeout: float = 30.0,
    ) -> RequestHandle:
        """Queue a request; outputs stream through the returned handle.

        label: what the board shows of the prompt (default: a preview of it).
        max_in_flight: refuse it (LimitExceeded, HTTP 429) when `owner` already has this many
        unfinished requests (checked on the driver thread, so concurrent submits cannot slip
        past). max_num_queued_reqs: refuse it (HTTP 503, code "queue_full") when the first
        lane's unfinished sequences and its own would pass this, as vLLM's admission does.
        wait=True blocks until the driver has handed it to the engine and raises
        RequestRejected if it was refused, or concurrent.futures.TimeoutError if the driver
        did not get to it within `timeout` (the request is then dropped). Otherwise a
        refusal is raised by the handle's get(), and by its `accepted` Future, which an event
        loop awaits without holding a thread until the driver's next look at its inbox.
        """
        handle = RequestHandle(request_id or self._loop.next_id(), owner)
        label = preview(prompt) if label is None else label

        def add():
            try:
                self._loop.add_request(handle.request_id, owner, prompt, label, params, priority,
                                       max_in_flight, max_num_queued_reqs)  # fmt: skip
            except RequestRejected as exc:
                handle.put(exc)
                raise
            self._loop.streams.open(handle)

        handle.accepted = self._inbox.post(add)
        if wait:
            self._inbox.result(handle.accepted, timeout)
        return handle

    def on_finish(self, fn: Callable[[RequestOutput], None], every_output: bool = False) -> None:
        """From now on, call `fn(out)` on the driver thread with the last output of every
        request of the first lane (with `every_output`, each of its outputs), before its
        stream gets it. `fn` must be quick."""
        self._inbox.call(lambda: self._loop.streams.on_finish(fn, every_output), wait=False)

    @property
    def num_admission_rejections(self) -> int:
        """Requests refused by max_num_queued_reqs since the driver started."""
        return self._loop.num_admission_rejections

    def on_step(self, fn: Callable[[StepRecord], None]) -> None:
        """From now on, call `fn(record)` on the driver thread with the StepRecord of every
        step of the first lane, once, right after the step. `fn` must be quick."""
        self._inbox.call(lambda: self._loop.streams.on_step(fn), wait=False)

    def abort(self, request_id: str) -> None:
        """Cancel a request (it finishes with CANCELLED); unknown ids are ignored."""
        self._inbox.call(lambda: self._loop.lanes.abort(request_id), wait=False)

    def abort_owner(self, owner: str) -> None:
        """Cancel every live request of one owner (a visitor who left)."""
        self._inbox.call(lambda: self._loop.abort_owner(owner), wait=False)

    # -- pace ------------------------------------------------------------------------------
    def set_pace(self, pace: float | str | None) -> None:
        """'max' / None: as fast as possible; a number: that many steps per second, at least
        MIN_PACE (ValueError below it)."""
        value = parse_pace(pace)  # a bad one is refused here, in the caller's thread
        self._inbox.call(lambda: setattr(self._loop.clock, "pace", value), wait=False)

    def pause(self) -> None:
        """Hold the steps; the pause ends by itself after `max_pause_s` (resume() ends it
        sooner). Requests still queue meanwhile."""
        self._inbox.call(self._loop.clock.pause, wait=False)

    def resume(self) -> None:
        self._inbox.call(self._loop.clock.resume, wait=False)

    @property
    def is_paused(self) -> bool:
        return self._loop.clock.paused

    @property
    def max_pause_s(self) -> float:
        return self._loop.clock.max_pause_s

    def step_once(self, wait: bool = True, timeout: float = 30.0) -> bool:
        """Run exactly one step (of every lane), typically while paused; False if idle."""
        target = self._loop.steps.ask_one()
        self._inbox.wake.set()
        return self._loop.steps.wait_until(target, timeout) if wait else True

    def clock(self) -> float:
        """Seconds the driver ran (not paused) since the last reset: the workload's time."""
        return self._loop.clock.now()

    # -- workloads and engine configuration ---------------------------------------------------
    def reset(self, config: EngineConfig | None = None, *, compare: bool = False,
              workload=None, timeout: float = 60.0) -> None:  # fmt: skip
        """Drop every request and start fresh engines (config: default `base_config`).

        compare=True builds two lanes, continuous and static, with otherwise equal configs.
        A workload given here starts on the fresh clock. Blocks until done.
        """
        cfg = config or self.base_config
        self._inbox.call(lambda: self._loop.reset(cfg, compare, workload), True, timeout)

    @property
    def config(self) -> EngineConfig:
        return self._loop.lanes.first.engine.config

    # -- what the board reads (never waits for the driver) ---------------------------------------
    def state(self) -> BoardState:
        return self._loop.publisher.state

    def snapshot(self) -> EngineSnapshot:
        return self._loop.publisher.state.snapshot

    def deltas(self, request_id: str) -> tuple[tuple[int, str], ...]:
        """(step, delta) in the order the request's outputs were sent."""
        return self._loop.ledger.deltas(request_id)

    def stuck_for(self) -> float | None:
        """Seconds the running step has taken, once past `stuck_after_s`; else None."""
        return self._loop.watchdog.stuck_for()

    @property
    def num_stuck_steps(self) -> int:
        return self._loop.watchdog.num_stuck_steps

    def watch(self, request_id: str, timeout: float = 10.0) -> RequestDetail | None:
        """Keep this request's RequestDetail fresh in BoardState.details (inspector); blocks
        until the driver answers with the detail as of now."""
        loop = self._loop
        return self._inbox.call(lambda: loop.publisher.watch(request_id, loop.inspect), True,
                                timeout)  # fmt: skip

    def inspect(self, request_id: str, timeout: float = 10.0) -> RequestDetail | None:
        """engine.inspect() run by the driver thread; blocks until it answers."""
        return self._inbox.call(lambda: self._loop.inspect(request_id), True, timeout)

    # -- the run's record: rewind, trace, replay ---------------------------------------------------
    @property
    def history(self) -> StepHistory:
        """The first lane's last steps (thread-safe to read): the board's rewind."""
        return self._loop.history

    def trace(self, labels: dict[str, str] | None = None, timeout: float = 30.0) -> dict:
        """The run since the last reset as a Chrome Trace Event object (playground.record.trace).
        The driver thread copies what it kept; the trace is built in the caller's thread."""
        steps, requests = self._inbox.call(self._loop.trace.contents, True, timeout)
        return chrome_trace(steps, requests, labels)

    def replay(self, timeout: float = 30.0) -> Replay:
        """The workload since the last reset, with the engine knobs, as a Replay."""
        loop = self._loop

        def capture() -> Replay:
            workload = loop.workload.name if loop.workload is not None else None
            return loop.replay_log.replay(self.config, len(loop.lanes.all) > 1, workload)

        return self._inbox.call(capture, True, timeout)

    def write_trace(self, path, labels: dict[str, str] | None = None) -> Path:
        path = Path(path)
        path.write_text(json.dumps(self.trace(labels)), encoding="utf-8")
        return path

    def write_replay(self, path) -> Path:
        return self.replay().write(path)

    def start_replay(self, replay: Replay, config: EngineConfig | None = None,
                     compare: bool | None = None) -> None:  # fmt: skip
        """Reset to fresh engines (`config`, default the file's knobs; compare: the file's)
        and run the replay's requests on the fresh clock, as a workload."""
        self.reset(config or replay.config, compare=replay.compare if compare is None else compare,
                   workload=ReplayWorkload(replay, abort=self.abort))  # fmt: skip
