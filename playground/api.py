"""OpenAI-compatible routes on the playground's FastAPI app.

`GET /v1/models`, `POST /v1/completions` and `POST /v1/chat/completions` (streamed as
server-sent events with `stream: true`, ending with `data: [DONE]`). Every request goes
through the shared EngineDriver with owner "api:<client>" (a hash of the client's address,
never the address itself), so it shows on the board like a simulated user. It comes in
through the public door (playground/public.py), as a visitor of the board does: the limits
(prompt tokens, max_tokens, n, requests in flight per client) apply, 400 past a size limit,
429 past the in-flight or waiting limit, `param` naming the field in the API's words.

Field mapping, error shapes and finish reasons are listed in README.md ("Use it from your
own client"). `register_api` also adds `GET /metrics` (playground/metrics.py); the wire
format itself (bodies, errors, response objects) is in playground/openai_protocol.py.
"""

import asyncio
import contextlib
import hashlib
import json
import logging
import time
import uuid
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import aclosing

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import ValidationError

from playground import public
from playground.driver import EngineDriver, RequestHandle, RequestRejected
from playground.limits import LimitExceeded
from playground.metrics import register_metrics
from playground.openai_protocol import (
    IGNORED,
    UNSUPPORTED,
    APIError,
    ChatCompletionRequest,
    ChatMessage,
    CompletionJob,
    CompletionRequest,
    RequestBody,
    ResponseTracker,
    not_ready,
    queue_full,
    served_model_name,
    validation_error,
)

log = logging.getLogger(__name__)

OWNER_PREFIX = "api:"  # + a hash of the client's address: the board's label, the limits' key
HEARTBEAT_S = 0.5  # a waiting non-streamed request checks for a gone client this often
START_TIME = time.time()  # the "created" of /v1/models
COMPLETIONS_MAX_TOKENS = 16  # OpenAI's default; chat's default is the rest of the context
DriverSource = EngineDriver | Callable[[], EngineDriver | None]


# -- routes
def register_api(
    app: FastAPI, driver: DriverSource, model_name: str | None = None, metrics: bool = True
) -> None:
    """Add the /v1 routes (and GET /metrics) to `app`; call before mounting Gradio at "/".

    `driver` is the EngineDriver, or a callable returning it (None while there is none yet,
    for an app that loads the model after it listens; app.py loads first). The routes answer
    503 while there is no driver or it is not running. `model_name` defaults to the loaded
    model's name.
    """
    get_driver = driver if callable(driver) else (lambda: driver)

    def ready() -> EngineDriver:
        d = get_driver()
        if d is None or not d.is_alive:
            raise not_ready()
        return d

    def names(d: EngineDriver) -> tuple[str, ...]:
        return (model_name or served_model_name(d.model), "default")

    def check_model(d: EngineDriver, asked: str | None) -> str:
        served = names(d)
        if asked is not None and asked not in served:
            message = f"The model `{asked}` does not exist; this server serves `{served[0]}`"
            raise APIError(404, message, param="model", code="model_not_found")
        return served[0]

    @app.get("/v1/models")
    def list_models():
        try:
            d = ready()
        except APIError as exc:
            return exc.response()
        entry = {"id": names(d)[0], "object": "model", "created": int(START_TIME)}
        entry.update(owned_by="cb-playground", max_model_len=d.config.max_model_len)
        return {"object": "list", "data": [entry]}

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        return await _serve(request, ChatCompletionRequest, ready, check_model)

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await _serve(request, CompletionRequest, ready, check_model)

    if metrics:
        register_metrics(app, get_driver, lambda d: names(d)[0])


async def _serve(request: Request, body_cls, ready, check_model):
    try:
        d = ready()
        body = await _parse(request, body_cls)
        model = check_model(d, body.model)
        try:
            job = await asyncio.to_thread(_prepare, d, body, model)
            handle = await asyncio.to_thread(_submit, d, job, client_owner(request))
        except RequestRejected as exc:
            raise _refusal(exc, body, d.config.max_waiting) from None
    except APIError as exc:
        return exc.response()
    except Exception as exc:  # a bug, not the client's fault: still answer in OpenAI's shape
        log.exception("API request failed")
        return APIError(500, f"{type(exc).__name__}: {exc}", type="server_error").response()
    tracker = ResponseTracker(job)
    if body.stream:

        def close():  # however the response ends: a client gone mid-stream aborts
            if not tracker.finished:
                d.abort(job.request_id)

        return _EventStream(_stream(handle, tracker), on_close=close)
    return await _respond(request, d, handle, tracker)


