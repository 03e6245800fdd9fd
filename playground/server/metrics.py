"""Prometheus metrics of the shared engine at `GET /metrics`, meaning what vLLM's mean.

A series vLLM exports keeps its `vllm:` name, labels (`model_name`: the served name,
`engine`: "0", the one engine) and buckets; what only this playground counts is named
`cb_playground:`. README.md ("Use it from your own client") has the table of both.

One custom collector in a dedicated registry (so several apps can live in one process):

- gauges from the latest snapshot the driver publishes: running / waiting requests, KV usage,
  KV blocks by state, prefix-cache hit rate;
- counters from the engine's totals (generated tokens, preemptions, prefix-cache tokens), read
  at scrape time. A board reset builds a fresh engine whose totals restart at 0; the collector
  folds the old engine's last values into a base, so the counters stay monotonic;
- per finished request: requests by vLLM's finished_reason and by the engine's stop reason,
  its prompt tokens (vLLM's `prompt_tokens`: each request's prompt length, cached tokens
  included) and the TTFT / TPOT / e2e histograms. These are not read from the snapshot (it
  keeps only the most recent finished requests, and any number can finish between two
  scrapes) but observed as each request finishes: the driver hands every last output to the
  collector (`EngineDriver.on_finish`), so each request is counted exactly once. Counting
  starts when the collector attaches to the driver: when /metrics is registered (app.py:
  before the server listens), or at the first scrape that finds a driver if there was none.

The metrics follow the board's first lane (the continuous one in compare mode).
"""

import bisect
import threading
from collections.abc import Callable

from fastapi import FastAPI
from fastapi.responses import PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.registry import Collector

from engine import StopReason, WaitingReason
from playground.server.openai_protocol import FINISH_REASONS

# vLLM's buckets (seconds)
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0)  # fmt: skip
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
               120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip
TOTALS = (  # metric name (without _total) -> Totals field
    ("vllm:generation_tokens", "num_generated_tokens", "Number of generation tokens processed."),
    ("vllm:num_preemptions", "num_preemptions", "Cumulative number of preemption from the engine."),
    ("vllm:prefix_cache_hits", "num_cached_tokens",
     "Prefix cache hits, in terms of number of cached tokens."),
    ("cb_playground:prompt_tokens_computed", "num_prompt_tokens",
     "Prompt tokens run through the model (prefill; not cached, recomputed after preemption)."),
)  # fmt: skip
FINISHED_REASONS = {  # StopReason -> vLLM's finished_reason (its FinishReason values)
    **FINISH_REASONS,  # stop, length, abort: the API's finish_reason
    StopReason.ERROR: "error",
}
ENGINE = "0"  # vLLM's `engine` label: the index of the engine core; there is one


