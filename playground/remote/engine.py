"""RemoteEngine: the face of an LLMEngine that the driver's lanes use, over a remote
OpenAI-compatible server (a Connection).

`add_request` sends the request's stream, `abort_request` closes it, `step()` folds what the
streams brought since the last step into RequestOutputs (waiting up to STEP_WAIT_S for the
first event, so the driver loop does not spin), and `snapshot()` is a RemoteSnapshot: an
EngineSnapshot of what this side measured (each request's text, TTFT, TPOT, e2e, stop
reason) plus the server's recent `/metrics` scrapes and health. Used by the driver thread
only, like an LLMEngine.

What a server does not say is not made up: its exact batches (`steps` is empty), its KV block
tables and each sequence's inside (`inspect` answers None). A stream carries text, not token
ids: a request's `token_ids` hold one REMOTE_TOKEN_ID per token counted (a chunk of text
each, then the server's own `usage.completion_tokens` once it ends).
"""

import queue
import time
from collections import Counter, deque
from dataclasses import dataclass, field

from engine import (
    CompletionOutput,
    EngineConfig,
    EngineSnapshot,
    RequestMetrics,
    RequestOutput,
    SamplingParams,
    StopReason,
)
from engine.telemetry import RequestState, Totals, percentile
from playground.driver.lanes import Lane, Lanes
from playground.remote import wire
from playground.remote.connection import Chunk, Connection, End, Health
from playground.remote.prometheus import ServerMetrics, grown

REMOTE_TOKEN_ID = -1  # a token the server streamed as text
STEP_WAIT_S = 0.05  # a step waits this long for the first event when requests are out
MAX_FINISHED_SHOWN = 64  # finished requests in the snapshot
MAX_LATENCY_SAMPLES = 4096
MAX_LOG = 200
MAX_ERRORS = 20
# how this side reports a request it ended itself, in the server's finish_reason words
CUT_REASONS = {"cancelled": "abort", "timeout": "abort"}


@dataclass(slots=True)
class RemoteOutput(RequestOutput):
    """A RequestOutput that can say why a remote request failed."""

    error: str | None = None


@dataclass(frozen=True, slots=True)
class RemoteSnapshot(EngineSnapshot):
    """An EngineSnapshot of a remote lane: `num_waiting` / `num_running` count this side's
    requests without / with a first token; the server's own numbers are in `samples`."""

    server: str = ""  # the URL
    model: str | None = None
    health: Health | None = None
    samples: tuple[ServerMetrics, ...] = ()  # since the lane started, one before as baseline
    started: float = 0.0  # time.monotonic() when the lane was made
    num_submitted: int = 0
    finish_reasons: dict[str, int] = field(default_factory=dict)  # as the streams said
    errors: tuple[tuple[float, str], ...] = ()  # (time.monotonic(), message), the latest last
    log: tuple[tuple[float, str | None, str], ...] = ()  # (t, request id, what happened)
    first_sent: float | None = None
    last_finished: float | None = None


@dataclass(slots=True)
class _Request:
    request_id: str
    prompt: object
    params: SamplingParams
    arrival: float
    text: str = ""
    delta: str = ""  # since the last output
    num_tokens: int = 0
    num_prompt_tokens: int = 0
    num_cached_tokens: int = 0
    first_token: float | None = None
    finished: float | None = None
    finish_reason: str | None = None
    matched: object = None
    stop_reason: StopReason | None = None
    error: str | None = None


