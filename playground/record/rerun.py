"""Running a Replay (playground/record/replay.py) again, on the board or from code.

`ReplayWorkload` is a workload for the driver: the board plays it like a preset (compare mode
runs it through both policies side by side). `run_offline()` runs it through an engine from
code, arrivals on the file's clock with the idle gaps skipped. Greedy outputs, and seeded
samples, come out equal to the original's (float near-ties aside): `compare_outputs()` says
which differ. `ab()` runs one file under several configs and `ab_table()` lays their results
side by side.
"""

import time
from collections import deque
from dataclasses import dataclass, field

from engine import EngineConfig, RequestOutput
from playground.record.replay import Replay, ReplayRequest
from playground.workload.users import USER_COLOURS, UserView


class ReplayWorkload:
    """A Replay as the driver's workload: each request sent at its arrival time, under its
    owner (so the simulated users' cards come back), cancelled as the original was."""

    def __init__(self, replay: Replay, name: str | None = None, abort=None):
        self.replay = replay
        self.name = name or f"replay of {replay.workload or 'a run'}"
        self._abort = abort  # driver.abort, for requests cancelled before their first token
        self._pending = deque(sorted(replay.requests, key=lambda r: r.arrival_s))
        self._cancels: list[tuple[float, str]] = []  # (run clock, new id), 0-token cancels
        self.by_request: dict[str, ReplayRequest] = {}  # new id -> the original
        self.new_ids: dict[str, str] = {}  # original id -> new id
        self._users: dict[str, dict] = {}
        for i, owner in enumerate(dict.fromkeys(r.owner for r in self._pending)):
            if owner and owner.startswith("user:"):
                self._users[owner] = {"name": owner[5:], "colour": USER_COLOURS[i % 16],
                                      "state": "arriving", "request_id": None, "n": 0,
                                      "cancelled": 0}  # fmt: skip
        self._views = self._make_views()

    def tick(self, now: float, submit) -> None:
        changed = False
        while self._pending and self._pending[0].arrival_s <= now:
            r = self._pending.popleft()
            rid = submit(r.prompt, r.params, r.owner, priority=r.priority, label=r.label)
            self.by_request[rid], self.new_ids[r.request_id] = r, rid
            if r.cancel_after_tokens is None and r.cancel_at_s is not None:
                self._cancels.append((r.cancel_at_s, rid))
            if (user := self._users.get(r.owner)) is not None:
                user.update(state="waiting for answer", request_id=rid, n=user["n"] + 1)
                changed = True
        for at, rid in list(self._cancels):
            if at <= now and self._abort is not None:
                self._cancels.remove((at, rid))
                self._abort(rid)
        if changed:
            self._views = self._make_views()

    def on_output(self, out, now: float, abort) -> None:
        r = self.by_request.get(out.request_id)
        if r is None:
            return
        if out.finished:
            self._done(out.request_id, r, out.stop_reason and out.stop_reason.value)
        elif r.cancel_after_tokens is not None and len(out.token_ids) >= r.cancel_after_tokens:
            abort(out.request_id)

    def on_rejected(self, request_id: str, now: float) -> None:
        r = self.by_request.get(request_id)
        if r is not None:
            self._done(request_id, r, None)

    def _done(self, rid: str, r: ReplayRequest, reason) -> None:
        user = self._users.get(r.owner)
        if user is None:
            return
        more = any(p.owner == r.owner for p in self._pending)
        user.update(state="thinking" if more else "done",
                    cancelled=user["cancelled"] + (reason == "cancelled"))  # fmt: skip
        self._views = self._make_views()

    def _make_views(self) -> tuple[UserView, ...]:
        return tuple(
            UserView(
                u["name"],
                u["colour"],
                owner,
                u["state"],
                u["request_id"],
                u["n"],
                u["cancelled"],
                None,
            )  # fmt: skip
            for owner, u in self._users.items()
        )

    def views(self) -> tuple[UserView, ...]:
        return self._views

    @property
    def is_done(self) -> bool:
        return not self._pending and all(u["state"] == "done" for u in self._users.values())


