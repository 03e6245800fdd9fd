"""DriverLoop: what the driver thread runs and the state only it touches.

Between steps it runs the inbox's commands; each step steps every lane, routes the first
lane's outputs (ledger, inspector, streams, simulated users), keeps the run's record (the
rewind's step history, the trace, the replay log), publishes a BoardState and then sleeps out
the pace. EngineDriver (the package's public face) owns the thread.
"""

import itertools
import logging
import threading
import time
from dataclasses import replace

from engine import EngineConfig, LLMEngine, RequestOutput, StopReason
from playground.access.limits import in_flight_error, queue_overflow_error
from playground.access.turns import stop_at_turns
from playground.driver.clock import RunClock, StepCounter
from playground.driver.inbox import Inbox
from playground.driver.lanes import MAIN_LANE, Lane, Lanes
from playground.driver.publisher import Publisher
from playground.driver.streams import Streams
from playground.driver.watchdog import Watchdog
from playground.handles import Ledger, RequestRecord, RequestRejected, final_output, preview
from playground.record.history import StepHistory
from playground.record.replay import ReplayLog
from playground.record.trace import TraceRecorder
from playground.server.outbox import wait_sent

log = logging.getLogger(__name__)

IDLE_WAIT = 0.05  # s between looks at the inbox when there is nothing to step
ERROR_BACKOFF = 0.1  # s after a failed step, so a broken engine does not spin
# s the next step waits at most for the event loops to send this step's outputs (outbox.py)
SEND_WAIT = 0.02


