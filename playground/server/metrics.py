"""Prometheus metrics of the shared engine at `GET /metrics`, meaning what vLLM's mean.

A series vLLM exports keeps its `vllm:` name, type, labels (`model_name`: the served name,
`engine`: "0", the one engine), buckets and the moment it is updated (vLLM 0.32's
vllm/v1/metrics/loggers.py); what only this playground counts is named `cb_playground:`.
docs/http-api.md has the table of both. The process and Python collectors are on, as in
vLLM's registry.

One custom collector in a dedicated registry (so several apps can live in one process):

- gauges from the latest snapshot the driver publishes: running / waiting requests, KV usage,
  KV blocks by state, prefix-cache hit rate; `vllm:cache_config_info`;
- counters from the engine's totals (generated tokens, preemptions, prefix-cache tokens), read
  at scrape time. A board reset builds a fresh engine whose totals restart at 0; the collector
  folds the old engine's last values into a base, so the counters stay monotonic;
- `vllm:iteration_tokens_total`: observed once per engine step that ran tokens, as the driver
  hands over the step's StepRecord (`EngineDriver.on_step`), however long between scrapes;
- per request (playground/server/request_metrics.py): observed from each output as the driver
  hands it over (`EngineDriver.on_finish(..., every_output=True)`), so each request and token
  is counted exactly once. Counting starts when the collector attaches to the driver: when
  /metrics is registered (app.py: before the server listens), or at the first scrape that
  finds a driver if there was none.

The metrics follow the board's first lane (the continuous one in compare mode).
"""

import threading
from collections.abc import Callable

from fastapi import FastAPI
from fastapi.responses import PlainTextResponse, Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    GC_COLLECTOR,
    CollectorRegistry,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from engine import WaitingReason
from playground.server.request_metrics import Histogram, RequestStats

ITERATION_TOKENS_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
TOTALS = (  # metric name (without _total) -> Totals field
    ("vllm:generation_tokens", "num_generated_tokens", "Number of generation tokens processed."),
    ("vllm:num_preemptions", "num_preemptions", "Cumulative number of preemption from the engine."),
    ("vllm:prefix_cache_hits", "num_cached_tokens",
     "Prefix cache hits, in terms of number of cached tokens."),
    ("cb_playground:prompt_tokens_computed", "num_prompt_tokens",
     "Prompt tokens run through the model (prefill; not cached, recomputed after preemption)."),
)  # fmt: skip
ENGINE = "0"  # vLLM's `engine` label: the index of the engine core; there is one
ADMISSION_REASONS = ("max_num_queued_reqs", "max_num_queued_tokens")  # vLLM's, loggers.py


