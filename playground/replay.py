"""Replay files: a run's workload, kept to run again, under the same knobs or others.

A `Replay` holds the engine knobs (EngineConfig), whether two lanes compared policies, and
every request the first lane took: its arrival on the run clock (seconds not paused since the
reset), owner, board label, prompt as it was sent (text, chat messages or token ids), every
SamplingParams field (the seed included), priority, when it was cancelled (after how many
tokens, or at what time), and the output it got. `to_json()` / `Replay.from_json()` are the
file (`write()` / `load()`); loading checks every field and names the bad one
(`requests[3].params.temperature ...`).

It runs again two ways: `ReplayWorkload` is a workload for the driver (the board plays it
like a preset, and compare mode runs it through both policies side by side), and
`run_offline()` runs it through an engine from code, arrivals on the same clock with the idle
gaps skipped. Greedy outputs, and seeded samples, come out equal to the original's (float
near-ties aside): `compare_outputs()` says which differ. `ab()` runs one file under several
configs and `ab_table()` lays their results side by side.
"""

import json
import time
from collections import deque
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from engine import EngineConfig, FieldError, RequestOutput, SamplingParams
from playground.users import USER_COLOURS, UserView

REPLAY_FORMAT = "cb-playground-replay"
REPLAY_VERSION = 1
MAX_REPLAY_REQUESTS = 8_192  # a log keeps the newest this many (the file says it was cut)


