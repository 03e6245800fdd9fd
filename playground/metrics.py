"""Prometheus metrics of the shared engine at `GET /metrics`, named like vLLM's `vllm:` series.

Everything is computed at scrape time from what the driver publishes (`BoardState`), by one
custom collector in a dedicated registry (so several apps can live in one process):

- gauges from the latest snapshot: running / waiting requests, KV usage, prefix-cache hit rate;
- counters from the engine's totals (tokens, preemptions, prefix-cache tokens). A board reset
  builds a fresh engine whose totals restart at 0; the collector folds the old engine's last
  values into a base, so the counters stay monotonic;
- per finished request (seen once, by id, in the snapshot's list of recent finished requests):
  requests by stop reason and the TTFT / TPOT / e2e histograms. The engine keeps the 256 most
  recent finished requests, so a request is missed only if more finish between two scrapes.

The metrics follow the board's first lane (the continuous one in compare mode).
"""

import bisect
import threading
from collections.abc import Callable

from fastapi import FastAPI
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.registry import Collector

# vLLM's buckets (seconds), a few longer ones for a slow CPU
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                5.0, 7.5, 10.0, 20.0, 40.0, 80.0)  # fmt: skip
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0)  # fmt: skip
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
               120.0, 240.0, 480.0)  # fmt: skip
TOTALS = (  # metric name (without _total) -> Totals field
    ("vllm:prompt_tokens", "num_prompt_tokens", "Prompt tokens computed (prefill)."),
    ("vllm:generation_tokens", "num_generated_tokens", "Tokens generated."),
    ("vllm:num_preemptions", "num_preemptions", "Sequences preempted (KV blocks ran out)."),
    ("vllm:prefix_cache_hits", "num_cached_tokens", "Prompt tokens served by the prefix cache."),
)


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
    """Reads the driver's BoardState at every scrape; see the module docstring."""

    def __init__(self, get_driver: Callable, model_name: str | Callable):
        self._get_driver = get_driver
        self._model_name = model_name
        self._lock = threading.Lock()  # scrapes may overlap
        self._base = dict.fromkeys([f for _, f, _ in TOTALS], 0)  # of engines reset away
        self._last = dict(self._base)
        self._last_step = 0
        self._seen: set[str] = set()  # finished request ids already counted
        self._finished: dict[str, int] = {}  # stop reason -> requests
        self.ttft = _Histogram(TTFT_BUCKETS)
        self.tpot = _Histogram(TPOT_BUCKETS)
        self.e2e = _Histogram(E2E_BUCKETS)

    def collect(self):
        driver = self._get_driver()
        if driver is None:  # still loading: nothing to say yet
            return
        name = self._model_name(driver) if callable(self._model_name) else self._model_name
        snap = driver.snapshot()
        with self._lock:
            totals = self._fold(snap)
            self._count_finished(snap)
            yield from self._families(snap, totals, name)

    def _fold(self, snap) -> dict[str, float]:
        """Cumulative totals across engine resets."""
        now = {f: getattr(snap.totals, f) for _, f, _ in TOTALS}
        if snap.step < self._last_step or any(now[f] < self._last[f] for f in now):
            for f in now:  # a fresh engine: keep what the old one counted
                self._base[f] += self._last[f]
        self._last, self._last_step = now, snap.step
        return {f: self._base[f] + now[f] for f in now}

    def _count_finished(self, snap) -> None:
        done = [r for r in snap.requests if r.status == "finished" and r.finished is not None]
        for r in done:
            if r.request_id in self._seen:
                continue
            reason = r.stop_reason or "unknown"
            self._finished[reason] = self._finished.get(reason, 0) + 1
            self.e2e.observe(r.finished - r.arrival)
            if r.first_token is not None:
                self.ttft.observe(r.first_token - r.arrival)
                if r.num_output_tokens > 1:
                    self.tpot.observe((r.finished - r.first_token) / (r.num_output_tokens - 1))
        self._seen = {r.request_id for r in done}  # ids never come back once dropped

    def _families(self, snap, totals: dict, name: str):
        labels, values = ["model_name"], [name]
        hits = totals["num_cached_tokens"]
        queries = hits + totals["num_prompt_tokens"]  # prompt tokens: cached + computed
        gauges = [
            ("vllm:num_requests_running", "Requests running (in the batch).", snap.num_running),
            ("vllm:num_requests_waiting", "Requests waiting (queued or preempted).",
             snap.num_waiting),
            ("vllm:kv_cache_usage_perc", "KV blocks held by live sequences (1 = 100%).",
             snap.kv_blocks_used / (snap.kv_blocks_total or 1)),
            ("vllm:prefix_cache_hit_rate", "Prompt tokens found in the prefix cache / prompt "
             "tokens, since start.", hits / queries if queries else 0.0),
        ]  # fmt: skip
        counters = [
            ("vllm:prefix_cache_queries", "Prompt tokens looked up in the prefix cache.", queries),
            *((metric, doc, totals[field]) for metric, field, doc in TOTALS),
        ]
        for kind, rows in ((GaugeMetricFamily, gauges), (CounterMetricFamily, counters)):
            for metric, doc, value in rows:
                fam = kind(metric, doc, labels=labels)
                fam.add_metric(values, value)
                yield fam
        blocks = GaugeMetricFamily("vllm:kv_cache_blocks", "KV blocks by state.",
                                   labels=[*labels, "state"])  # fmt: skip
        blocks.add_metric([*values, "used"], snap.kv_blocks_used)
        blocks.add_metric([*values, "cached"], snap.kv_blocks_cached)  # evictable prefix cache
        blocks.add_metric([*values, "free"], snap.kv_blocks_free)
        yield blocks
        finished = CounterMetricFamily(
            "vllm:request_success",
            "Finished requests by stop reason (the engine's StopReason values).",
            labels=[*labels, "finished_reason"],
        )
        for reason, n in sorted(self._finished.items()):
            finished.add_metric([*values, reason], n)
        yield finished
        for hist, metric, doc in (
            (self.ttft, "vllm:time_to_first_token_seconds", "Arrival to first token."),
            (self.tpot, "vllm:time_per_output_token_seconds", "Mean time per output token "
             "after the first, per request."),
            (self.e2e, "vllm:e2e_request_latency_seconds", "Arrival to finish."),
        ):  # fmt: skip
            yield hist.family(metric, doc, labels, values)


def register_metrics(app: FastAPI, get_driver: Callable, model_name: str | Callable):
    """Add `GET /metrics` to `app`; returns its CollectorRegistry.

    `get_driver()` returns the EngineDriver (None while loading); `model_name` is the
    `model_name` label, or a callable that computes it from the driver.
    """
    registry = CollectorRegistry(auto_describe=False)
    registry.register(EngineCollector(get_driver, model_name))

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return registry
