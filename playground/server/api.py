"""OpenAI-compatible routes on the playground's FastAPI app, as `vllm serve` has them.

`GET /v1/models`, `POST /v1/completions` and `POST /v1/chat/completions` (streamed as
server-sent events with `stream: true`, ending with `data: [DONE]`), vLLM's `POST /tokenize`,
`POST /detokenize` and `GET /version`, `GET /health` (503 once the driver has stopped) and
`GET /metrics` (playground/server/metrics.py). Bearer auth on /v1 with `api_keys`, the served
name and its aliases, as vLLM serves them.

One request's path (parse, limits, queue, answer) is in playground/server/serving.py, its
stream in streaming.py, the wire format in openai_protocol.py, the OpenAPI description in
openapi.py. docs/http-api.md lists the fields, error shapes and finish reasons.
"""

import hmac
from collections.abc import Callable, Sequence
from typing import Annotated

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from playground.driver import EngineDriver
from playground.server import tokenization
from playground.server.health import add_health_routes
from playground.server.metrics import register_metrics
from playground.server.models import ServedModel
from playground.server.openai_protocol import (
    APIError,
    ChatCompletionRequest,
    CompletionRequest,
    unauthorized,
)
from playground.server.openapi import (
    BODIES,
    ROUTE_DOCS,
    ModelList,
    ServerFacts,
    Version,
    document_bodies,
    error_responses,
)
from playground.server.options import ServingOptions
from playground.server.serving import serve

VLLM_API_VERSION = "0.32.0"  # the vLLM release whose routes, fields and metrics this follows
HTTP_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "QUERY")
DriverSource = EngineDriver | Callable[[], EngineDriver | None]


def register_api(
    app: FastAPI,
    driver: DriverSource,
    model_name: str | Sequence[str] | None = None,
    metrics: bool = True,
    api_keys: Sequence[str] = (),
    stream_interval: int = 1,
    sse_keep_alive_interval: float = 0.0,
    strict_request_fields: bool = False,
    generation_config: str = "auto",
    max_logprobs: int | None = None,
) -> None:
    """Add the routes (see the module docstring) to `app`; call before mounting Gradio at "/".

    `driver`: the EngineDriver, or a callable returning it (None while there is none: 503).
    `model_name`: the served name, or several (vLLM's --served-model-name: the first is the one
    answered with); by default the model's short name, its hub id accepted too. `api_keys`:
    every /v1 route wants `Authorization: Bearer <one of them>` (401 otherwise). The last five
    are ServingOptions (vLLM's --stream-interval, --sse-keep-alive-interval,
    --strict-request-fields, --generation-config and --max-logprobs)."""
    options = ServingOptions(stream_interval, sse_keep_alive_interval, strict_request_fields,
                             generation_config, max_logprobs)  # fmt: skip
    served = ServedModel.of(driver, model_name)
    guard = [Depends(bearer_auth(api_keys))] if api_keys else []
    app.add_exception_handler(APIError, lambda request, exc: exc.response())

    add_health_routes(app, served.get_driver)

    @app.get("/v1/models", dependencies=guard, responses=error_responses(401, 503))
    def list_models() -> ModelList:
        return served.cards(served.ready())

    @app.post("/v1/chat/completions", dependencies=guard, **ROUTE_DOCS[ChatCompletionRequest])
    async def chat_completions(request: Request):
        return await serve(request, ChatCompletionRequest, served, options)

    @app.post("/v1/completions", dependencies=guard, **ROUTE_DOCS[CompletionRequest])
    async def completions(request: Request):
        return await serve(request, CompletionRequest, served, options)

    @app.post("/tokenize", responses=error_responses(400, 404, 503), tags=["tokenizer"])
    async def tokenize(request: Request) -> tokenization.TokenizeResponse:
        return await tokenization.tokenize(request, served, options.strict_request_fields)

    @app.post("/detokenize", responses=error_responses(400, 404, 503), tags=["tokenizer"])
    async def detokenize(request: Request) -> tokenization.DetokenizeResponse:
        return await tokenization.detokenize(request, served, options.strict_request_fields)

    @app.get("/version", tags=["health"])
    def show_version() -> Version:
        """The vLLM release whose API this server follows (vLLM answers its own version, which
        clients compare against), and this server's name."""
        return Version(version=VLLM_API_VERSION)

    bodies = BODIES | tokenization.BODIES
    document_bodies(app, lambda: _describe(served.get_driver(), options), bodies)
    if metrics:
        register_metrics(app, served.get_driver, lambda d: served.names(d)[0])


def _describe(d: EngineDriver | None, options: ServingOptions) -> ServerFacts | None:
    if d is None:
        return None
    return ServerFacts(d.limits, len(d.tokenizer), d.config.scheduling_policy, options)


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
