"""The server-sent events of a streamed answer.

Each event is `data: <chunk JSON>`, `data: [DONE]` last. A failure part-way sends an error
event (OpenAI's shape) instead of the rest. With a keep-alive interval (vLLM's
--sse-keep-alive-interval; 0, vLLM's default, sends none) a stream that has had nothing to
send for that long sends a comment line that says why (SSE clients skip comments; some, such
as `vllm bench serve`'s, cannot read them: hence off unless asked).
"""

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing

import orjson
from fastapi.responses import StreamingResponse

from playground.driver import EngineDriver, RequestHandle
from playground.server.openai_protocol import APIError
from playground.server.outbox import outputs

log = logging.getLogger(__name__)

HEARTBEAT_S = 0.5  # a waiting request checks for a gone client (and keep-alive) this often


async def events(d: EngineDriver, handles: list[RequestHandle], choices, every: int,
                 keep_alive_s: float):  # fmt: skip
    """The events of one answer, each chunk with `every` new tokens or more (the first and the
    last aside). While no output comes for `keep_alive_s` (> 0): a comment."""
    try:
        async with aclosing(_merged(handles, every)) as stream:
            quiet_since = time.monotonic()
            async for item in stream:
                now = time.monotonic()
                if item is None:
                    if keep_alive_s and now - quiet_since >= keep_alive_s:
                        quiet_since = now
                        yield _keepalive(d.state().paused_until, now)
                    continue
                quiet_since = now
                for chunk in choices.chunks(*item):
                    yield _event(chunk)
        if choices.include_usage:
            yield _event(choices.usage_chunk())
    except APIError as exc:  # the engine failed this request (finish "error" in vLLM)
        yield _event(exc.body())
    except Exception as exc:  # a bug, not the client's fault: the stream still ends cleanly
        log.exception("API stream %s failed", handles[0].request_id)
        error = APIError(500, f"{type(exc).__name__}: {exc}", type="server_error")
        yield _event(error.body())
    yield "data: [DONE]\n\n"


async def _merged(handles: list[RequestHandle], every: int) -> AsyncIterator:
    """(request index, output) of every request as they come, None on a quiet heartbeat. One
    request is read directly; a batch through a queue its readers fill."""
    if len(handles) == 1:
        async with aclosing(outputs(handles[0], HEARTBEAT_S, every)) as stream:
            async for out in stream:
                yield None if out is None else (0, out)
        return
    queue: asyncio.Queue = asyncio.Queue()

    async def read(i: int, handle: RequestHandle) -> None:
        try:
            async with aclosing(outputs(handle, HEARTBEAT_S, every)) as stream:
                async for out in stream:
                    queue.put_nowait(None if out is None else (i, out))
        except Exception as exc:  # noqa: BLE001 - raised where the events are made
            queue.put_nowait(exc)
        queue.put_nowait(StopAsyncIteration)

    readers = [asyncio.create_task(read(i, h)) for i, h in enumerate(handles)]
    try:
        left = len(readers)
        while left:
            item = await queue.get()
            if item is StopAsyncIteration:
                left -= 1
            elif isinstance(item, Exception):
                raise item
            else:
                yield item
    finally:
        for task in readers:
            task.cancel()


def _event(obj: dict) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"  # a tenth of json.dumps's time a chunk


def _keepalive(paused_until: float | None, now: float) -> str:
    if paused_until is None:
        return ": waiting for the engine\n\n"
    return f": the board is paused; it resumes by itself within {paused_until - now:.0f} s\n\n"


class EventStream(StreamingResponse):
    """A server-sent event stream that calls `on_close` however it ends. (A client that goes
    away cancels Starlette's sending part-way; Starlette never closes the generator then.)"""

    media_type = "text/event-stream"

    def __init__(self, content, on_close: Callable[[], None]):
        super().__init__(content, headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        self._on_close = on_close

    async def __call__(self, scope, receive, send):
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._on_close()  # non-blocking, so it is safe while being cancelled
