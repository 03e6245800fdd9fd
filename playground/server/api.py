"""OpenAI-compatible routes on the playground's FastAPI app.

`GET /v1/models`, `POST /v1/completions` and `POST /v1/chat/completions` (streamed as
server-sent events with `stream: true`, ending with `data: [DONE]`). Every request goes
through the shared EngineDriver with owner "api:<client>" (a hash of the client's address,
never the address itself), so it shows on the board like a simulated user. It comes in
through the public door (playground/access/public.py), as a visitor of the board does: the limits
(prompt tokens, max_tokens, n, requests in flight per client) apply, 400 past a size limit,
429 past the in-flight or waiting limit, `param` naming the field in the API's words.

As vLLM serves: `GET /health` (503 once the driver has stopped), Bearer auth on /v1 with
`api_keys`, the served name and its aliases, `: keep-alive` comments in a stream that waits.
Field mapping, error shapes and finish reasons are listed in README.md ("Use it from your
own client"). `register_api` also adds `GET /metrics` (playground/server/metrics.py); the wire
format itself (bodies, errors, response objects) is in playground/server/openai_protocol.py, its
OpenAPI description in playground/server/openapi.py.
"""

import asyncio
import hashlib
import hmac
import json
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from contextlib import aclosing
from typing import Annotated

import orjson
from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import ValidationError

from playground.access import public
from playground.access.limits import LimitExceeded
from playground.driver import EngineDriver, RequestHandle, RequestRejected
from playground.server.metrics import register_metrics
from playground.server.openai_protocol import (
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
    served_model_names,
    unauthorized,
    validation_error,
)
from playground.server.openapi import (
    HEALTH_RESPONSES,
    ROUTE_DOCS,
    Health,
    ModelCard,
    ModelList,
    document_limits,
    error_responses,
)
from playground.server.outbox import outputs

log = logging.getLogger(__name__)

OWNER_PREFIX = "api:"  # + a hash of the client's address: the board's label, the limits' key
HEARTBEAT_S = 0.5  # a waiting non-streamed request checks for a gone client this often
HTTP_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "QUERY")
KEEPALIVE_S = 2.0  # a stream that waits (a paused board, a long queue) sends a comment this often
START_TIME = time.time()  # the "created" of /v1/models
COMPLETIONS_MAX_TOKENS = 16  # OpenAI's default; chat's default is the rest of the context
DriverSource = EngineDriver | Callable[[], EngineDriver | None]


# -- routes
def register_api(
    app: FastAPI,
    driver: DriverSource,
    model_name: str | Sequence[str] | None = None,
    metrics: bool = True,
    api_keys: Sequence[str] = (),
    stream_interval: int = 1,
) -> None:
    """Add the /v1 routes, GET /health (and GET /metrics) to `app`; call before mounting
    Gradio at "/".

    `driver` is the EngineDriver, or a callable returning it (None while there is none yet,
    for an app that loads the model after it listens; app.py loads first). The routes answer
    503 while there is no driver or it is not running. `model_name` is the served name, or
    several (vLLM's --served-model-name: the first is the one answered with, the others are
    accepted); by default the loaded model's short name, its hub id accepted too. With
    `api_keys`, every /v1 route wants `Authorization: Bearer <one of them>` (401 otherwise).
    `stream_interval` is vLLM's `--stream-interval`: a streamed chunk waits for that many new
    tokens (the first and the last go at once); a request's own `stream_interval` may raise it.
    """
    if isinstance(stream_interval, bool) or not isinstance(stream_interval, int):
        raise TypeError(f"stream_interval must be an int, got {stream_interval!r}")
    if stream_interval < 1:
        raise ValueError(f"stream_interval must be >= 1, got {stream_interval}")
    get_driver = driver if callable(driver) else (lambda: driver)
    given = (model_name,) if isinstance(model_name, str) else tuple(model_name or ())
    guard = [Depends(bearer_auth(api_keys))] if api_keys else []
    app.add_exception_handler(APIError, lambda request, exc: exc.response())

    def ready() -> EngineDriver:
        d = get_driver()
        if d is None or not d.is_alive:
            raise not_ready()
        return d

    def names(d: EngineDriver) -> tuple[str, ...]:
        return tuple(dict.fromkeys((*(given or served_model_names(d.model)), "default")))

    def check_model(d: EngineDriver, asked: str | None) -> str:
        served = names(d)
        if asked is not None and asked not in served:
            message = f"The model `{asked}` does not exist; this server serves `{served[0]}`"
            raise APIError(404, message, param="model", code="model_not_found")
        return served[0]

    @app.get("/health", responses=HEALTH_RESPONSES, tags=["health"])
    def health() -> Health:
        """200 while the engine serves, 503 once its driver has stopped (vLLM's and
        llama.cpp's probe)."""
        ready()
        return Health(status="ok")

    @app.get("/v1/models", dependencies=guard, responses=error_responses(401, 503))
    def list_models() -> ModelList:
        d = ready()
        card = ModelCard(
            id=names(d)[0], created=int(START_TIME), max_model_len=d.config.max_model_len
        )
        return ModelList(data=[card])

    @app.post("/v1/chat/completions", dependencies=guard, **ROUTE_DOCS[ChatCompletionRequest])
    async def chat_completions(request: Request):
        return await _serve(request, ChatCompletionRequest, ready, check_model, stream_interval)

    @app.post("/v1/completions", dependencies=guard, **ROUTE_DOCS[CompletionRequest])
    async def completions(request: Request):
        return await _serve(request, CompletionRequest, ready, check_model, stream_interval)

    def describe():
        d = get_driver()
        return None if d is None else (d.limits, len(d.tokenizer), d.config.scheduling_policy)

    document_limits(app, describe)
    if metrics:
        register_metrics(app, get_driver, lambda d: names(d)[0])