class _Histogram:
    """Cumulative bucket counts, as Prometheus wants them; only ever grows."""

    def __init__(self, buckets: tuple[float, ...]):
        self.bounds = buckets
        self.counts = [0] * (len(buckets) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    def family(self, name: str, doc: str, labels: list[str], values: list[str]):
        fam = HistogramMetricFamily(name, doc, labels=labels)
        cumulative, buckets = 0, []
        for bound, count in zip([*map(str, self.bounds), "+Inf"], self.counts, strict=True):
            cumulative += count
            buckets.append((bound, cumulative))
        fam.add_metric(values, buckets, self.sum)
        return fam


class EngineCollector(Collector):
    """Reads the driver's snapshot at every scrape, and is told of every request that
    finishes; see the module docstring."""

    def __init__(self, get_driver: Callable, model_name: str | Callable):
        self._get_driver = get_driver
        self._model_name = model_name
        self._lock = threading.Lock()  # scrapes may overlap
        self._base = dict.fromkeys([f for _, f, _ in TOTALS], 0)  # of engines reset away
        self._last = dict(self._base)
        self._last_step = 0
        self._driver = None  # the one on_finish() feeds us from
        self._finished: dict[str, int] = {}  # vLLM's finished_reason -> requests
        self._stopped: dict[str, int] = {}  # the engine's stop reason -> requests
        self._prompt_tokens = 0  # of the requests that finished
        self.ttft = _Histogram(TTFT_BUCKETS)
        self.tpot = _Histogram(TPOT_BUCKETS)
        self.e2e = _Histogram(E2E_BUCKETS)
        self._attach(get_driver())

    def _attach(self, driver) -> None:
        with self._lock:  # once per driver, however many scrapes race here
            if driver is not None and driver is not self._driver:
                self._driver = driver
                driver.on_finish(self.observe)  # queued for the driver thread: never blocks

    def observe(self, out) -> None:
        """Count one finished request (called on the driver thread, once per request)."""
        first, m = out.outputs[0], out.metrics
        reason = first.stop_reason or StopReason.ERROR
        with self._lock:
            finished = FINISHED_REASONS[reason]
            self._finished[finished] = self._finished.get(finished, 0) + 1
            self._stopped[reason.value] = self._stopped.get(reason.value, 0) + 1
            if not out.prompt_token_ids:  # made up by the driver (reset, failed step): no times
                return
            self._prompt_tokens += len(out.prompt_token_ids)
            self.e2e.observe(m.finished - m.arrival)
            if m.first_token is not None:
                self.ttft.observe(m.first_token - m.arrival)
                if len(first.token_ids) > 1:  # of the first completion, as the board shows
                    self.tpot.observe((m.finished - m.first_token) / (len(first.token_ids) - 1))

    def collect(self):
        driver = self._get_driver()
        if driver is None:  # not started yet: nothing to say
            return
        self._attach(driver)
        name = self._model_name(driver) if callable(self._model_name) else self._model_name
        snap = driver.snapshot()
        with self._lock:  # build the families here, yield them outside the lock
            totals = self._fold(snap)
            families = list(self._families(snap, totals, name))
        yield from families

    def _fold(self, snap) -> dict[str, float]:
        """Cumulative totals across engine resets."""
        now = {f: getattr(snap.totals, f) for _, f, _ in TOTALS}
        if snap.step < self._last_step or any(now[f] < self._last[f] for f in now):
            for f in now:  # a fresh engine: keep what the old one counted
                self._base[f] += self._last[f]
        self._last, self._last_step = now, snap.step
        return {f: self._base[f] + now[f] for f in now}

    def _families(self, snap, totals: dict, name: str):
        labels, values = ["model_name", "engine"], [name, ENGINE]
        hits = totals["num_cached_tokens"]
        queries = hits + totals["num_prompt_tokens"]  # prompt tokens: cached + computed
        gauges = [
            ("vllm:num_requests_running", "Number of requests in model execution batches.",
             snap.num_running),
            ("vllm:num_requests_waiting", "Number of requests waiting to be processed "
             "(queued or preempted).", snap.num_waiting),
            ("vllm:kv_cache_usage_perc", "KV-cache usage (blocks held by live sequences). "
             "1 means 100 percent usage.", snap.kv_blocks_used / (snap.kv_blocks_total or 1)),
            ("cb_playground:prefix_cache_hit_rate", "Prompt tokens found in the prefix cache / "
             "prompt tokens looked up, since start.", hits / queries if queries else 0.0),
        ]  # fmt: skip
        counters = [
            ("vllm:prompt_tokens", "Number of prefill tokens processed: each finished request's "
             "prompt length, cached tokens included.", self._prompt_tokens),
            ("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried "
             "tokens.", queries),
            *((metric, doc, totals[field]) for metric, field, doc in TOTALS),
        ]  # fmt: skip
        for kind, rows in ((GaugeMetricFamily, gauges), (CounterMetricFamily, counters)):
            for metric, doc, value in rows:
                fam = kind(metric, doc, labels=labels)
                fam.add_metric(values, value)
                yield fam
        yield from waiting_by_reason(snap, labels, values)
        blocks = GaugeMetricFamily("cb_playground:kv_cache_blocks", "KV blocks by state.",
                                   labels=[*labels, "state"])  # fmt: skip
        blocks.add_metric([*values, "used"], snap.kv_blocks_used)
        blocks.add_metric([*values, "cached"], snap.kv_blocks_cached)  # evictable prefix cache
        blocks.add_metric([*values, "free"], snap.kv_blocks_free)
        yield blocks
        for metric, doc, label, counts in (
            ("vllm:request_success", "Count of finished requests, by vLLM's finished_reason "
             "(stop, length, abort, error).", "finished_reason", self._finished),
            ("cb_playground:request_stop_reason", "Count of finished requests, by the engine's "
             "stop reason (eos, stop_word, max_tokens, length, cancelled, timeout, error).",
             "stop_reason", self._stopped),
        ):  # fmt: skip
            fam = CounterMetricFamily(metric, doc, labels=[*labels, label])
            for reason, n in sorted(counts.items()):
                fam.add_metric([*values, reason], n)
            yield fam
        for hist, metric, doc in (
            (self.ttft, "vllm:time_to_first_token_seconds",
             "Histogram of time to first token in seconds (arrival to first token)."),
            (self.tpot, "vllm:request_time_per_output_token_seconds",
             "Histogram of time_per_output_token_seconds per request: its mean time per output "
             "token after the first."),
            (self.e2e, "vllm:e2e_request_latency_seconds",
             "Histogram of e2e request latency in seconds (arrival to finish)."),
        ):  # fmt: skip
            yield hist.family(metric, doc, labels, values)


def waiting_by_reason(snap, labels: list[str], values: list[str]):
    """Waiting requests by the first rule that kept them out in the last step: vLLM's
    `vllm:num_requests_waiting_by_reason{reason}` (its two values, `capacity` and `deferred`)
    and ours, `cb_playground:num_requests_waiting_by_reason{reason}` (every WaitingReason,
    zeros included). A request that arrived since the last step is counted once a step has
    looked at it."""
    counts = {r: 0 for r in WaitingReason}
    for r in snap.requests:
        if r.status == "waiting" and r.waiting_reason:
            counts[WaitingReason(r.waiting_reason)] += 1
    coarse = {"capacity": 0, "deferred": 0}
    for reason, n in counts.items():
        coarse[reason.vllm_reason] += n
    for name, split in (("vllm", coarse), ("cb_playground", counts)):
        fam = GaugeMetricFamily(f"{name}:num_requests_waiting_by_reason",
                                "Requests waiting, by the first rule that kept them out.",
                                labels=[*labels, "reason"])  # fmt: skip
        for reason, n in split.items():
            fam.add_metric([*values, str(reason)], n)
        yield fam


def register_metrics(app: FastAPI, get_driver: Callable, model_name: str | Callable):
    """Add `GET /metrics` to `app`; returns its CollectorRegistry.

    `get_driver()` returns the EngineDriver (None while loading); `model_name` is the
    `model_name` label, or a callable that computes it from the driver.
    """
    registry = CollectorRegistry(auto_describe=False)
    registry.register(EngineCollector(get_driver, model_name))

    @app.get("/metrics", response_class=PlainTextResponse, tags=["metrics"])
    def metrics() -> Response:
        """Prometheus' text format."""
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return registry
