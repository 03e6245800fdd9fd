"""One completion request over HTTP: parse, build the engine requests, queue them, answer.

Every request goes through the shared EngineDriver with owner "api:<client>" (a hash of the
client's address, never the address itself), so it shows on the board like a simulated user.
It comes in through the public door (playground/access/public.py), as a visitor of the board
does: the limits (prompt tokens, max_tokens, n, and on a public server requests in flight per
client) apply, 400 past a size limit, 429 past the in-flight limit, 503 past vLLM's admission
limit (--max-num-queued-reqs), `param` naming the field in the API's words. A list of prompts on
/v1/completions is a batch, as in vLLM: one engine request per prompt, one answer whose
choices are numbered prompt by prompt (prompt i's come at i * n).
"""

import asyncio
import hashlib
import logging
import time
import uuid
from concurrent.futures import Future
from contextlib import aclosing

from fastapi.responses import JSONResponse
from starlette.requests import Request

from playground.access import public
from playground.access.limits import LimitExceeded
from playground.driver import EngineDriver, RequestHandle, RequestRejected
from playground.server.choices import Choices
from playground.server.generation_config import GenerationDefaults, generation_defaults
from playground.server.models import ServedModel
from playground.server.openai_protocol import (
    APIError,
    ChatCompletionRequest,
    ChatMessage,
    RequestBody,
    not_ready,
    queue_full,
)
from playground.server.options import ServingOptions
from playground.server.outbox import outputs
from playground.server.request_fields import (
    check_max_logprobs,
    echo_text,
    parse,
    template_kwargs,
)
from playground.server.responses import CompletionJob, ResponseTracker
from playground.server.streaming import HEARTBEAT_S, EventStream, events

log = logging.getLogger(__name__)

OWNER_PREFIX = "api:"  # + a hash of the client's address: the board's label, the limits' key
COMPLETIONS_MAX_TOKENS = 16  # OpenAI's default; chat's default is the rest of the context


async def serve(request: Request, body_cls, served: ServedModel, options: ServingOptions):
    """The response to one POST of a completion route."""
    try:
        d = served.ready()
        body = await parse(request, body_cls, options.strict_request_fields)
        model = served.check(d, body.model)
        check_max_logprobs(body, options.max_logprobs)
        try:
            jobs = await asyncio.to_thread(prepare_all, d, body, model, options)
            handles = await _submit_all(d, jobs, client_owner(request))
        except RequestRejected as exc:
            raise _refusal(exc, body) from None
    except APIError as exc:
        return exc.response()
    except Exception as exc:  # a bug, not the client's fault: still answer in OpenAI's shape
        log.exception("API request failed")
        return APIError(500, f"{type(exc).__name__}: {exc}", type="server_error").response()
    decode = lambda ids: d.tokenizer.decode(ids, skip_special_tokens=True)  # noqa: E731
    trackers = [ResponseTracker(job, decode) for job in jobs]
    echoes = [echo_text(body, job.prompt, decode) for job in jobs]
    choices = Choices(_response_id(jobs), trackers, echoes)
    if body.stream:

        def close():  # however the response ends: a client gone mid-stream aborts
            for t in trackers:
                if not t.finished:
                    d.abort(t.job.request_id)

        every = max(options.stream_interval, body.stream_interval or 1)
        stream = events(d, handles, choices, every, options.sse_keep_alive_interval)
        return EventStream(stream, on_close=close)
    return await _respond(request, d, handles, choices)


def prepare_all(d: EngineDriver, body: RequestBody, model: str,
                options: ServingOptions) -> list[CompletionJob]:  # fmt: skip
    """The engine requests of one body: one, or one per prompt of a batch."""
    defaults = generation_defaults(options.generation_config, d.model, d.tokenizer)
    if isinstance(body, ChatCompletionRequest):
        prompt, rid = chat_prompt(body.messages), _request_id("chatcmpl")
        return [_prepare(d, body, model, prompt, rid, defaults, template_kwargs(body))]
    prompts, base = _completion_prompts(body.prompt), _request_id("cmpl")
    ids = [base] if len(prompts) == 1 else [f"{base}-{i}" for i in range(len(prompts))]
    return [_prepare(d, body, model, p, rid, defaults) for p, rid in zip(prompts, ids, strict=True)]


def _request_id(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex[:10]}"  # OpenAI's style


def _response_id(jobs: list[CompletionJob]) -> str:
    """A batch answers with one id (its requests' ids are it plus "-<prompt index>")."""
    rid = jobs[0].request_id
    return rid if len(jobs) == 1 else rid.rsplit("-", 1)[0]


