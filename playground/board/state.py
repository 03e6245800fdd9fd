"""BoardState: the immutable picture of the whole board that the driver publishes."""

from dataclasses import dataclass, field

from engine import EngineSnapshot, RequestDetail
from playground.handles import RequestRecord


@dataclass(frozen=True, slots=True)
class LaneStats:
    name: str
    batching: str  # the lane engine's EngineConfig.batching
    num_submitted: int
    num_finished: int
    num_steps: int  # steps that did work since the last reset
    busy_s: float  # seconds inside engine.step()
    finish_busy_s: float | None  # busy_s when the last request finished
    finish_step: int | None


@dataclass(frozen=True, slots=True)
class BoardState:
    """Everything the board draws; immutable, replaced by the driver thread. The snapshots'
    times are engine-busy seconds (playground/driver/busy.py): a pause is nobody's loss."""

    version: int
    lanes: tuple[str, ...]
    snapshots: dict[str, EngineSnapshot]
    stats: dict[str, LaneStats]
    records: tuple[RequestRecord, ...]  # oldest first
    users: tuple  # UserView of the running workload
    workload: str | None
    paused: bool
    pace: float | None  # steps per second; None = as fast as possible
    clock: float  # run clock (seconds not paused since the last reset)
    details: dict[str, RequestDetail] = field(default_factory=dict)  # watched requests
    paused_until: float | None = None  # monotonic s when the pause ends by itself
    run: int = 0  # one more with every reset: which run the board shows
    published_at: float = 0.0  # time.time() the driver published it: how old a viewer's view is

    @property
    def snapshot(self) -> EngineSnapshot:
        return self.snapshots[self.lanes[0]]

    @property
    def compare(self) -> bool:
        return len(self.lanes) > 1
