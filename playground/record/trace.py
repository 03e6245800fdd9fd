"""A run as a Chrome Trace Event file (opens in Perfetto, ui.perfetto.dev, or chrome://tracing).

`chrome_trace(steps, requests, labels)` is pure: the engine's StepRecords and RequestStates in,
the trace's JSON object out. Process 1 has one track per request (its name: "req-7 · Ada"):
`waiting` (from arrival, or back in the queue after a preemption), one `prefill` slice per
prefill chunk (the step that computed it), `decode` (first token to the end, cut by
preemptions), an instant `preempted`, and an instant `finished: <stop reason>`. Process 0 has
the engine's steps (one slice each, with its batch in `args`) and counters: sequences in the
batch, prefill and decode tokens, KV blocks. Times are microseconds since the run's first event.

`TraceRecorder` keeps what a whole run needs beyond the engine's own window (its last 512
StepRecords, its last 256 finished requests): it is given the engine's snapshot after every
step (the driver does this; so can a benchmark loop) and writes the file with `write()`.
"""

import json
from pathlib import Path

from engine import EngineSnapshot, StepRecord
from engine.telemetry import RequestState

MAX_TRACE_STEPS = 50_000  # StepRecords a recorder keeps (oldest dropped first)
MAX_TRACE_REQUESTS = 8_192  # finished requests a recorder keeps
ENGINE_PID, REQUESTS_PID = 0, 1


def chrome_trace(
    steps: tuple[StepRecord, ...] | list[StepRecord],
    requests: tuple[RequestState, ...] | list[RequestState],
    labels: dict[str, str] | None = None,
    now: float | None = None,
) -> dict:
    """The Trace Event Format object {"traceEvents": [...], ...} of these steps and requests.

    `now` (time.monotonic()) ends the spans of unfinished requests; default: the last step's
    end.
    """
    labels = labels or {}
    steps = sorted(steps, key=lambda r: r.step)
    starts = [r.arrival for r in requests] + [s.start for s in steps]
    t0 = min(starts, default=0.0)
    ends = [s.start + s.duration for s in steps] + [r.finished for r in requests if r.finished]
    now = now if now is not None else max(ends, default=t0)

    def us(t: float) -> float:
        return round((t - t0) * 1e6, 1)

    events = [_meta("process_name", ENGINE_PID, 0, "engine"),
              _meta("thread_name", ENGINE_PID, 0, "steps"),
              _meta("process_name", REQUESTS_PID, 0, "requests")]  # fmt: skip
    for s in steps:
        batch = {"sequences": s.num_seqs, "prefill tokens": s.num_prefill_tokens,
                 "decode tokens": s.num_decode_tokens, "token budget": s.token_budget,
                 "waiting": s.num_waiting, "running": s.num_running,
                 "kv blocks used": s.kv_blocks_used, "kv blocks cached": s.kv_blocks_cached,
                 "forward ms": round(s.forward_duration * 1e3, 3)}  # fmt: skip
        events.append(_slice(f"step {s.step}", "step", ENGINE_PID, 0, us(s.start),
                             s.duration * 1e6, batch))  # fmt: skip
        ts = us(s.start)
        events += [
            _counter("batch size", ts, {"sequences": s.num_seqs}),
            _counter("tokens", ts, {"prefill": s.num_prefill_tokens,
                                    "decode": s.num_decode_tokens}),
            _counter("kv blocks", ts, {"used": s.kv_blocks_used, "cached": s.kv_blocks_cached}),
        ]  # fmt: skip
    by_request: dict[str, list[tuple[StepRecord, object]]] = {}
    for s in steps:
        for e in s.events:
            by_request.setdefault(e.request_id, []).append((s, e))
    for tid, r in enumerate(sorted(requests, key=lambda r: r.arrival), start=1):
        name = labels.get(r.request_id, r.request_id)
        events.append(_meta("thread_name", REQUESTS_PID, tid, name))
        events += _request_events(r, by_request.get(r.request_id, []), tid, us, now)
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"source": "continuous batching playground",
                          "num_requests": len(requests), "num_steps": len(steps)}}  # fmt: skip