class RemoteEngine:
    model = None  # the weights are the server's
    tokenizer = None

    def __init__(self, connection: Connection, config: EngineConfig):
        self.connection, self.config = connection, config
        connection.cancel_all()  # one engine per connection: the last board's streams end
        self._events: queue.SimpleQueue = queue.SimpleQueue()
        self._requests: dict[str, _Request] = {}  # live, then finished (the latest kept)
        self._live: set[str] = set()
        self._started = time.monotonic()
        self._num_steps = self._num_submitted = 0
        self._seen_version = -1
        self._health = connection.health
        self._stop_reasons: Counter[str] = Counter()
        self._finish_reasons: Counter[str] = Counter()
        self._ttfts: deque[float] = deque(maxlen=MAX_LATENCY_SAMPLES)
        self._tpots: deque[float] = deque(maxlen=MAX_LATENCY_SAMPLES)
        self._totals = Counter()  # prompt, cached and generated tokens; finished requests
        self._errors: deque[tuple[float, str]] = deque(maxlen=MAX_ERRORS)
        self._log: deque[tuple[float, str | None, str]] = deque(maxlen=MAX_LOG)
        self._first_sent = self._last_finished = None

    # -- the LLMEngine face -----------------------------------------------------------------
    def add_request(self, request_id: str, prompt, params: SamplingParams | None = None,
                    arrival_time: float | None = None, priority: int = 0) -> None:  # fmt: skip
        params = params or SamplingParams()
        if request_id in self._live:
            raise ValueError(f"request_id: {request_id!r} is already running")
        wire.request_body("", prompt, params)  # what cannot be sent is refused here
        now = time.monotonic()
        self._requests[request_id] = _Request(request_id, prompt, params, arrival_time or now)
        self._live.add(request_id)
        self._num_submitted += 1
        self._first_sent = self._first_sent or now
        self.connection.send(request_id, prompt, params, self._events.put)

    def abort_request(self, request_id: str) -> bool:
        if request_id not in self._live:
            return False
        self.connection.cancel(request_id)
        return True

    def has_unfinished_requests(self) -> bool:
        """Requests out, events to fold, or a new scrape of the server to show."""
        return (
            bool(self._live)
            or not self._events.empty()
            or self.connection.version != self._seen_version
        )

    def step(self) -> list[RequestOutput]:
        self._num_steps += 1
        self._seen_version = self.connection.version
        self._note_health()
        events = []
        try:
            events.append(self._events.get(timeout=STEP_WAIT_S if self._live else 0.0))
            while True:
                events.append(self._events.get_nowait())
        except queue.Empty:
            pass
        touched: dict[str, _Request] = {}
        for event in events:
            req = self._requests.get(event.request_id)
            if req is None or req.finished is not None:
                continue
            if isinstance(event, Chunk):
                self._fold_chunk(req, event)
            elif isinstance(event, End):
                self._finish(req, event)
            touched[req.request_id] = req
        return [self._output(req) for req in touched.values()]

    def inspect(self, request_id: str):
        """None: a remote server does not show a sequence's blocks or tokens."""
        return None

    def snapshot(self) -> RemoteSnapshot:
        live = [self._requests[rid] for rid in self._live]
        done = [r for r in self._requests.values() if r.finished is not None]
        shown = live + done[-MAX_FINISHED_SHOWN:]
        samples = self.connection.samples(self._started)
        waiting = sum(r.first_token is None for r in live)
        return RemoteSnapshot(
            step=self._num_steps,
            num_waiting=waiting,
            num_running=len(live) - waiting,
            num_finished=self._totals["finished"],
            kv_blocks_total=0,
            kv_blocks_used=0,
            kv_blocks_cached=0,
            block_size=0,
            kv_backend="remote",
            batching="remote",
            scheduling_policy="remote",
            max_num_seqs=0,
            max_num_batched_tokens=0,
            requests=tuple(_state(r) for r in shown),
            steps=(),
            totals=self._totals_now(samples),
            ttfts=tuple(self._ttfts),
            tpots=tuple(self._tpots),
            server=self.connection.url,
            model=self.connection.model,
            health=self.connection.health,
            samples=samples,
            started=self._started,
            num_submitted=self._num_submitted,
            finish_reasons=dict(self._finish_reasons),
            errors=tuple(self._errors),
            log=tuple(self._log),
            first_sent=self._first_sent,
            last_finished=self._last_finished,
        )

    # -- folding the streams ------------------------------------------------------------------
    def _fold_chunk(self, req: _Request, chunk: Chunk) -> None:
        if chunk.text:
            if req.first_token is None:
                req.first_token = chunk.t
                self._note(req.request_id, f"first token after {chunk.t - req.arrival:.2f} s")
            req.text += chunk.text
            req.delta += chunk.text
            req.num_tokens += 1
        if chunk.finish_reason is not None:
            req.finish_reason, req.matched = chunk.finish_reason, chunk.matched
        if chunk.usage:
            req.num_tokens = chunk.usage.get("completion_tokens", req.num_tokens)
            req.num_prompt_tokens = chunk.usage.get("prompt_tokens", 0)
            details = chunk.usage.get("prompt_tokens_details") or {}
            req.num_cached_tokens = details.get("cached_tokens") or 0

    def _finish(self, req: _Request, end: End) -> None:
        req.finished = end.t
        if end.cut is not None:
            req.stop_reason = StopReason.CANCELLED if end.cut == "cancelled" else StopReason.TIMEOUT
            reason = CUT_REASONS[end.cut]
        elif end.error is None and req.finish_reason is not None:
            req.stop_reason = wire.stop_reason(req.finish_reason, req.matched, req.params,
                                               req.num_tokens)  # fmt: skip
            reason = req.finish_reason
        else:
            req.stop_reason, reason = StopReason.ERROR, "error"
            req.error = end.error or "the stream ended without a finish_reason"
            self._errors.append((end.t, f"{req.request_id}: {req.error}"))
        self._live.discard(req.request_id)
        self._last_finished = end.t
        self._stop_reasons[req.stop_reason.value] += 1
        self._finish_reasons[reason] += 1
        self._totals.update(finished=1, prompt=req.num_prompt_tokens,
                            cached=req.num_cached_tokens, generated=req.num_tokens)  # fmt: skip
        metrics = _metrics(req)
        if metrics.ttft is not None and req.error is None:
            self._ttfts.append(metrics.ttft)
        if metrics.tpot is not None and req.error is None:
            self._tpots.append(metrics.tpot)
        what = f"ERROR: {req.error}" if req.error else f"finished: {req.stop_reason.value}"
        self._note(req.request_id, f"{what} ({req.num_tokens} tokens, {metrics.e2e:.2f} s)")
        self._forget_old()

    def _forget_old(self) -> None:
        done = [rid for rid, r in self._requests.items() if r.finished is not None]
        for rid in done[: max(0, len(done) - MAX_FINISHED_SHOWN)]:
            del self._requests[rid]

    def _output(self, req: _Request) -> RemoteOutput:
        delta, req.delta = req.delta, ""
        completion = CompletionOutput(0, req.text, [REMOTE_TOKEN_ID] * req.num_tokens, delta,
                                      req.stop_reason)  # fmt: skip
        prompt = req.prompt if isinstance(req.prompt, str) else None
        return RemoteOutput(req.request_id, prompt, [], [completion], req.finished is not None,
                            _metrics(req), req.error)  # fmt: skip

    def _note(self, request_id: str | None, text: str) -> None:
        self._log.append((time.monotonic(), request_id, text))

    def _note_health(self) -> None:
        health = self.connection.health
        if health.state != self._health.state:
            self._note(None, f"server {health.state}: {health.message}")
            self._health = health

    def _totals_now(self, samples) -> Totals:
        t = self._totals
        end = self._last_finished if not self._live else time.monotonic()
        span = (end - self._first_sent) if self._first_sent and end else 0.0
        return Totals(
            num_requests_finished=t["finished"],
            num_prompt_tokens=t["prompt"],
            num_generated_tokens=t["generated"],
            num_cached_tokens=t["cached"],
            num_preemptions=int(grown(samples, "preemptions") or 0),
            num_prefix_queries=int(grown(samples, "prefix_queries") or 0),
            num_prefix_hits=int(grown(samples, "prefix_hits") or 0),
            elapsed_busy=span,
            tokens_per_s=t["generated"] / span if span > 0 else 0.0,
            ttft_p50=percentile(self._ttfts, 50),
            ttft_p95=percentile(self._ttfts, 95),
            tpot_p50=percentile(self._tpots, 50),
            tpot_p95=percentile(self._tpots, 95),
            stop_reasons=dict(self._stop_reasons),
        )


