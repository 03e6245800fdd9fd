"""Connection: one OpenAI-compatible server, spoken to from an asyncio loop on a thread of its
own (`remote-io`), so that hundreds of open streams cost no thread each.

It does two things. It streams requests (`send`, `cancel`), at most `max_concurrency` at a
time, and hands what comes back as plain events to the sink of the engine that sent them
(a thread-safe queue that the driver thread drains). And it polls the server's `/metrics`
every `poll_s` seconds, keeping the recent scrapes and the server's health: `ok`, `slow`
(a scrape took more than SLOW_S), `down` (it failed; the message says how). Only this
thread touches the HTTP client; nothing here touches the driver's state.
"""

import asyncio
import contextlib
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from engine import SamplingParams
from playground.remote import wire
from playground.remote.prometheus import ServerMetrics, parse_metrics

log = logging.getLogger(__name__)

POLL_S = 0.5  # between two scrapes of /metrics
SLOW_S = 2.0  # a scrape slower than this: the server is "slow"
SCRAPE_TIMEOUT_S = 5.0
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 120.0  # no byte of a stream for this long: the request ends with ERROR
MAX_CONCURRENCY = 64  # streams open at once; more wait their turn on this side
MAX_SAMPLES = 1200  # scrapes kept: ten minutes at POLL_S


@dataclass(frozen=True, slots=True)
class Health:
    state: str  # "connecting" | "ok" | "slow" | "down"
    message: str  # what went wrong, or how long the last scrape took
    since: float  # time.monotonic() when the state began


@dataclass(frozen=True, slots=True)
class Chunk:
    """A streamed chunk of one request: its text, or its finish_reason, or its usage."""

    request_id: str
    t: float
    text: str = ""
    finish_reason: str | None = None
    matched: object = None  # vLLM's stop_reason: the stop string or token id that matched
    usage: dict | None = None


@dataclass(frozen=True, slots=True)
class End:
    """The stream is over. `error`: why it failed; `cut`: "cancelled" or "timeout" when this
    side ended it; neither: it ended as the server said (its finish_reason)."""

    request_id: str
    t: float
    error: str | None = None
    cut: str | None = None


Sink = Callable[[object], None]