def refuse_other_methods(app: FastAPI) -> None:
    """405 (with `Allow`) for a method a route of `app` does not take; call once all routes are
    added. (Without it such a request falls through to the board mounted at "/": 404.)"""
    allowed: dict[str, set[str]] = {}
    for route in app.routes:
        if isinstance(route, APIRoute):
            allowed.setdefault(route.path, set()).update(route.methods)
    for path, methods in allowed.items():
        allow = ", ".join(sorted(methods))

        def refuse(request: Request, allow=allow) -> JSONResponse:
            message = f"{request.method} is not allowed here; this route takes {allow}"
            response = APIError(405, message, code="method_not_allowed").response()
            response.headers["Allow"] = allow
            return response

        others = sorted(set(HTTP_METHODS) - methods)
        app.add_api_route(path, refuse, methods=others, include_in_schema=False)


def bearer_auth(api_keys: Sequence[str]):
    """The dependency that checks `Authorization: Bearer <key>` (vLLM's --api-key)."""
    keys = [k.encode() for k in api_keys]
    scheme = HTTPBearer(auto_error=False, description="--api-key / $VLLM_API_KEY")

    def check(credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(scheme)]):
        given = credentials.credentials.encode() if credentials else b""
        if not any(hmac.compare_digest(given, k) for k in keys):
            raise unauthorized(credentials is not None)

    return check


async def _serve(request: Request, body_cls, ready, check_model, stream_interval: int):
    try:
        d = ready()
        body = await _parse(request, body_cls)
        model = check_model(d, body.model)
        try:
            job = await asyncio.to_thread(_prepare, d, body, model)
            handle = await _submit(d, job, client_owner(request))
        except RequestRejected as exc:
            raise _refusal(exc, body, d.config.max_waiting) from None
    except APIError as exc:
        return exc.response()
    except Exception as exc:  # a bug, not the client's fault: still answer in OpenAI's shape
        log.exception("API request failed")
        return APIError(500, f"{type(exc).__name__}: {exc}", type="server_error").response()
    tracker = ResponseTracker(job, lambda ids: d.tokenizer.decode(ids, skip_special_tokens=True))
    if body.stream:

        def close():  # however the response ends: a client gone mid-stream aborts
            if not tracker.finished:
                d.abort(job.request_id)

        every = max(stream_interval, body.stream_interval or 1)
        return _EventStream(_stream(d, handle, tracker, every), on_close=close)
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
        if data.get(name) is not None and not any(_same(data[name], u) for u in unused):
            message = f"{name} is not supported by this engine"
            raise APIError(400, message, param=name, code="unsupported_parameter")
    try:
        body = body_cls.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc) from None
    body.check()
    return body


