"""The per-request series of /metrics, observed when vLLM observes them.

vLLM's PrometheusStatLogger (vllm/v1/metrics/loggers.py) records from each engine iteration's
stats (vllm/v1/metrics/stats.py): at a request's first token its prompt tokens
(`vllm:prompt_tokens`) and its TTFT, at every later output one inter-token latency, and when
it finishes its finished_reason, its e2e / queue / prefill / decode / inference times, its
time per output token and its prompt and generation token counts. The driver hands this
class every output of the first lane (EngineDriver.on_finish(..., every_output=True)), on
its own thread, right after the step that made it.
"""

import bisect
import threading
import time
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

from engine import StopReason
from playground.server.openai_protocol import FINISH_REASONS

# vLLM's buckets (seconds; vllm/v1/metrics/buckets.py)
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)  # fmt: skip; also time per output token
LATENCY_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)  # fmt: skip; e2e and phases
FINISHED_REASONS = {  # StopReason -> vLLM's finished_reason (its FinishReason values)
    **FINISH_REASONS,  # stop, length, abort: the API's finish_reason
    StopReason.ERROR: "error",
}
VLLM_FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")  # all, from 0
LATENCIES = (  # (name, doc): the histograms of LATENCY_BUCKETS observed at finish
    ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds."),
    ("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request."),
    ("vllm:request_inference_time_seconds",
     "Histogram of time spent in RUNNING phase for request."),
    ("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request."),
    ("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request."),
)  # fmt: skip


def token_buckets(max_model_len: int) -> tuple[int, ...]:
    """vLLM's request_tokens buckets: 1, 2, 5, 10, 20, 50, ... up to the context length."""
    out, scale = [], 1
    while True:
        for m in (1, 2, 5):
            if m * scale > max_model_len:
                return tuple(out)
            out.append(m * scale)
        scale *= 10


class Histogram:
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


@dataclass(slots=True)
class _Live:
    """What is known of a request that has produced its first token."""

    first_token: float
    last_token: float
    num_tokens: int  # of its first completion


class RequestStats:
    """The per-request series; `observe` is called on the driver thread, `families` at scrape."""

    def __init__(self, max_model_len: int):
        self._lock = threading.Lock()
        self._live: dict[str, _Live] = {}
        self.prompt_tokens = 0  # vllm:prompt_tokens: counted as each prefill completes
        self.finished = dict.fromkeys(VLLM_FINISHED_REASONS, 0)
        self.stopped: dict[str, int] = {r.value: 0 for r in StopReason}  # the engine's reasons
        self.ttft, self.itl, self.tpot = (Histogram(TTFT_BUCKETS), Histogram(ITL_BUCKETS),
                                          Histogram(ITL_BUCKETS))  # fmt: skip
        self.latencies = {name: Histogram(LATENCY_BUCKETS) for name, _ in LATENCIES}
        tokens = token_buckets(max_model_len)
        self.num_prompt, self.num_generation = Histogram(tokens), Histogram(tokens)

    def observe(self, out, now: float | None = None) -> None:
        """One output of a request (`now`: when it came, time.monotonic())."""
        now = time.monotonic() if now is None else now
        with self._lock:
            if out.prompt_token_ids and out.outputs[0].token_ids:
                self._token(out, now)
            if out.finished:
                self._finish(out, self._live.pop(out.request_id, None))

    def _token(self, out, now: float) -> None:
        num_tokens = len(out.outputs[0].token_ids)
        live = self._live.get(out.request_id)
        if live is None:  # its prefill completed: the first token
            self.prompt_tokens += len(out.prompt_token_ids)
            first = out.metrics.first_token or now  # the engine's time of it
            self.ttft.observe(first - out.metrics.arrival)
            self._live[out.request_id] = _Live(first, first, num_tokens)
        elif num_tokens > live.num_tokens:
            self.itl.observe(now - live.last_token)
            live.last_token, live.num_tokens = now, num_tokens

    def _finish(self, out, live: _Live | None) -> None:
        reason = out.outputs[0].stop_reason or StopReason.ERROR
        self.finished[FINISHED_REASONS[reason]] += 1
        self.stopped[reason.value] += 1
        m = out.metrics
        if not out.prompt_token_ids or m.finished is None:  # made up by the driver: no times
            return
        scheduled = m.first_scheduled if m.first_scheduled is not None else m.finished
        first, last = (live.first_token, live.last_token) if live else (m.finished, m.finished)
        decode = last - first
        for name, value in zip(self.latencies, (m.finished - m.arrival, scheduled - m.arrival,
                                                last - scheduled, first - scheduled, decode),
                               strict=True):  # fmt: skip
            self.latencies[name].observe(max(value, 0.0))
        num_tokens = live.num_tokens if live else 0
        self.tpot.observe(decode / (num_tokens - 1) if num_tokens > 1 else 0.0)
        self.num_prompt.observe(len(out.prompt_token_ids))
        self.num_generation.observe(m.num_generated_tokens)

    def families(self, labels: list[str], values: list[str]):
        with self._lock:  # build them here, yield them outside the lock
            out = [*self._counters(labels, values), *self._histograms(labels, values)]
        yield from out

    def _counters(self, labels, values):
        fam = CounterMetricFamily("vllm:prompt_tokens", "Number of prefill tokens processed.",
                                  labels=labels)  # fmt: skip
        fam.add_metric(values, self.prompt_tokens)
        yield fam
        for metric, doc, label, counts in (
            ("vllm:request_success", "Count of successfully processed requests.",
             "finished_reason", self.finished),
            ("cb_playground:request_stop_reason", "Count of finished requests, by the engine's "
             "stop reason.", "stop_reason", self.stopped),
        ):  # fmt: skip
            fam = CounterMetricFamily(metric, doc, labels=[*labels, label])
            for reason, n in counts.items():
                fam.add_metric([*values, reason], n)
            yield fam

    def _histograms(self, labels, values):
        for hist, metric, doc in (
            (self.ttft, "vllm:time_to_first_token_seconds",
             "Histogram of time to first token in seconds."),
            (self.itl, "vllm:inter_token_latency_seconds",
             "Histogram of inter-token latency in seconds."),
            (self.tpot, "vllm:request_time_per_output_token_seconds",
             "Histogram of time_per_output_token_seconds per request."),
            *((self.latencies[name], name, doc) for name, doc in LATENCIES),
            (self.num_prompt, "vllm:request_prompt_tokens", "Number of prefill tokens processed."),
            (self.num_generation, "vllm:request_generation_tokens",
             "Number of generation tokens processed."),
        ):  # fmt: skip
            yield hist.family(metric, doc, labels, values)