class Connection:
    def __init__(
        self,
        url: str,
        api_key: str | None = None,
        model: str | None = None,
        *,
        max_concurrency: int = MAX_CONCURRENCY,
        poll_s: float = POLL_S,
        read_timeout_s: float = READ_TIMEOUT_S,
    ):
        self.url = normalize_url(url)
        self.name = urlsplit(self.url).netloc
        self.model = model  # None: the first id of GET /v1/models
        self.poll_s = poll_s
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = httpx.Timeout(read_timeout_s, connect=CONNECT_TIMEOUT_S, pool=None)
        self._max_concurrency = max_concurrency
        self._lock = threading.Lock()  # samples and health, read by the driver thread
        self._samples: deque[ServerMetrics] = deque(maxlen=MAX_SAMPLES)
        self._health = Health("connecting", f"first look at {self.url}", time.monotonic())
        self.version = 0  # moves with every scrape or health change
        self._tasks: dict[str, asyncio.Task] = {}  # loop thread only
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"remote-io {self.name}",
                                        daemon=True)  # fmt: skip
        self._thread.start()
        self._ready.wait(10)

    # -- any thread -------------------------------------------------------------------------
    def send(self, request_id: str, prompt, params: SamplingParams, sink: Sink) -> None:
        """Stream one request; its Chunks and its End go to `sink` (on the loop thread)."""
        self._call(self._start, request_id, prompt, params, sink)

    def cancel(self, request_id: str) -> None:
        """Close the request's stream (the server aborts it); it Ends with cut="cancelled"."""
        self._call(self._cancel, request_id)

    def cancel_all(self) -> None:
        self._call(self._cancel_all)

    def samples(self, since: float) -> tuple[ServerMetrics, ...]:
        """The scrapes taken at or after `since` (time.monotonic()), oldest first, and the
        one just before it (the baseline for counters)."""
        with self._lock:
            samples = list(self._samples)
        first = next((i for i, s in enumerate(samples) if s.t >= since), len(samples))
        return tuple(samples[max(0, first - 1) :])

    @property
    def health(self) -> Health:
        return self._health

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._call(self._cancel_all)
        self._call(self._loop.stop)
        self._thread.join(5)

    # -- the loop thread ----------------------------------------------------------------------
    def _call(self, fn, *args) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nothing to do
            self._loop.call_soon_threadsafe(fn, *args)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._slots = asyncio.Semaphore(self._max_concurrency)
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=16)
        self._client = httpx.AsyncClient(base_url=self.url, headers=self._headers,
                                         timeout=self._timeout, limits=limits)  # fmt: skip
        poller = self._loop.create_task(self._poll())
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            poller.cancel()
            for task in list(self._tasks.values()):
                task.cancel()
            pending = [poller, *self._tasks.values()]
            self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self._loop.run_until_complete(self._client.aclose())
            self._loop.close()

    def _start(self, request_id: str, prompt, params: SamplingParams, sink: Sink) -> None:
        task = self._loop.create_task(self._stream(request_id, prompt, params, sink))
        self._tasks[request_id] = task
        task.add_done_callback(lambda _: self._tasks.pop(request_id, None))

    def _cancel(self, request_id: str) -> None:
        task = self._tasks.get(request_id)
        if task is not None:
            task.cancel()

    def _cancel_all(self) -> None:
        for task in list(self._tasks.values()):
            task.cancel()

    async def _stream(self, rid: str, prompt, params: SamplingParams, sink: Sink) -> None:
        error = cut = None
        try:
            async with self._slots:
                timeout = asyncio.timeout(params.timeout_s) if params.timeout_s else None
                async with timeout or contextlib.nullcontext():
                    if not await self._stream_chunks(rid, prompt, params, sink):
                        error = "the stream ended before the server gave a finish_reason"
        except asyncio.CancelledError:
            cut = "cancelled"
        except TimeoutError:  # asyncio.timeout: the request's own timeout_s
            cut = "timeout"
        except _Refused as exc:
            error = str(exc)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            error = f"cannot reach {self.url}: {exc or type(exc).__name__}"
        except httpx.ReadTimeout:
            error = f"no answer for {self._timeout.read:.0f} s: server slow"
        except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
            error = f"the server dropped the stream ({exc or 'closed'})"
        except Exception as exc:  # noqa: BLE001 - any failure ends this request only
            log.exception("stream %s failed", rid)
            error = f"{type(exc).__name__}: {exc}"
        sink(End(rid, time.monotonic(), error, cut))

    async def _stream_chunks(self, rid: str, prompt, params, sink: Sink) -> bool:
        """Stream one request into `sink`; True if it ended with [DONE] after a finish_reason."""
        body = wire.request_body(self.model or await self._model_id(), prompt, params)
        finished = False
        async with self._client.stream("POST", wire.route(prompt), json=body) as r:
            if r.status_code >= 400:
                raise _Refused(wire.error_message(r.status_code, await r.aread()))
            async for line in r.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    return finished
                chunk = json.loads(data)
                if "error" in chunk:
                    raise _Refused("the server ended the stream: " + _message(chunk["error"]))
                text, reason, matched = wire.chunk_text(chunk)
                finished |= reason is not None
                if text or reason or chunk.get("usage"):
                    sink(Chunk(rid, time.monotonic(), text, reason, matched, chunk.get("usage")))
        return False

    async def _model_id(self) -> str:
        try:
            r = await self._client.get("/v1/models", timeout=SCRAPE_TIMEOUT_S)
        except httpx.HTTPError as exc:
            raise _Refused(
                f"cannot reach {self.url}/v1/models: {exc or type(exc).__name__}"
            ) from None
        if r.status_code >= 400:
            raise _Refused("GET /v1/models: " + wire.error_message(r.status_code, r.content))
        models = r.json().get("data") or []
        if not models:
            raise _Refused("GET /v1/models lists no model")
        self.model = models[0]["id"]
        return self.model

    async def _poll(self) -> None:
        while True:
            t0 = time.monotonic()
            try:
                r = await self._client.get("/metrics", timeout=SCRAPE_TIMEOUT_S)
                if r.status_code >= 400:
                    raise _Refused("GET /metrics: " + wire.error_message(r.status_code, r.content))
                sample = parse_metrics(r.text, t0)
                took = time.monotonic() - t0
                if took > SLOW_S:
                    self._set_health("slow", f"/metrics took {took:.1f} s to answer", sample)
                else:
                    self._set_health("ok", f"/metrics in {took * 1000:.0f} ms", sample)
            except (httpx.HTTPError, _Refused, ValueError) as exc:
                self._set_health("down", _describe(exc, self.url), None)
            await asyncio.sleep(max(0.0, self.poll_s - (time.monotonic() - t0)))

    def _set_health(self, state: str, message: str, sample: ServerMetrics | None) -> None:
        with self._lock:
            if sample is not None:
                self._samples.append(sample)
            old = self._health
            since = old.since if old.state == state else time.monotonic()
            self._health = Health(state, message, since)
            self.version += 1


class _Refused(Exception):
    """The server answered, but with an error: its message is the request's error."""


def _message(err) -> str:
    return str(err.get("message", err)) if isinstance(err, dict) else str(err)


def _describe(exc: Exception, url: str) -> str:
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        return f"cannot reach {url} ({exc or 'connection refused'})"
    if isinstance(exc, httpx.TimeoutException):
        return f"{url}/metrics did not answer within {SCRAPE_TIMEOUT_S:.0f} s"
    if isinstance(exc, ValueError):
        return f"{url}/metrics is not Prometheus text ({exc})"
    return str(exc) or type(exc).__name__


def normalize_url(url: str) -> str:
    """`http://host:port` from what a user may type (`host:port`, a trailing `/v1`)."""
    url = url.strip().rstrip("/")
    if "://" not in url:
        url = "http://" + url
    if url.endswith("/v1"):
        url = url[:-3]
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"engine-url: expected http://HOST:PORT, got {url!r}")
    return url
