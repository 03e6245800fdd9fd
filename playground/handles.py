"""Requests as the playground sees them: the stream handle, the ledger and its records."""

import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, replace

from engine import CompletionOutput, QueueFullError, RequestMetrics, RequestOutput, StopReason


class RequestRejected(ValueError):
    """A request refused before it was queued. `field` names what to change; `status` is the
    HTTP code (400: the request itself, 429: try again later); `code` says which rule refused
    it ("limit_exceeded", "queue_full"; None: the engine's own checks)."""

    def __init__(self, message: str, field: str, status: int = 400, code: str | None = None):
        super().__init__(message)
        self.field, self.status, self.code = field, status, code

    @classmethod
    def from_engine(cls, exc: Exception) -> "RequestRejected":
        """The engine's refusal (add_request, SamplingParams) as a RequestRejected."""
        if isinstance(exc, QueueFullError):
            return cls(str(exc), "requests", status=429, code="queue_full")
        return cls(str(exc), getattr(exc, "field", "prompt"))


class RequestHandle:
    """The stream of one request: RequestOutputs in order, the last one with finished=True."""

    def __init__(self, request_id: str, owner: str | None):
        self.request_id = request_id
        self.owner = owner
        self._queue: queue.Queue = queue.Queue()
        self._listener: Callable[[RequestOutput | RequestRejected], None] | None = None
        self._lock = threading.Lock()  # put() against listen()
        # done once the driver has handed the request to the engine (or refused it: raises)
        self.accepted: Future | None = None

    def put(self, item: RequestOutput | RequestRejected) -> None:
        """Called by the driver thread: the next output, or the refusal get() raises; it goes
        to the listener instead of the queue once one listens."""
        with self._lock:
            listener = self._listener
            if listener is None:
                self._queue.put(item)
                return
        listener(item)

    def listen(self, fn: Callable[[RequestOutput | RequestRejected], None]) -> None:
        """Hand every item to `fn` (on the driver thread) instead of queueing it: what is
        queued already first, in order. For an event loop, which must not block in get():
        no waiting thread per stream, so no thread wakes (and takes the GIL from the driver)
        per token."""
        with self._lock:
            while not self._queue.empty():
                fn(self._queue.get_nowait())
            self._listener = fn

    def get(self, timeout: float | None = None) -> RequestOutput:
        """Next output; raises queue.Empty after timeout, RequestRejected if refused."""
        item = self._queue.get(timeout=timeout)
        if isinstance(item, BaseException):
            raise item
        return item

    def __iter__(self):
        while True:
            out = self.get()
            yield out
            if out.finished:
                return

    def result(self, timeout: float | None = None) -> RequestOutput:
        """Block until the request finishes; return its last output."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            out = self.get(timeout=left)
            if out.finished:
                return out


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """The ledger's view of one request (first lane), replaced on every output."""

    request_id: str
    owner: str | None  # "user:<name>", "visitor:<session>", "api", ...
    prompt: str  # printable preview
    submitted: float  # time.monotonic()
    text: str = ""
    num_output_tokens: int = 0
    stop_reason: str | None = None
    finished: bool = False
    error: str | None = None  # why add_request refused it, or why its step failed
    token_ids: tuple[int, ...] | None = None  # kept only when logprobs were asked
    logprobs: tuple | None = None  # per token dict[token_id -> Logprob]
    ttft: float | None = None


class Ledger:
    """The first lane's recent requests, as the board shows them.

    Written by the driver thread only. Records are immutable and replaced on every output;
    readers take `records()` (a tuple) or `deltas()` (a copy) and never see a torn record.
    """

    def __init__(self, max_records: int = 256, max_deltas: int = 2048):
        self.max_records = max_records  # finished ones beyond this are forgotten, oldest first
        self.max_deltas = max_deltas  # per request, for the inspector
        self._records: OrderedDict[str, RequestRecord] = OrderedDict()
        self._deltas: dict[str, list[tuple[int, str]]] = {}

    def get(self, request_id: str) -> RequestRecord | None:
        return self._records.get(request_id)

    def put(self, record: RequestRecord) -> None:
        """Add or replace a record (a new request, a refusal, an error)."""
        if record.request_id not in self._records:
            self._deltas[record.request_id] = []
        self._records[record.request_id] = record
        if len(self._records) > self.max_records:
            self._forget_finished()

    def _forget_finished(self) -> None:
        """Forget finished records, oldest first, down to max_records. Each owner's newest
        record goes last: a visitor's answer stays on their card however busy the board is."""
        newest = {r.owner: r.request_id for r in self._records.values()}  # oldest first
        finished = [r for r in self._records.values() if r.finished]
        superseded = [r.request_id for r in finished if newest[r.owner] != r.request_id]
        for rid in [*superseded, *(r.request_id for r in finished)]:
            if len(self._records) <= self.max_records:
                break
            if self._records.pop(rid, None) is not None:
                self._deltas.pop(rid, None)

    def update(self, out, step: int) -> None:
        """Fold a RequestOutput (sent at engine step `step`) into its record."""
        record = self._records.get(out.request_id)
        if record is None:
            return
        first = out.outputs[0]
        keep = first.logprobs is not None
        self._records[out.request_id] = replace(
            record,
            text=first.text,
            num_output_tokens=len(first.token_ids),
            stop_reason=first.stop_reason.value if first.stop_reason else None,
            finished=out.finished,
            token_ids=tuple(first.token_ids) if keep else None,
            logprobs=tuple(first.logprobs) if keep else None,
            ttft=out.metrics.ttft if out.metrics else None,
            error=getattr(out, "error", None) or record.error,  # a remote lane's RemoteOutput
        )
        deltas = self._deltas[out.request_id]
        if len(deltas) < self.max_deltas:
            deltas.append((step, first.delta))

    def note_error(self, request_id: str, error: str) -> None:
        """Why the request failed (its last output comes through update())."""
        record = self._records.get(request_id)
        if record is not None:
            self._records[request_id] = replace(record, error=error)

    def live_of(self, owner: str) -> list[str]:
        return [r.request_id for r in self._records.values() if r.owner == owner and not r.finished]

    def records(self) -> tuple[RequestRecord, ...]:
        """Oldest first."""
        return tuple(self._records.values())

    def deltas(self, request_id: str) -> tuple[tuple[int, str], ...]:
        return tuple(self._deltas.get(request_id, ()))

    def clear(self) -> None:
        self._records.clear()
        self._deltas.clear()


def preview(prompt, limit: int = 300) -> str:
    if isinstance(prompt, str):
        text = prompt
    elif prompt and isinstance(prompt[0], dict):  # chat messages: the last user turn
        users = [m.get("content", "") for m in prompt if m.get("role") == "user"]
        text = str(users[-1] if users else prompt[-1].get("content", ""))
        if any(m.get("role") == "system" for m in prompt):
            text = "[system prompt] " + text
    else:
        text = f"<{len(prompt)} token ids>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def final_output(request_id: str, text: str, reason: StopReason) -> RequestOutput:
    """A last output made by the driver (the engine was reset, or its step failed)."""
    now = time.monotonic()
    completion = CompletionOutput(0, text, [], "", reason)
    metrics = RequestMetrics(now, finished=now)
    return RequestOutput(request_id, None, [], [completion], True, metrics)