def _same(value, neutral) -> bool:
    """JSON equality: 0 and 0.0 are the same number, but false is not 0."""
    return value == neutral and isinstance(value, bool) == isinstance(neutral, bool)


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
    if max_tokens is None:  # the defaults, within the context and the public limit
        max_tokens = min(room if chat else COMPLETIONS_MAX_TOKENS, room, d.limits.max_tokens)
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
    fields = dict(temperature=body.temperature) | body.sampling_extensions()
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
    public.compile_grammar(d, params)  # here, off the engine's thread; add_request finds it
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
    for m in messages:
        content = m.content or ""
        if isinstance(content, list):
            content = "\n".join(p.text for p in content)
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


async def _submit(d: EngineDriver, job: CompletionJob, owner: str) -> RequestHandle:
    """Hand the request to the driver; return once it is queued in the engine. No thread
    waits for that: with a thread each, only the executor's few (six on 2 cores) got in per
    step, and a burst of 64 requests took eleven steps to be admitted."""
    handle = public.submit(d, job.prompt, job.prompt_token_ids, job.params, owner,
                           request_id=job.request_id, priority=job.priority,
                           wait=False)  # fmt: skip
    queued = False
    try:
        async with asyncio.timeout(public.SUBMIT_TIMEOUT_S):
            await asyncio.wrap_future(handle.accepted)
        queued = True
    except TimeoutError:  # the driver did not get to it in time
        raise not_ready() from None
    finally:
        if not queued:  # refused, timed out or the client gone: nobody will read it
            handle.accepted.add_done_callback(lambda f: _drop(d, f, job.request_id))
    return handle


def _drop(d: EngineDriver, accepted: Future, request_id: str) -> None:
    """A request given up on while the driver queued it after all: it must not run unread.
    (Given up on earlier, its command was cancelled and never runs.)"""
    if not accepted.cancelled() and accepted.exception() is None:
        d.abort(request_id)


async def _respond(request: Request, d: EngineDriver, handle: RequestHandle, tracker):
    next_look = time.monotonic() + HEARTBEAT_S
    async with aclosing(outputs(handle, HEARTBEAT_S, stream_interval=None)) as stream:
        async for out in stream:
            if time.monotonic() >= next_look:  # is the client still there?
                next_look = time.monotonic() + HEARTBEAT_S
                if await request.is_disconnected():
                    d.abort(handle.request_id)
                    return JSONResponse({}, status_code=499)  # nobody reads it
            if out is not None:
                tracker.update(out)
                if out.finished:
                    try:
                        return tracker.response(out)
                    except APIError as exc:  # the engine failed this request
                        return exc.response()


async def _stream(d: EngineDriver, handle: RequestHandle, tracker, stream_interval: int):
    """The server-sent events of one request, each with `stream_interval` new tokens or more
    (the first and the last aside), `data: [DONE]` last. A failure part-way sends an error
    event (OpenAI's shape) instead of the rest; the response's on_close then aborts the
    request. While no output comes for KEEPALIVE_S (a paused board: it resumes by itself
    within the driver's max_pause_s) a comment line keeps the connection alive and says why;
    SSE clients skip comments."""
    try:
        async with aclosing(outputs(handle, HEARTBEAT_S, stream_interval)) as stream:
            quiet_since = time.monotonic()
            async for out in stream:
                now = time.monotonic()
                if out is None:
                    if now - quiet_since >= KEEPALIVE_S:
                        quiet_since = now
                        yield _keepalive(d.state().paused_until, now)
                    continue
                quiet_since = now
                for chunk in tracker.chunks(out):
                    yield _event(chunk)
        if tracker.job.include_usage:
            yield _event(tracker.envelope([], usage=tracker.usage()))
    except APIError as exc:  # the engine failed this request (finish "error" in vLLM)
        yield _event(exc.body())
    except Exception as exc:  # a bug, not the client's fault: the stream still ends cleanly
        log.exception("API stream %s failed", handle.request_id)
        error = APIError(500, f"{type(exc).__name__}: {exc}", type="server_error")
        yield _event(error.body())
    yield "data: [DONE]\n\n"


def _event(obj: dict) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"  # a tenth of json.dumps's time a chunk


def _keepalive(paused_until: float | None, now: float) -> str:
    if paused_until is None:
        return ": waiting for the engine\n\n"
    return f": the board is paused; it resumes by itself within {paused_until - now:.0f} s\n\n"


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
