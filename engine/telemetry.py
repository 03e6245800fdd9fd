"""StepRecord and EngineSnapshot: what the UI and the benchmarks read about the engine.

Everything here is an immutable plain value, so a snapshot can cross threads freely.
"""

import math
from collections import Counter, deque
from dataclasses import dataclass, field

MAX_STEP_RECORDS = 512  # the charts' history
MAX_LATENCY_SAMPLES = 4096  # finished requests kept for TTFT / TPOT percentiles


@dataclass(frozen=True, slots=True)
class StepEvent:
    kind: (
        str  # "admitted" | "prefill_chunk" | "prefill_done" | "preempted" | "finished" | "aborted"
    )
    request_id: str
    detail: str = ""  # e.g. "chunk 2/3 (128 tokens)", "eos", "12 cached tokens"


@dataclass(frozen=True, slots=True)
class StepRecord:
    step: int
    start: float  # time.monotonic()
    duration: float  # seconds, schedule + forward + sampling
    forward_duration: float  # seconds in the model forward
    num_prefill_tokens: int
    num_decode_tokens: int
    num_seqs: int
    token_budget: int
    num_waiting: int
    num_running: int
    kv_blocks_used: int
    kv_blocks_cached: int
    kv_blocks_free: int
    events: tuple[StepEvent, ...] = ()
    # requests left waiting, per WaitingReason value (engine/waiting.py); zeros left out
    waiting_by_reason: tuple[tuple[str, int], ...] = ()
    num_generated_tokens: int = 0  # sampled this step (every completion and beam)

    @property
    def num_tokens(self) -> int:
        return self.num_prefill_tokens + self.num_decode_tokens