async def _parse(request: Request, body_cls) -> RequestBody:
    try:
        data = json.loads(await request.body())
    except ValueError as exc:
        raise APIError(400, f"the body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise APIError(400, "the body must be a JSON object")
    unknown = sorted(set(data) - set(body_cls.model_fields) - set(UNSUPPORTED) - IGNORED)
    if unknown:
        message = f"{unknown[0]}: unrecognized request argument"
        raise APIError(400, message, param=unknown[0], code="unknown_parameter")
    for name, unused in UNSUPPORTED.items():
        if name in body_cls.model_fields:  # this route supports it (best_of: completions)
            continue
        if data.get(name) is not None and data[name] not in unused:
            message = f"{name} is not supported by this engine"
            raise APIError(400, message, param=name, code="unsupported_parameter")
    try:
        body = body_cls.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc) from None
    body.check()
    return body


def _prepare(d: EngineDriver, body: RequestBody, model: str) -> CompletionJob:
    """Build the prompt and SamplingParams; RequestRejected naming the field when they are bad,
    APIError for the context window."""
    chat = isinstance(body, ChatCompletionRequest)
    prompt = _chat_prompt(body.messages) if chat else _completion_prompt(body.prompt)
    token_ids = public.tokenize(d, prompt)
    max_model_len = d.config.max_model_len
    room = max_model_len - len(token_ids)
    too_long = "context_length_exceeded"
    if room < 1:
        prompt_param = _param("prompt", body)
        message = (
            f"{prompt_param} has {len(token_ids)} tokens; this model's context is "
            f"{max_model_len} tokens, and at least one must be left to generate"
        )
        raise APIError(400, message, param=prompt_param, code=too_long)
    max_tokens = (body.max_completion_tokens if chat else None) or body.max_tokens
    if max_tokens is None:
        max_tokens = min(room, d.limits.max_tokens) if chat else COMPLETIONS_MAX_TOKENS
    if max_tokens > room:
        max_param = _param("max_tokens", body)
        message = (
            f"{max_param} is {max_tokens}, but the prompt has {len(token_ids)} tokens and the "
            f"context is {max_model_len}: at most {room} can be generated"
        )
        raise APIError(400, message, param=max_param, code=too_long)
    if chat:
        top = body.top_logprobs if body.logprobs else None
    else:
        top = body.logprobs
    fields = dict(temperature=body.temperature)
    if not chat:
        fields |= body.beam_fields()
    params = public.sampling_params(
        max_tokens=max_tokens,
        top_p=body.top_p,
        top_k=max(body.top_k, 0),
        min_p=body.min_p,
        repetition_penalty=body.repetition_penalty,
        stop=body.stop,
        stop_token_ids=body.stop_token_ids,
        ignore_eos=body.ignore_eos,
        n=body.n,
        seed=body.seed,
        logprobs=top,
        **fields,
    )
    request_id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:10]}"  # OpenAI's style
    return CompletionJob(chat, request_id, model, prompt, token_ids, params, top, body.priority,
                         body.stream, body.include_usage, int(time.time()))  # fmt: skip


def _param(field: str, body: RequestBody) -> str:
    """The API's name of a SamplingParams field or of the prompt."""
    chat = isinstance(body, ChatCompletionRequest)
    if field == "prompt":
        return "messages" if chat else "prompt"
    if field == "max_tokens" and chat and body.max_completion_tokens:
        return "max_completion_tokens"
    if field == "logprobs" and chat:
        return "top_logprobs"
    if field == "beam_width":
        return "best_of" if getattr(body, "best_of", None) else "n"
    return field