def _request_events(r: RequestState, seen, tid: int, us, now: float) -> list[dict]:
    """One request's slices and instants: from its step events where the steps are kept,
    else from its timestamps (arrival, first scheduled, first token, finished)."""
    out = []
    args = {"request_id": r.request_id, "prompt tokens": r.num_prompt_tokens,
            "output tokens": r.num_output_tokens, "cached tokens": r.num_cached_tokens,
            "preemptions": r.num_preemptions, "stop reason": r.stop_reason}  # fmt: skip
    end = r.finished or now

    def span(name: str, a: float | None, b: float | None, extra=None) -> None:
        if a is not None and b is not None and b > a:
            out.append(_slice(name, name.split(" ")[0], REQUESTS_PID, tid, us(a), (b - a) * 1e6,
                              {**args, **(extra or {})}))  # fmt: skip

    if not seen or seen[0][1].kind != "admitted":
        # the step that admitted it is gone: its timestamps say when each phase began
        span("waiting", r.arrival, r.first_scheduled or end)
        span("prefill", r.first_scheduled, r.first_token or end)
        span("decode", r.first_token, end)
        out += [_instant("preempted", tid, us(s.start), args) for s, e in seen
                if e.kind == "preempted"]  # fmt: skip
    else:
        phase, since, chunk = "waiting", r.arrival, 0
        for s, e in seen:
            s_end = s.start + s.duration
            if e.kind == "admitted":
                span(phase, since, s.start)
                phase, since = "prefill", s.start
            elif e.kind in ("prefill_chunk", "prefill_done"):
                chunk += 1
                span(f"prefill chunk {chunk}", s.start, s_end, {"tokens": e.detail})
                if e.kind == "prefill_done":
                    phase, since, chunk = "decode", s_end, 0
            elif e.kind == "preempted":
                if phase == "decode":
                    span("decode", since, s.start)
                out.append(_instant("preempted", tid, us(s.start), args))
                phase, since, chunk = "waiting (preempted)", s.start, 0
            elif e.kind in ("finished", "aborted") and phase != "done":
                if phase != "prefill":
                    span(phase, since, s_end)
                phase = "done"
        if phase not in ("done", "prefill"):
            span(phase, since, end)
    if r.finished is not None:
        reason = r.stop_reason or "error"
        out.append(_instant(f"finished: {reason}", tid, us(r.finished), args))
    return out


def _meta(kind: str, pid: int, tid: int, name: str) -> dict:
    return {"ph": "M", "name": kind, "pid": pid, "tid": tid, "args": {"name": name}}


def _slice(name, cat, pid, tid, ts, dur, args) -> dict:
    return {"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": tid, "ts": ts,
            "dur": round(dur, 1), "args": args}  # fmt: skip


def _instant(name: str, tid: int, ts: float, args: dict) -> dict:
    return {"ph": "i", "s": "t", "name": name, "cat": name.split(":")[0], "pid": REQUESTS_PID,
            "tid": tid, "ts": ts, "args": args}  # fmt: skip


def _counter(name: str, ts: float, values: dict) -> dict:
    return {"ph": "C", "name": name, "pid": ENGINE_PID, "tid": 0, "ts": ts, "args": values}


class TraceRecorder:
    """Every StepRecord and request of a run, from the engine's snapshots; see the module
    docstring. Fed by one thread; `trace()` may be called from another (it copies first)."""

    def __init__(self):
        self.clear()

    def clear(self) -> None:
        self._steps: dict[int, StepRecord] = {}
        self._finished: dict[str, RequestState] = {}
        self._latest: EngineSnapshot | None = None

    def record(self, snap: EngineSnapshot) -> None:
        """After a step: the snapshot's new StepRecords and newly finished requests."""
        last = next(reversed(self._steps), -1) if self._steps else -1
        for s in reversed(snap.steps):
            if s.step <= last:
                break
            self._steps[s.step] = s
        if len(self._steps) > MAX_TRACE_STEPS:
            for step in list(self._steps)[: len(self._steps) - MAX_TRACE_STEPS]:
                del self._steps[step]
        for r in reversed(snap.requests):  # finished ones last, newest last
            if r.finished is None:
                break
            if r.request_id in self._finished:
                break
            self._finished[r.request_id] = r
        while len(self._finished) > MAX_TRACE_REQUESTS:
            del self._finished[next(iter(self._finished))]
        self._latest = snap

    def contents(self) -> tuple[list[StepRecord], list[RequestState]]:
        """What the trace is built from: the steps kept, oldest first, and every request
        (finished ones, then the latest state of the others)."""
        requests = dict(self._finished)
        if self._latest is not None:
            for r in self._latest.requests:
                requests[r.request_id] = r
        return list(self._steps.values()), list(requests.values())

    def trace(self, labels: dict[str, str] | None = None, now: float | None = None) -> dict:
        return chrome_trace(*self.contents(), labels, now)

    def write(self, path, labels: dict[str, str] | None = None) -> Path:
        path = Path(path)
        path.write_text(json.dumps(self.trace(labels)), encoding="utf-8")
        return path