def _metrics(req: _Request) -> RequestMetrics:
    return RequestMetrics(
        arrival=req.arrival,
        first_token=req.first_token,
        finished=req.finished,
        num_prompt_tokens=req.num_prompt_tokens,
        num_cached_tokens=req.num_cached_tokens,
        num_generated_tokens=req.num_tokens,
    )


def _state(req: _Request) -> RequestState:
    if req.finished is not None:
        status = "finished"
    else:
        status = "running" if req.first_token is not None else "waiting"
    return RequestState(
        request_id=req.request_id,
        status=status,
        stop_reason=req.stop_reason.value if req.stop_reason else None,
        priority=0,
        num_prompt_tokens=req.num_prompt_tokens,
        num_output_tokens=req.num_tokens,
        num_computed_tokens=0,
        num_cached_tokens=req.num_cached_tokens,
        num_preemptions=0,
        n=1,
        text=req.text,
        arrival=req.arrival,
        first_scheduled=None,  # the server does not say when it scheduled the request
        first_token=req.first_token,
        finished=req.finished,
        block_table=(),
    )


def remote_lanes(connections: list[Connection]):
    """The lanes of a board over remote servers, for EngineDriver(lanes=...): one per server
    in compare mode, else the first server alone. A server's engine knobs are its own: the
    EngineConfig is kept only for the board to show."""

    def build(config: EngineConfig, compare: bool) -> Lanes:
        chosen = connections if compare else connections[:1]
        return Lanes([Lane(c.name, RemoteEngine(c, config)) for c in chosen])

    return build