def _refusal(exc: RequestRejected, body: RequestBody, max_waiting: int) -> APIError:
    """A refusal of the public door in OpenAI's shape, `param` in the API's words."""
    if exc.code == "queue_full":
        return queue_full(max_waiting)
    param = _param(exc.field, body)
    if isinstance(exc, LimitExceeded):
        kind = "rate_limit_error" if exc.status == 429 else None
        message = f"{param}: {exc.message}"
        return APIError(exc.status, message, param=param, code="limit_exceeded", type=kind)
    message = str(exc) if param == exc.field else f"{param}: {exc}"  # the API's name first
    return APIError(exc.status, message, param=param)


def _chat_prompt(messages: list[ChatMessage]) -> list[dict]:
    out = []
    for i, m in enumerate(messages):
        content = m.content or ""
        if isinstance(content, list):
            bad = next((p.type for p in content if p.type != "text"), None)
            if bad is not None:
                param = f"messages[{i}].content"
                raise APIError(400, f"{param}: only text parts are supported, got {bad!r}", param)
            content = "\n".join(p.text or "" for p in content)
        out.append({"role": "system" if m.role == "developer" else m.role, "content": content})
    return out


def _completion_prompt(prompt) -> str | list[int]:
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str | list):
        if len(prompt) != 1:
            message = f"prompt: a batch of {len(prompt)} prompts is not supported; send one each"
            raise APIError(400, message, param="prompt")
        prompt = prompt[0]
    return prompt


def client_owner(request: Request) -> str:
    """The board's owner of a client's requests: a short hash of its address."""
    host = request.client.host if request.client else "unknown"
    return OWNER_PREFIX + hashlib.sha256(host.encode()).hexdigest()[:6]


def _submit(d: EngineDriver, job: CompletionJob, owner: str) -> RequestHandle:
    """Hand the request to the driver (blocks until it is queued in the engine)."""
    try:
        return public.submit(d, job.prompt, job.prompt_token_ids, job.params, owner,
                             request_id=job.request_id, priority=job.priority)  # fmt: skip
    except FutureTimeout:
        raise not_ready() from None


# -- reading the driver's output stream
async def _outputs(handle: RequestHandle):
    """The handle's RequestOutputs without blocking the event loop, plus a None every
    HEARTBEAT_S without one. The driver thread hands each item straight to the loop."""
    loop = asyncio.get_running_loop()
    inbox: asyncio.Queue = asyncio.Queue()

    def to_loop(item) -> None:  # on the driver thread
        with contextlib.suppress(RuntimeError):  # the event loop closed
            loop.call_soon_threadsafe(inbox.put_nowait, item)

    handle.listen(to_loop)
    while True:
        try:
            async with asyncio.timeout(HEARTBEAT_S):
                item = await inbox.get()
        except TimeoutError:
            yield None
            continue
        if isinstance(item, Exception):
            raise item
        yield item
        if item.finished:
            return


async def _respond(request: Request, d: EngineDriver, handle: RequestHandle, tracker):
    next_look = time.monotonic() + HEARTBEAT_S
    async with aclosing(_outputs(handle)) as outputs:
        async for out in outputs:
            if time.monotonic() >= next_look:  # is the client still there?
                next_look = time.monotonic() + HEARTBEAT_S
                if await request.is_disconnected():
                    d.abort(handle.request_id)
                    return JSONResponse({}, status_code=499)  # nobody reads it
            if out is not None:
                tracker.update(out)
                if out.finished:
                    return tracker.response(out)


async def _stream(handle: RequestHandle, tracker):
    """The server-sent events of one request, `data: [DONE]` last. A failure part-way sends
    an error event (OpenAI's shape) instead of the rest; the response's on_close then aborts
    the request."""
    try:
        async with aclosing(_outputs(handle)) as outputs:
            async for out in outputs:
                for chunk in tracker.chunks(out) if out is not None else ():
                    yield _event(chunk)
        if tracker.job.include_usage:
            yield _event(tracker.envelope([], usage=tracker.usage()))
    except Exception as exc:  # a bug, not the client's fault: the stream still ends cleanly
        log.exception("API stream %s failed", handle.request_id)
        error = APIError(500, f"{type(exc).__name__}: {exc}", type="server_error")
        yield _event(error.body())
    yield "data: [DONE]\n\n"


def _event(obj: dict) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


class _EventStream(StreamingResponse):
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
