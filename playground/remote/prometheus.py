"""One scrape of a server's Prometheus `/metrics`, read with vLLM's names.

`parse_metrics(text, t)` sums each series over its label sets (a data-parallel deployment
has one per engine; the KV usage is their mean) and returns a frozen `ServerMetrics`. A
series the server does not export is None, so a chart can say so instead of drawing a zero.
The finish reasons are put in vLLM's words (`stop`, `length`, `abort`, `error`, ...), also
where a server labels them with this project's stop reasons.
"""

import itertools
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
WAITING_BY_REASON = "vllm:num_requests_waiting_by_reason"  # {reason: capacity | deferred}
KV_USAGE = "vllm:kv_cache_usage_perc"  # 0..1
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"  # tokens looked up
PREFIX_HITS = "vllm:prefix_cache_hits_total"  # of those, found
PREEMPTIONS = "vllm:num_preemptions_total"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"
ITERATION_SUM = "vllm:iteration_tokens_total_sum"  # histogram: tokens per engine step
ITERATION_COUNT = "vllm:iteration_tokens_total_count"
REQUEST_SUCCESS = "vllm:request_success_total"  # {finished_reason}

COUNTERS = {  # sample name -> ServerMetrics field
    PREFIX_QUERIES: "prefix_queries",
    PREFIX_HITS: "prefix_hits",
    PREEMPTIONS: "preemptions",
    PROMPT_TOKENS: "prompt_tokens",
    GENERATION_TOKENS: "generation_tokens",
    ITERATION_SUM: "iteration_tokens",
    ITERATION_COUNT: "iterations",
}
# this project's stop reasons -> vLLM's finished_reason (OpenAI's finish_reason, plus abort)
VLLM_REASONS = {
    "eos": "stop", "stop_word": "stop", "max_tokens": "length", "length": "length",
    "cancelled": "abort", "timeout": "abort", "error": "error",
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class ServerMetrics:
    """One scrape. Gauges as they were; counters as the server counts them (since it started)."""

    t: float  # time.monotonic() of the scrape
    running: float | None = None
    waiting: float | None = None
    waiting_by_reason: dict[str, float] = field(default_factory=dict)
    kv_usage: float | None = None  # fraction of the KV cache in use, 0..1
    prefix_queries: float | None = None
    prefix_hits: float | None = None
    preemptions: float | None = None
    prompt_tokens: float | None = None
    generation_tokens: float | None = None
    iteration_tokens: float | None = None  # sum of tokens over all engine steps
    iterations: float | None = None  # engine steps
    finished: dict[str, float] | None = None  # finished_reason (vLLM's words) -> requests


def parse_metrics(text: str, t: float) -> ServerMetrics:
    """ValueError if `text` is not Prometheus text."""
    sums: dict[str, float] = {}
    kv: list[float] = []
    by_reason: dict[str, float] = {}
    finished: dict[str, float] | None = None
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            name, labels, value = s.name, s.labels, s.value
            if name == KV_USAGE:
                kv.append(value)
            elif name == WAITING_BY_REASON:
                reason = labels.get("reason", "")
                by_reason[reason] = by_reason.get(reason, 0.0) + value
            elif name == REQUEST_SUCCESS:
                reason = labels.get("finished_reason", "")
                reason = VLLM_REASONS.get(reason, reason)
                finished = finished or {}
                finished[reason] = finished.get(reason, 0.0) + value
            elif name in (RUNNING, WAITING) or name in COUNTERS:
                sums[name] = sums.get(name, 0.0) + value
    return ServerMetrics(
        t=t,
        running=sums.get(RUNNING),
        waiting=sums.get(WAITING),
        waiting_by_reason=by_reason,
        kv_usage=sum(kv) / len(kv) if kv else None,
        finished=finished,
        **{f: sums.get(name) for name, f in COUNTERS.items()},
    )


def increments(samples, field_name: str) -> list[float | None]:
    """Per scrape, how much a counter grew since the scrape before (the first: 0). A counter
    that went down means the server restarted: its new value is the growth. None where the
    server does not export it."""
    out, prev = [], None
    for s in samples:
        value = getattr(s, field_name)
        if value is None:
            out.append(None)
        elif prev is None:
            out.append(0.0)
        else:
            out.append(value - prev if value >= prev else value)
        prev = value if value is not None else prev
    return out


def grown(samples, field_name: str) -> float | None:
    """How much a counter grew over `samples` (restarts folded in); None if not exported."""
    values = [v for v in increments(samples, field_name) if v is not None]
    return sum(values) if values else None


def finished_grown(samples) -> dict[str, float]:
    """Requests finished over `samples`, by finished_reason (restarts folded in); reasons no
    request finished with are left out (vLLM exports every reason from 0). A scrape without
    the series counts as none finished yet: a server may export a reason only once a request
    has finished so."""
    total: dict[str, float] = {}
    for before, now in itertools.pairwise(samples):
        prev = before.finished or {}
        for reason, value in (now.finished or {}).items():
            old = prev.get(reason, 0.0)
            total[reason] = total.get(reason, 0.0) + (value - old if value >= old else value)
    return {reason: n for reason, n in total.items() if n}