@dataclass(frozen=True, slots=True)
class RequestState:
    request_id: str
    status: str  # SequenceStatus value of the request (running > waiting > finished)
    stop_reason: str | None  # StopReason value of the first completion
    priority: int
    num_prompt_tokens: int
    num_output_tokens: int  # of the first completion
    num_computed_tokens: int
    num_cached_tokens: int
    num_preemptions: int
    n: int
    text: str  # first completion's text so far
    arrival: float
    first_scheduled: float | None
    first_token: float | None
    finished: float | None
    block_table: tuple[int, ...]  # first completion's KV blocks
    max_tokens: int = 0  # its SamplingParams.max_tokens
    waiting_reason: str | None = None  # WaitingReason value, while it waits after a step
    num_recomputed_tokens: int = 0  # computed again after preemptions (all completions)
    preemption_time_lost: float = 0.0  # seconds its preemptions delayed it (so far)
    preempted_spans: tuple[tuple[float, float], ...] = ()  # (start, end) of each loss
    beam_width: int = 1
    beams: tuple[tuple[int, str, float], ...] = ()  # live beams: (beam id, text, cumulative
    # logprob), best first, while a beam search runs
    # every live sequence's KV blocks (the n completions, or the beams in `beams`' order),
    # when it has more than one: the blocks they share show as shared in the block map
    seq_block_tables: tuple[tuple[int, ...], ...] = ()
    # its live copy-on-write copies: (block, the block it was copied from, the step then)
    copied_blocks: tuple[tuple[int, int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class Totals:
    num_requests_finished: int = 0
    num_prompt_tokens: int = 0  # of every step so far (computed, not cached)
    num_generated_tokens: int = 0
    num_cached_tokens: int = 0  # prompt tokens served by the prefix cache
    num_preemptions: int = 0
    num_recomputed_tokens: int = 0  # tokens computed again after preemptions
    preemption_time_lost: float = 0.0  # seconds preemptions delayed requests, summed
    num_prefix_queries: int = 0  # full prompt blocks looked up in the prefix cache
    num_prefix_hits: int = 0  # of those, found
    elapsed_busy: float = 0.0  # seconds spent inside steps that did work
    tokens_per_s: float = 0.0  # generated tokens / elapsed_busy
    ttft_p50: float | None = None
    ttft_p95: float | None = None
    tpot_p50: float | None = None
    tpot_p95: float | None = None
    stop_reasons: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class EngineSnapshot:
    step: int
    num_waiting: int
    num_running: int
    num_finished: int
    kv_blocks_total: int
    kv_blocks_used: int  # held by live sequences
    kv_blocks_cached: int  # evictable prefix-cache blocks
    block_size: int
    kv_backend: str
    batching: str  # EngineConfig.batching: "continuous" | "static"
    scheduling_policy: str  # the waiting queue's order: "fcfs" | "priority"
    max_num_seqs: int
    max_num_batched_tokens: int
    requests: tuple[RequestState, ...]  # waiting, running, then the most recent finished
    steps: tuple[StepRecord, ...]  # the most recent, oldest first
    totals: Totals
    ttfts: tuple[float, ...] = ()  # recent finished requests, seconds
    tpots: tuple[float, ...] = ()
    kv_cached_block_ids: tuple[int, ...] = ()  # the evictable blocks (for the block map)
    max_model_len: int = 0  # the context window the engine runs with

    @property
    def kv_blocks_free(self) -> int:
        return self.kv_blocks_total - self.kv_blocks_used - self.kv_blocks_cached


class Telemetry:
    """Accumulates StepRecords and finished-request numbers for the snapshot's totals."""

    def __init__(self):
        self.steps: deque[StepRecord] = deque(maxlen=MAX_STEP_RECORDS)
        self.ttfts: deque[float] = deque(maxlen=MAX_LATENCY_SAMPLES)
        self.tpots: deque[float] = deque(maxlen=MAX_LATENCY_SAMPLES)
        self.stop_reasons: Counter[str] = Counter()
        self.num_requests_finished = 0
        self.num_prompt_tokens = 0
        self.num_generated_tokens = 0
        self.num_cached_tokens = 0
        self.num_preemptions = 0
        self.num_recomputed_tokens = 0  # counted by the engine as it computes them
        self.preemption_time_lost = 0.0  # of finished requests
        self.elapsed_busy = 0.0

    def record_step(self, record: StepRecord) -> None:
        self.steps.append(record)
        self.num_prompt_tokens += record.num_prefill_tokens
        self.num_generated_tokens += record.num_generated_tokens
        self.num_preemptions += sum(e.kind == "preempted" for e in record.events)
        if record.num_tokens:
            self.elapsed_busy += record.duration

    def record_finished(self, metrics, stop_reasons: list[str]) -> None:
        self.num_requests_finished += 1
        self.num_cached_tokens += metrics.num_cached_tokens
        self.preemption_time_lost += metrics.preemption_time_lost
        self.stop_reasons.update(stop_reasons)
        if metrics.ttft is not None:
            self.ttfts.append(metrics.ttft)
        if metrics.tpot is not None:
            self.tpots.append(metrics.tpot)

    def totals(
        self, num_prefix_queries: int = 0, num_prefix_hits: int = 0, live_time_lost: float = 0.0
    ) -> Totals:
        """`live_time_lost`: what preemptions cost the requests still live."""
        return Totals(
            num_recomputed_tokens=self.num_recomputed_tokens,
            preemption_time_lost=self.preemption_time_lost + live_time_lost,
            num_prefix_queries=num_prefix_queries,
            num_prefix_hits=num_prefix_hits,
            num_requests_finished=self.num_requests_finished,
            num_prompt_tokens=self.num_prompt_tokens,
            num_generated_tokens=self.num_generated_tokens,
            num_cached_tokens=self.num_cached_tokens,
            num_preemptions=self.num_preemptions,
            elapsed_busy=self.elapsed_busy,
            tokens_per_s=self.num_generated_tokens / self.elapsed_busy
            if self.elapsed_busy
            else 0.0,
            ttft_p50=percentile(self.ttfts, 50),
            ttft_p95=percentile(self.ttfts, 95),
            tpot_p50=percentile(self.tpots, 50),
            tpot_p95=percentile(self.tpots, 95),
            stop_reasons=dict(self.stop_reasons),
        )


def percentile(values, q: float) -> float | None:
    """Nearest-rank percentile, None when there is nothing to rank."""
    if not values:
        return None
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, math.ceil(q * len(ordered) / 100) - 1))
    return ordered[k]
