"""Lane: one engine and what the driver counts about it. Used by the driver thread only."""

import logging
import time
from dataclasses import dataclass, field

from engine import LLMEngine, RequestOutput, StopReason
from playground.board import LaneStats
from playground.requests import final_output

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Lane:
    name: str
    engine: LLMEngine
    live: set[str] = field(default_factory=set)  # request ids handed to the engine, unfinished
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

    def add(self, request_id: str) -> None:
        self.live.add(request_id)
        self.num_submitted += 1

    def run_step(self) -> tuple[list[RequestOutput], Exception | None]:
        """One engine.step(): the outputs of live requests, and the exception if it raised.

        A step that raises finishes every live request of the lane with ERROR (made-up
        outputs with empty text; the engine's later CANCELLED echoes are dropped).
        """
        t0 = time.perf_counter()
        error = None
        try:
            outs = self.engine.step()
        except Exception as exc:  # noqa: BLE001 - the driver loop must go on
            log.exception("engine step failed on lane %s", self.name)
            outs, error = self._fail_live(), exc
        self.busy_s += time.perf_counter() - t0
        self.num_steps += 1
        kept = []
        for out in outs:
            if out.request_id not in self.live:
                continue
            if out.finished:
                self.live.discard(out.request_id)
                self.num_finished += 1
                self.finish_busy_s, self.finish_step = self.busy_s, self.num_steps
            kept.append(out)
        return kept, error

    def _fail_live(self) -> list[RequestOutput]:
        outs = []
        for rid in sorted(self.live):
            try:
                self.engine.abort_request(rid)  # give back its blocks
            except Exception:  # noqa: BLE001
                log.exception("abort of %s after a failed step failed too", rid)
            outs.append(final_output(rid, "", StopReason.ERROR))
        return outs

    def stats(self) -> LaneStats:
        return LaneStats(
            self.name, self.engine.config.scheduling_policy, self.num_submitted,
            self.num_finished, self.num_steps, self.busy_s, self.finish_busy_s, self.finish_step,
        )  # fmt: skip