def run_offline(engine, replay: Replay) -> dict[str, RequestOutput]:
    """Run every request of `replay` through `engine` (fresh, or at least idle) from this
    thread: arrivals on the replay's clock, its idle gaps skipped, cancellations as
    recorded. Returns the last RequestOutput of each request, by its original id."""
    pending = deque(sorted(replay.requests, key=lambda r: r.arrival_s))
    by_id = {r.request_id: r for r in replay.requests}
    results: dict[str, RequestOutput] = {}
    t0, skipped = time.monotonic(), 0.0
    while pending or engine.has_unfinished_requests():
        now = time.monotonic() - t0 + skipped
        if pending and not engine.has_unfinished_requests() and pending[0].arrival_s > now:
            skipped += pending[0].arrival_s - now  # nothing to do until then: skip the gap
            now = pending[0].arrival_s
        while pending and pending[0].arrival_s <= now:
            r = pending.popleft()
            engine.add_request(r.request_id, r.prompt, r.params, priority=r.priority)
        for r in by_id.values():
            cancel_at = r.cancel_at_s if r.cancel_after_tokens is None else None
            if cancel_at is not None and cancel_at <= now and r.request_id not in results:
                engine.abort_request(r.request_id)
        for out in engine.step():
            r = by_id[out.request_id]
            if out.finished:
                results[out.request_id] = out
            elif r.cancel_after_tokens is not None and (
                len(out.token_ids) >= r.cancel_after_tokens
            ):  # fmt: skip
                engine.abort_request(out.request_id)
    return results


def compare_outputs(replay: Replay, results: dict[str, RequestOutput]) -> list[str]:
    """Request ids whose output differs from the one the file recorded (greedy or seeded
    requests the file has an output for)."""
    differ = []
    for r in replay.requests:
        if r.output is None or (not r.params.is_greedy and r.params.seed is None):
            continue
        out = results.get(r.request_id)
        if out is None or list(out.token_ids) != list(r.output["token_ids"]):
            differ.append(r.request_id)
    return differ


@dataclass(frozen=True, slots=True)
class RunResult:
    name: str
    config: EngineConfig
    outputs: dict[str, RequestOutput] = field(repr=False)
    wall_s: float
    num_steps: int
    tokens_per_s: float
    ttft_p50: float | None
    ttft_p95: float | None


def ab(engine_factory, replay: Replay, configs: dict[str, EngineConfig]) -> list[RunResult]:
    """Run the same replay under each config (a fresh engine each): one RunResult per name."""
    results = []
    for name, config in configs.items():
        engine = engine_factory(config)
        t0 = time.monotonic()
        outputs = run_offline(engine, replay)
        wall, snap = time.monotonic() - t0, engine.snapshot()
        t = snap.totals
        results.append(RunResult(name, config, outputs, wall, snap.step, t.tokens_per_s,
                                 t.ttft_p50, t.ttft_p95))  # fmt: skip
    return results


def ab_table(results: list[RunResult]) -> str:
    """The results side by side, one column per run (Markdown)."""

    def ms(v):
        return "-" if v is None else f"{v * 1000:.0f} ms"

    rows = [
        ("batching", [r.config.batching for r in results]),
        ("requests finished", [str(len(r.outputs)) for r in results]),
        ("engine steps", [str(r.num_steps) for r in results]),
        ("wall time", [f"{r.wall_s:.2f} s" for r in results]),
        ("generated tok/s (busy)", [f"{r.tokens_per_s:.1f}" for r in results]),
        ("TTFT p50", [ms(r.ttft_p50) for r in results]),
        ("TTFT p95", [ms(r.ttft_p95) for r in results]),
    ]
    head = "| | " + " | ".join(r.name for r in results) + " |"
    sep = "|---|" + "---|" * len(results)
    return "\n".join([head, sep, *(f"| {k} | " + " | ".join(v) + " |" for k, v in rows)])