@dataclass(frozen=True, slots=True)
class ReplayRequest:
    request_id: str
    arrival_s: float  # run clock
    prompt: object  # str | list[dict] | list[int], as the engine got it
    params: SamplingParams
    owner: str | None = None
    label: str = ""
    priority: int = 0
    cancel_after_tokens: int | None = None  # cancelled with this many tokens streamed
    cancel_at_s: float | None = None  # ... at this time of the run clock
    output: dict | None = None  # {"text", "token_ids", "stop_reason"} of the original

    def to_json(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["params"] = asdict(self.params)
        return d


@dataclass(frozen=True, slots=True)
class Replay:
    config: EngineConfig
    requests: tuple[ReplayRequest, ...]
    compare: bool = False
    workload: str | None = None  # the preset's name, if one ran
    truncated: bool = False  # the log dropped its oldest requests

    def to_json(self) -> dict:
        return {
            "format": REPLAY_FORMAT,
            "version": REPLAY_VERSION,
            "workload": self.workload,
            "compare": self.compare,
            "truncated": self.truncated,
            "engine": asdict(self.config),
            "requests": [r.to_json() for r in self.requests],
        }

    def write(self, path) -> Path:
        path = Path(path)
        path.write_text(json.dumps(self.to_json(), ensure_ascii=False), encoding="utf-8")
        return path

    @classmethod
    def load(cls, path) -> "Replay":
        try:
            obj = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise FieldError("file", f"file is not a readable replay JSON file: {exc}") from None
        return cls.from_json(obj)

    @classmethod
    def from_json(cls, obj) -> "Replay":
        """FieldError naming the first bad field."""
        if not isinstance(obj, dict) or obj.get("format") != REPLAY_FORMAT:
            raise FieldError("format", f"format must be {REPLAY_FORMAT!r}: not a replay file")
        if obj.get("version") != REPLAY_VERSION:
            raise FieldError("version", f"version must be {REPLAY_VERSION}, got "
                                        f"{obj.get('version')!r}")  # fmt: skip
        config = _build("engine", EngineConfig, obj.get("engine"))
        items = obj.get("requests")
        if not isinstance(items, list):
            raise FieldError("requests", "requests must be a list")
        requests = tuple(_request(i, item) for i, item in enumerate(items))
        if len({r.request_id for r in requests}) != len(requests):
            raise FieldError("requests", "requests must have distinct request_id values")
        for name in ("compare", "truncated"):
            if not isinstance(obj.get(name, False), bool):
                raise FieldError(name, f"{name} must be a bool, got {obj.get(name)!r}")
        workload = obj.get("workload")
        if workload is not None and not isinstance(workload, str):
            raise FieldError("workload", f"workload must be a string, got {workload!r}")
        return cls(config, requests, obj.get("compare", False), workload,
                   obj.get("truncated", False))  # fmt: skip


def _build(name: str, kind, value):
    if not isinstance(value, dict):
        raise FieldError(name, f"{name} must be an object of {kind.__name__} fields")
    unknown = sorted(set(value) - {f.name for f in fields(kind)})
    if unknown:
        raise FieldError(f"{name}.{unknown[0]}", f"{name}.{unknown[0]} is not a "
                                                 f"{kind.__name__} field")  # fmt: skip
    try:
        return kind(**value)
    except FieldError as exc:
        raise FieldError(f"{name}.{exc.field}", f"{name}.{exc}") from None
    except (TypeError, ValueError) as exc:
        raise FieldError(name, f"{name}: {exc}") from None


def _request(i: int, item) -> ReplayRequest:
    where = f"requests[{i}]"
    if not isinstance(item, dict):
        raise FieldError(where, f"{where} must be an object")
    unknown = sorted(set(item) - {f.name for f in fields(ReplayRequest)})
    if unknown:
        raise FieldError(f"{where}.{unknown[0]}", f"{where}.{unknown[0]} is not a field")
    rid, arrival, prompt = item.get("request_id"), item.get("arrival_s"), item.get("prompt")
    if not isinstance(rid, str) or not rid:
        raise FieldError(f"{where}.request_id", f"{where}.request_id must be a non-empty string")
    if not _is_number(arrival) or arrival < 0:
        raise FieldError(f"{where}.arrival_s", f"{where}.arrival_s must be a number >= 0, "
                                               f"got {arrival!r}")  # fmt: skip
    if not _is_prompt(prompt):
        what = "a non-empty string, a list of chat messages or a list of token ids"
        raise FieldError(f"{where}.prompt", f"{where}.prompt must be {what}")
    params = _build(f"{where}.params", SamplingParams, item.get("params", {}))
    for name in ("cancel_after_tokens", "priority"):
        v = item.get(name)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
            raise FieldError(f"{where}.{name}", f"{where}.{name} must be an integer, got {v!r}")
    cancel_at = item.get("cancel_at_s")
    if cancel_at is not None and not _is_number(cancel_at):
        raise FieldError(f"{where}.cancel_at_s", f"{where}.cancel_at_s must be a number")
    output = item.get("output")
    if output is not None and not isinstance(output, dict):
        raise FieldError(f"{where}.output", f"{where}.output must be an object")
    return ReplayRequest(rid, float(arrival), prompt, params, item.get("owner"),
                         str(item.get("label") or ""), item.get("priority") or 0,
                         item.get("cancel_after_tokens"), cancel_at, output)  # fmt: skip


def _is_number(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _is_prompt(p) -> bool:
    if isinstance(p, str):
        return bool(p)
    if not isinstance(p, list) or not p:
        return False
    if all(isinstance(t, int) and not isinstance(t, bool) for t in p):
        return True
    return all(isinstance(m, dict) and isinstance(m.get("content"), str) for m in p)


def output_of(out: RequestOutput) -> dict:
    first = out.outputs[0]
    reason = first.stop_reason.value if first.stop_reason else None
    return {"text": first.text, "token_ids": list(first.token_ids), "stop_reason": reason}


# -- capture (the driver thread) ----------------------------------------------------------------
class ReplayLog:
    """The requests the first lane took since the last reset, with their outputs."""

    def __init__(self, max_requests: int = MAX_REPLAY_REQUESTS):
        self.max_requests = max_requests
        self.clear()

    def clear(self) -> None:
        self._requests: dict[str, ReplayRequest] = {}
        self.truncated = False

    def submitted(self, rid: str, at: float, prompt, params, owner, label, priority) -> None:
        if isinstance(prompt, tuple):
            prompt = list(prompt)
        self._requests[rid] = ReplayRequest(rid, round(at, 6), prompt, params or SamplingParams(),
                                            owner, label, priority)  # fmt: skip
        if len(self._requests) > self.max_requests:
            del self._requests[next(iter(self._requests))]
            self.truncated = True

    def finished(self, out: RequestOutput, at: float) -> None:
        r = self._requests.get(out.request_id)
        if r is None:
            return
        output = output_of(out)
        cancel = {}
        if output["stop_reason"] == "cancelled":
            n = len(output["token_ids"])
            cancel = {"cancel_after_tokens": n} if n else {"cancel_at_s": round(at, 6)}
        self._requests[out.request_id] = replace(r, output=output, **cancel)

    def replay(self, config: EngineConfig, compare: bool, workload: str | None) -> Replay:
        return Replay(config, tuple(self._requests.values()), compare, workload, self.truncated)


# -- running it again -----------------------------------------------------------------------
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
        ("batching", [r.config.scheduling_policy for r in results]),
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