class DriverLoop:
    def __init__(self, engine: LLMEngine, factory, pace, stuck_after_s: float, max_pause_s: float,
                 build_lanes=None):  # fmt: skip
        self.factory = factory  # EngineConfig -> LLMEngine, for reset()
        # (EngineConfig, compare) -> Lanes, for reset(); default: engines from the factory
        self.build_lanes = build_lanes or (lambda cfg, compare: Lanes.build(factory, cfg, compare))
        self.inbox, self.steps, self.stop = Inbox(), StepCounter(), threading.Event()
        self.watchdog = Watchdog(stuck_after_s, self.stop)
        if build_lanes is None:
            self.lanes = Lanes([Lane(MAIN_LANE, engine)])
        else:
            self.lanes = build_lanes(engine.config, False)
        self.clock = RunClock(pace, max_pause_s)
        self.ledger = Ledger()  # the first lane's recent requests
        self.streams, self.publisher = Streams(), Publisher()
        self.workload = None  # the simulated users (playground.workload.users.Workload)
        # the first lane's run since the last reset: its last steps, its trace, its requests
        self.history, self.trace, self.replay_log = StepHistory(), TraceRecorder(), ReplayLog()
        self._remembered = 0  # the first lane's num_steps when the run was last recorded
        self.num_admission_rejections = 0  # by _admit, since start (resets keep it)
        self._ids, self._ids_lock = itertools.count(1), threading.Lock()
        self.publish(force=True)

    def next_id(self) -> str:
        """Any thread."""
        with self._ids_lock:
            return f"req-{next(self._ids)}"

    def inspect(self, request_id: str):
        """The first lane's RequestDetail of a request (None if unknown)."""
        return self.lanes.first.engine.inspect(request_id)

    def text_of(self, request_id: str) -> str:
        record = self.ledger.get(request_id)
        return record.text if record else ""

    def add_request(self, rid, owner, prompt, label, params, priority, max_in_flight,
                    max_num_queued_reqs=None) -> None:  # fmt: skip
        """Hand a request to the lanes; RequestRejected (and a refused record) if refused."""
        record = RequestRecord(rid, owner, label, time.monotonic())
        try:
            mine = len(self.ledger.live_of(owner)) if max_in_flight is not None else 0
            if max_in_flight is not None and mine >= max_in_flight:
                raise in_flight_error(mine, max_in_flight)
            self._admit(params, max_num_queued_reqs)
            self.lanes.add(rid, prompt, params, priority)
            self.replay_log.submitted(rid, self.clock.now(), prompt, params, owner, label,
                                      priority)  # fmt: skip
        except Exception as exc:
            error = exc if isinstance(exc, RequestRejected) else RequestRejected.from_engine(exc)
            self.ledger.put(replace(record, finished=True, error=str(error)))
            raise error from exc
        self.ledger.put(record)  # the board shows it waiting, even while paused

    def _admit(self, params, max_num_queued_reqs: int | None) -> None:
        """vLLM's check_admission (vllm/v1/engine/async_llm.py): refused when the unfinished
        sequences and the request's own would pass `max_num_queued_reqs`; counted."""
        if max_num_queued_reqs is None:
            return
        num_seqs = params.num_seqs if params is not None else 1
        if self.lanes.first.num_live_seqs + num_seqs > max_num_queued_reqs:
            self.num_admission_rejections += 1
            raise queue_overflow_error()

    def abort_owner(self, owner: str) -> None:
        for rid in self.ledger.live_of(owner):
            self.lanes.abort(rid)

    def reset(self, config: EngineConfig, compare: bool, workload) -> None:
        if compare and config.num_kv_blocks is None:  # two pools sized from free memory: no
            config = replace(config, num_kv_blocks=self.publisher.state.snapshot.kv_blocks_total)
        # Built before the old lanes go: a config the engine refuses leaves the board as it was.
        lanes = self.build_lanes(config, compare)
        self.streams.close_all(self.text_of, StopReason.CANCELLED)
        self.lanes, self.workload = lanes, workload
        self.ledger.clear()
        self.publisher.forget()
        self.history.clear()
        self.trace.clear()
        self.replay_log.clear()
        self._remembered = 0
        self.clock.restart()
        self.publish(force=True)

    def run(self) -> None:
        while not self.stop.is_set():
            self.inbox.wake.clear()
            self._drain()
            if self.clock.resume_if_due():
                log.info("the pause reached %.0f s: resumed", self.clock.max_pause_s)
                self.publisher.dirty = True
            stepping = not self.clock.paused or self.steps.num_pending > 0
            if self.workload is not None and stepping:
                self.workload.tick(self.clock.now(), self._submit_from_workload)
            if not (stepping and self.lanes.has_work()):
                self.steps.drop_pending()
                self.publish(force=False)
                self.inbox.wake.wait(IDLE_WAIT)
                continue
            t0 = time.monotonic()
            with self.watchdog.step(self.steps.num_done + 1):
                result, failed = self.lanes.step()
            self.publisher.dirty = True
            snap, num_aborts = self._remember(), self.lanes.num_aborts
            for out in result.outputs:
                self._route(out)
            for rid in result.failed:  # keep what was streamed so far
                self.ledger.note_error(rid, f"{type(result.error).__name__}: {result.error}")
                self._route(final_output(rid, self.text_of(rid), StopReason.ERROR))
            # before step_once() returns, and before a finished request's last output is sent,
            # so whoever holds that output sees a board (and /metrics) that counts it
            single = self.steps.num_pending > 0
            if self.lanes.num_aborts != num_aborts:  # a simulated user stopped one: it shows
                snap = None
            self.publish(force=single or self.clock.paused or self.streams.has_finished,
                         first=snap)  # fmt: skip
            self.streams.send_finished()
            wait_sent(SEND_WAIT)  # the streams' chunks go out now, not in the next forward
            self.steps.one_done()
            self._wait_for_pace(t0, ERROR_BACKOFF if failed else 0.0)
        self.publish(force=True)

    def publish(self, force: bool, first=None) -> None:
        """`first`: the first lane's snapshot of this moment, if taken already."""
        self.publisher.publish(force, self.lanes, self.ledger, self.workload, self.clock, first)

    def _remember(self):
        """After a step of the first lane: its StepRecord to the step listeners; the engine as
        it is now, for the run's record; that snapshot on the busy clock (None if the lane has
        not stepped since), for the BoardState and the rewind to show."""
        lane = self.lanes.first
        if lane.num_steps == self._remembered:
            return None
        self._remembered = lane.num_steps
        snap = lane.engine.snapshot()
        if snap.steps and snap.steps[-1].step == snap.step:  # a step that raised left none
            self.streams.step_done(snap.steps[-1])
        self.trace.record(snap)  # the trace keeps the engine's own (wall) times
        snap = self.publisher.on_busy_clock(lane.name, snap)
        self.history.record(snap, self.workload.views() if self.workload is not None else ())
        return snap

    def _submit_from_workload(self, prompt, params, owner: str, priority: int = 0,
                              label: str | None = None) -> str:  # fmt: skip
        rid = self.next_id()
        label = preview(prompt) if label is None else label
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], dict):  # a chat
            params = stop_at_turns(params, getattr(self.lanes.first.engine, "tokenizer", None))
        try:
            self.add_request(rid, owner, prompt, label, params, priority, None)
        except RequestRejected:
            self.workload.on_rejected(rid, self.clock.now())
        return rid

    def _route(self, out: RequestOutput) -> None:
        """An output of the first lane: to the ledger, the inspector, its stream, the users."""
        self.ledger.update(out, self.lanes.first.step)
        if out.finished:
            self.replay_log.finished(out, self.clock.now())
        self.publisher.touched(out.request_id)
        self.streams.deliver(out)
        if self.workload is not None:
            self.workload.on_output(out, self.clock.now(), self.lanes.abort)

    def _drain(self) -> None:
        if self.inbox.drain():
            self.publisher.dirty = True

    def _wait_for_pace(self, t0: float, at_least: float) -> None:
        """Sleep out the rest of this step's time slot, answering the inbox meanwhile."""
        while not self.stop.is_set():
            left = t0 + self.clock.slot(at_least) - time.monotonic()
            if left <= 0 or (self.steps.num_pending and self.clock.paused):
                return
            self.inbox.wake.wait(min(left, IDLE_WAIT))
            self.inbox.wake.clear()
            self._drain()
            self.publish(force=False)