def _prepare(d: EngineDriver, body: RequestBody, model: str, prompt, request_id: str,
             defaults: GenerationDefaults, chat_template_kwargs: dict | None = None,
             ) -> CompletionJob:  # fmt: skip
    """Build the prompt and SamplingParams (the generation config's `defaults` for the fields
    the body leaves out); RequestRejected naming the field when they are bad, APIError for the
    context window."""
    chat = isinstance(body, ChatCompletionRequest)
    token_ids = public.tokenize(d, prompt, chat_template_kwargs)
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
        default = (defaults.max_tokens or room) if chat else COMPLETIONS_MAX_TOKENS
        max_tokens = min(default, room, d.limits.max_tokens)
    if max_tokens > room:
        max_param = _param("max_tokens", body)
        message = (
            f"{max_param} is {max_tokens}, but the prompt has {len(token_ids)} tokens and the "
            f"context is {max_model_len}: at most {room} can be generated"
        )
        raise APIError(400, message, param=max_param, code=too_long)
    top = (body.top_logprobs if body.logprobs else None) if chat else body.logprobs
    fields = body.sampling_extensions() | defaults.sampling_fields(body)
    fields["top_k"] = max(fields["top_k"], 0)  # -1 is off too
    if not chat:
        fields |= body.beam_fields()
    params = public.sampling_params(
        max_tokens=defaults.cap(max_tokens),
        stop=body.stop,
        stop_token_ids=defaults.stop_ids(body),
        ignore_eos=body.ignore_eos,
        n=body.n,
        seed=body.seed,
        logprobs=top,
        **fields,
    )
    public.compile_grammar(d, params)  # here, off the engine's thread; add_request finds it
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


def _refusal(exc: RequestRejected, body: RequestBody) -> APIError:
    """A refusal of the public door in OpenAI's shape, `param` in the API's words."""
    if exc.code == "queue_full":  # vLLM's admission limit, or the engine's --max-waiting
        return queue_full(str(exc))
    param = _param(exc.field, body)
    if isinstance(exc, LimitExceeded):
        kind = "rate_limit_error" if exc.status == 429 else None
        message = f"{param}: {exc.message}"
        return APIError(exc.status, message, param=param, code="limit_exceeded", type=kind)
    message = str(exc) if param == exc.field else f"{param}: {exc}"  # the API's name first
    return APIError(exc.status, message, param=param)


def chat_prompt(messages: list[ChatMessage]) -> list[dict]:
    out = []
    for m in messages:
        content = m.content or ""
        if isinstance(content, list):
            content = "\n".join(p.text for p in content)
        out.append({"role": "system" if m.role == "developer" else m.role, "content": content})
    return out


def _completion_prompts(prompt) -> list:
    """A completion's prompts: a text or token ids is one; a list of texts or of token id
    lists is a batch."""
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str | list):
        return list(prompt)
    return [prompt]


def client_owner(request: Request) -> str:
    """The board's owner of a client's requests: a short hash of its address."""
    host = request.client.host if request.client else "unknown"
    return OWNER_PREFIX + hashlib.sha256(host.encode()).hexdigest()[:6]


async def _submit_all(d: EngineDriver, jobs: list[CompletionJob], owner: str):
    """Queue every request of a batch; if one is refused, the others are aborted."""
    handles: list[RequestHandle] = []
    try:
        for job in jobs:
            handles.append(await _submit(d, job, owner))
    except BaseException:
        for h in handles:
            d.abort(h.request_id)
        raise
    return handles


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


async def _respond(request: Request, d: EngineDriver, handles: list[RequestHandle], choices):
    """The non-streamed answer: every request's last output, as one response."""
    pairs = zip(handles, choices.trackers, strict=True)
    lasts = await asyncio.gather(*(_last_output(request, d, h, t) for h, t in pairs))
    if any(out is None for out in lasts):  # the client went away: nobody reads it
        for h in handles:
            d.abort(h.request_id)
        return JSONResponse({}, status_code=499)
    try:
        return choices.response(lasts)
    except APIError as exc:  # the engine failed a request
        return exc.response()


async def _last_output(request: Request, d: EngineDriver, handle: RequestHandle, tracker):
    """A request's last output (tracked); None if the client went away first."""
    next_look = time.monotonic() + HEARTBEAT_S
    async with aclosing(outputs(handle, HEARTBEAT_S, stream_interval=None)) as stream:
        async for out in stream:
            if time.monotonic() >= next_look:  # is the client still there?
                next_look = time.monotonic() + HEARTBEAT_S
                if await request.is_disconnected():
                    return None
            if out is not None:
                tracker.update(out)
                if out.finished:
                    return out