class EngineCollector(Collector):
    """Reads the driver's snapshot at every scrape, and is told of every output; see the
    module docstring."""

    def __init__(self, get_driver: Callable, model_name: str | Callable):
        self._get_driver = get_driver
        self._model_name = model_name
        self._lock = threading.Lock()  # scrapes may overlap
        self._base = dict.fromkeys([f for _, f, _ in TOTALS], 0)  # of engines reset away
        self._last = dict(self._base)
        self._last_step = 0  # the engine's step at the last scrape: a lower one is a reset
        self._driver = None  # the one that feeds `requests`
        self.requests: RequestStats | None = None  # made with the first driver
        self.iteration_tokens = Histogram(ITERATION_TOKENS_BUCKETS)
        self._attach(get_driver())

    def _attach(self, driver) -> None:
        with self._lock:  # once per driver, however many scrapes race here
            if driver is not None and driver is not self._driver:
                self._driver = driver
                if self.requests is None:
                    self.requests = RequestStats(driver.config.max_model_len)
                # queued for the driver thread: never blocks
                driver.on_finish(self.requests.observe, every_output=True)
                driver.on_step(self._observe_step)

    def _observe_step(self, record) -> None:
        """On the driver thread. vLLM observes the prompt tokens computed and the tokens
        generated in an iteration (loggers.py record, stats.py IterationStats); it counts a
        chunked prompt in the iteration that completes it and skips one with no output, where
        this counts each chunk in its own step. A step that ran no token is not observed."""
        if record.num_tokens:
            with self._lock:
                self.iteration_tokens.observe(
                    record.num_prefill_tokens + record.num_generated_tokens
                )

    def collect(self):
        driver = self._get_driver()
        if driver is None:  # not started yet: nothing to say
            return
        self._attach(driver)
        name = self._model_name(driver) if callable(self._model_name) else self._model_name
        snap = driver.snapshot()
        labels, values = ["model_name", "engine"], [name, ENGINE]
        with self._lock:  # build the families here, yield them outside the lock
            totals = self._fold(snap)
            families = list(self._families(snap, totals, labels, values))
            families.append(self.iteration_tokens.family(
                "vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
                labels, values))  # fmt: skip
        families.append(cache_config_info(driver.config, snap))
        families.append(admission_rejections(name, driver.num_admission_rejections))
        yield from families
        yield from self.requests.families(labels, values)

    def _fold(self, snap) -> dict[str, float]:
        """Cumulative totals across engine resets."""
        now = {f: getattr(snap.totals, f) for _, f, _ in TOTALS}
        reset = snap.step < self._last_step or any(now[f] < self._last[f] for f in now)
        if reset:
            for f in now:  # a fresh engine: keep what the old one counted
                self._base[f] += self._last[f]
        self._last, self._last_step = now, snap.step
        return {f: self._base[f] + now[f] for f in now}

    def _families(self, snap, totals: dict, labels: list[str], values: list[str]):
        hits = totals["num_cached_tokens"]
        queries = hits + totals["num_prompt_tokens"]  # prompt tokens: cached + computed
        gauges = [
            ("vllm:num_requests_running", "Number of requests in model execution batches.",
             snap.num_running),
            ("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
             snap.num_waiting),
            ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
             snap.kv_blocks_used / (snap.kv_blocks_total or 1)),
            ("cb_playground:prefix_cache_hit_rate", "Prompt tokens found in the prefix cache / "
             "prompt tokens looked up, since start.", hits / queries if queries else 0.0),
        ]  # fmt: skip
        counters = [
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


def cache_config_info(config, snap):
    """vLLM's `vllm:cache_config_info`: a gauge at 1 whose labels are its CacheConfig's fields
    (vllm/config/cache.py metrics_info), those that mean something here, under its names: the
    pool (num_gpu_blocks; num_gpu_blocks_override, None when sized from memory; its tokens;
    how many max_model_len requests it holds at once, as vLLM computes it: blocks / blocks of
    one such request), and the prefix cache's grain (full blocks: hashes and hits per block)."""
    blocks, size = snap.kv_blocks_total, config.block_size
    per_request = -(-snap.max_model_len // size)  # blocks of a request at max_model_len
    info = {"block_size": size, "cache_dtype": "auto",
            "enable_prefix_caching": config.enable_prefix_caching,
            "num_gpu_blocks": blocks, "num_gpu_blocks_override": config.num_kv_blocks,
            "kv_cache_size_tokens": blocks * size,
            "kv_cache_max_concurrency": blocks / per_request if per_request else None,
            "hash_block_size": size, "cache_hit_alignment_tokens": size,
            "engine": ENGINE}  # fmt: skip
    fam = GaugeMetricFamily("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
                            labels=list(info))  # fmt: skip
    fam.add_metric([str(v) for v in info.values()], 1)
    return fam


def admission_rejections(model_name: str, num_rejected: int):
    """vLLM's `vllm:admission_rejections{model_name, reason}` (loggers.py: no `engine`
    label, every reason from 0): requests refused by --max-num-queued-reqs. This server has no
    --max-num-queued-tokens: that reason stays 0."""
    fam = CounterMetricFamily("vllm:admission_rejections", "Number of admission attempts "
                              "rejected by a queue limit, by reason.",
                              labels=["model_name", "reason"])  # fmt: skip
    counts = dict.fromkeys(ADMISSION_REASONS, 0) | {"max_num_queued_reqs": num_rejected}
    for reason, n in counts.items():
        fam.add_metric([model_name, reason], n)
    return fam


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
    ProcessCollector(registry=registry)  # process_cpu_seconds_total, ..., as vLLM's registry
    PlatformCollector(registry=registry)  # python_info
    registry.register(GC_COLLECTOR)  # python_gc_*

    @app.get("/metrics", response_class=PlainTextResponse, tags=["metrics"])
    def metrics() -> Response:
        """Prometheus' text format."""
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return registry
