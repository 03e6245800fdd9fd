"""Lanes: the engines the driver steps. Used by the driver thread only.

A lane is one engine. Normally there is one ("main"); compare mode runs two ("continuous"
and "static") that share one set of weights: every request goes to both, each step steps
both (so each gets the same CPU), and only the first lane's outputs reach the board.
"""

import logging
import time
from dataclasses import dataclass, field, replace

from engine import EngineConfig, LLMEngine, RequestOutput
from playground.board.state import LaneStats

log = logging.getLogger(__name__)

MAIN_LANE = "main"
COMPARE_LANES = ("continuous", "static")  # also their batching


@dataclass(frozen=True, slots=True)
class LaneStep:
    """What one step of a lane gave: outputs of its live requests; if the step raised, the
    exception and the live requests it ended (the caller builds their ERROR outputs)."""

    outputs: list[RequestOutput]
    failed: list[str] = field(default_factory=list)
    error: Exception | None = None


@dataclass(eq=False)
class Lane:
    name: str
    engine: LLMEngine
    # request id -> its sequences (n, or its beams), for those handed to the engine, unfinished
    live: dict[str, int] = field(default_factory=dict)
    num_submitted: int = 0
    num_finished: int = 0
    num_steps: int = 0
    busy_s: float = 0.0  # seconds inside engine.step()
    finish_busy_s: float | None = None  # busy_s when the latest request finished
    finish_step: int | None = None
    step0: int = 0  # the engine's step counter when the lane was made

    def __post_init__(self):
        self.step0 = self.engine.snapshot().step

    @property
    def step(self) -> int:
        """The engine's own step number (the driver is the only one stepping it)."""
        return self.step0 + self.num_steps

    @property
    def num_live_seqs(self) -> int:
        return sum(self.live.values())

    def add(self, request_id: str, num_seqs: int = 1) -> None:
        self.live[request_id] = num_seqs
        self.num_submitted += 1

    def run_step(self) -> LaneStep:
        """One engine.step(). One that raises ends every live request of the lane: their
        blocks are given back, and the engine's later CANCELLED echoes are dropped."""
        t0 = time.perf_counter()
        try:
            result = LaneStep(self.engine.step())
        except Exception as exc:  # noqa: BLE001 - the driver loop must go on
            log.exception("engine step failed on lane %s", self.name)
            result = LaneStep([], sorted(self.live), exc)
            for rid in result.failed:
                try:
                    self.engine.abort_request(rid)
                except Exception:  # noqa: BLE001
                    log.exception("abort of %s after a failed step failed too", rid)
        self.busy_s += time.perf_counter() - t0
        self.num_steps += 1
        kept = [out for out in result.outputs if out.request_id in self.live]
        for rid in [o.request_id for o in kept if o.finished] + result.failed:
            self.live.pop(rid, None)
            self.num_finished += 1
            self.finish_busy_s, self.finish_step = self.busy_s, self.num_steps
        return replace(result, outputs=kept)

    def stats(self) -> LaneStats:
        return LaneStats(
            self.name, self.engine.config.batching, self.num_submitted,
            self.num_finished, self.num_steps, self.busy_s, self.finish_busy_s, self.finish_step,
        )  # fmt: skip


class Lanes:
    def __init__(self, lanes: list[Lane]):
        self.all = lanes
        self.num_aborts = 0  # abort() calls: whether the engines changed between two looks

    @classmethod
    def build(cls, factory, config: EngineConfig, compare: bool) -> "Lanes":
        """Fresh engines from `config`; compare=True: a continuous and a static one."""
        if not compare:
            return cls([Lane(MAIN_LANE, factory(config))])
        return cls([Lane(p, factory(replace(config, batching=p))) for p in COMPARE_LANES])

    @property
    def first(self) -> Lane:
        """The lane whose requests the handles, the cards and the simulated users follow."""
        return self.all[0]

    def add(self, request_id: str, prompt, params, priority: int) -> None:
        """Hand a request to every lane, or to none: the engine's refusal is raised."""
        added = []
        try:
            for lane in self.all:
                lane.engine.add_request(request_id, prompt, params, priority=priority)
                added.append(lane)
        except Exception:
            for lane in added:  # a later lane refused: keep the lanes equal
                lane.engine.abort_request(request_id)
            raise
        for lane in self.all:
            lane.add(request_id, params.num_seqs if params is not None else 1)

    def abort(self, request_id: str) -> None:
        self.num_aborts += 1
        for lane in self.all:
            if request_id in lane.live:
                lane.engine.abort_request(request_id)

    def has_work(self) -> bool:
        return any(lane.engine.has_unfinished_requests() for lane in self.all)

    def step(self) -> tuple[LaneStep, bool]:
        """One step of every lane with work: the first lane's LaneStep, and whether any
        lane's step raised."""
        first, failed = LaneStep([]), False
        for lane in self.all:
            if lane.engine.has_unfinished_requests():
                result = lane.run_step()
                failed |= result.error is not None
                if lane is self.first:
                    first = result
        return first, failed
