"""The API's OpenAPI description: request bodies, responses, errors, /metrics' text.

The routes parse their bodies themselves (playground/server/request_fields.py: OpenAI's
400s, an unknown field ignored as vLLM ignores it), so FastAPI cannot infer them; this file
declares them. The request schemas come from the request models
(playground/server/openai_protocol.py) and say exactly what the server takes: the server's
own public limits (max_tokens, n, token ids), the OpenAI fields it accepts only at their
neutral values, null for "the default", vLLM's refusals across fields, and other fields
ignored (refused with strict_request_fields). A schema-based fuzzer
(`make test-api-fuzz`) checks that the server and this description agree.
"""

from dataclasses import dataclass
from typing import Literal

from fastapi import FastAPI
from pydantic import BaseModel, Field

from engine.sampling_params import MAX_BEAM_WIDTH
from playground.access.limits import PublicLimits
from playground.server.openai_protocol import (
    FINISH_REASONS,
    IGNORED,
    UNSUPPORTED,
    ChatCompletionRequest,
    CompletionRequest,
)
from playground.server.options import ServingOptions

FINISH = Literal[tuple(sorted(set(FINISH_REASONS.values())))]
ENGINE_STOP = Literal[tuple(sorted(r.value for r in FINISH_REASONS))]


# -- response objects (what the server sends; the wire code is in openai_protocol.py)
class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorResponse(BaseModel):
    error: ErrorDetail


class Health(BaseModel):
    status: Literal["ok"]
    step: int = Field(description="the engine's step count")
    waiting: int
    running: int
    generated_tokens: int
    tokens_per_s: float = Field(description="generated tokens per second of engine busy time")


class Version(BaseModel):
    version: str = Field(description="the vLLM release whose API this server follows")
    server: Literal["cb-playground"] = "cb-playground"


class ModelPermission(BaseModel):
    """vLLM's (vllm/entrypoints/serve/engine/protocol.py), with its values."""

    id: str
    object: Literal["model_permission"] = "model_permission"
    created: int
    allow_create_engine: bool = False
    allow_sampling: bool = True
    allow_logprobs: bool = True
    allow_search_indices: bool = False
    allow_view: bool = True
    allow_fine_tuning: bool = False
    organization: str = "*"
    group: str | None = None
    is_blocking: bool = False


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "cb-playground"
    root: str | None = Field(description="the model it was loaded from (a hub id or a path)")
    parent: str | None = Field(None, description="null: the base model, not an adapter")
    max_model_len: int
    permission: list[ModelPermission]


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: dict[str, int]


class _Choice(BaseModel):
    index: int
    logprobs: dict | None
    finish_reason: FINISH
    stop_reason: int | str | None = Field(
        description="vLLM's: the stop string or stop token id that ended the choice, else null"
    )
    engine_stop_reason: ENGINE_STOP = Field(description="the engine's own StopReason")


class AssistantMessage(BaseModel):
    role: Literal["assistant"]
    content: str


class ChatChoice(_Choice):
    message: AssistantMessage


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


class CompletionChoice(_Choice):
    text: str


class Completion(BaseModel):
    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage


# -- route declarations
ERRORS = {
    400: "a missing or bad field, an unsupported one (or an unknown one with "
    "--strict-request-fields), past a public limit or the context window (`param` names it)",
    401: "--api-key is set and the request has no `Authorization: Bearer <key>` or a wrong one",
    404: "`model` is not the served model",
    429: "too many unfinished requests from this client (a public server's limit)",
    503: "the engine is not serving (its driver is not started or has stopped), or the "
    "queue is full (--max-num-queued-reqs, as vLLM answers it: retry, here or elsewhere)",
}
STREAM = "with `stream: true`: server-sent events, `data: <chunk JSON>` each, `data: [DONE]` last"


def error_responses(*codes: int) -> dict:
    """FastAPI `responses` for these error statuses, in OpenAI's error shape."""
    return {c: {"model": ErrorResponse, "description": ERRORS[c]} for c in codes}


SSE_EVENT = {  # one server-sent event; `: keep-alive` comments are not events
    "type": "object",
    "required": ["data"],
    "properties": {"data": {"type": "string", "description": "a chunk's JSON, or [DONE]"}},
}


def _route(response: type[BaseModel]) -> dict:
    ok = {"model": response, "content": {"text/event-stream": {"schema": SSE_EVENT}}}
    return {"responses": {200: {**ok, "description": STREAM}, **error_responses(*ERRORS)}}


ROUTE_DOCS = {ChatCompletionRequest: _route(ChatCompletion), CompletionRequest: _route(Completion)}
HEALTH_RESPONSES = error_responses(503)
BODIES = {  # the completion routes' bodies, for document_bodies
    "/v1/chat/completions": lambda facts: request_schema(ChatCompletionRequest, facts),
    "/v1/completions": lambda facts: request_schema(CompletionRequest, facts),
}


@dataclass(frozen=True, slots=True)
class ServerFacts:
    """What the document says of this server: its public limits, the vocabulary's size (None:
    no engine yet), EngineConfig.scheduling_policy ("fcfs" takes priority 0 only) and its
    ServingOptions (strict_request_fields: unknown fields refused; max_logprobs)."""

    limits: PublicLimits = PublicLimits()
    vocab: int | None = None
    policy: str = "fcfs"
    options: ServingOptions = ServingOptions()


def document_bodies(app: FastAPI, describe, bodies: dict) -> None:
    """Declare the request bodies in `app`'s OpenAPI document, with the limits of the server:
    `bodies` maps a POST route's path to the function that builds its body's schema from
    ServerFacts, which `describe()` returns (None while there is no engine: the defaults)."""
    build = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is None:
            spec = build()
            facts = describe() or ServerFacts()
            for path, schema_of in bodies.items():
                content = {"application/json": {"schema": schema_of(facts)}}
                spec["paths"][path]["post"]["requestBody"] = {"required": True, "content": content}
        return app.openapi_schema

    app.openapi = openapi


def request_schema(body_cls, facts: ServerFacts) -> dict:
    """The JSON schema of a completion route's body as this server takes it (see the module
    docstring)."""
    limits, vocab, options = facts.limits, facts.vocab, facts.options
    schema = inline_refs(body_cls.model_json_schema())
    props, required = schema["properties"], set(schema.get("required", ()))
    props["max_tokens"]["anyOf"][0]["maximum"] = limits.max_tokens
    if "max_completion_tokens" in props:
        props["max_completion_tokens"]["anyOf"][0]["maximum"] = limits.max_tokens
    props["n"]["maximum"] = min(props["n"]["maximum"], limits.max_n)
    if vocab is not None:
        for ids in _token_id_schemas(props):
            ids.update(minimum=0, maximum=vocab - 1)
    if facts.policy != "priority":
        props["priority"] = {"enum": [0], "description": "first come, first served: 0 only"}
    for name, neutral in UNSUPPORTED.items():  # accepted only where they change nothing
        if name not in props:
            props[name] = {"enum": list(neutral), "description": "not supported: only this value"}
    for name in IGNORED:
        props[name] = {"description": "accepted and not used"}
    allow_nulls(props, required)
    schema["additionalProperties"] = not options.strict_request_fields
    schema["allOf"] = [_only_with("stream_options", {"type": "object"}, "stream")]
    schema["allOf"].append(_greedy_takes_one(body_cls is CompletionRequest))
    props["min_tokens"]["maximum"] = limits.max_tokens  # and at most max_tokens
    if body_cls is ChatCompletionRequest:
        props["top_logprobs"]["maximum"] = options.max_logprobs
        schema["allOf"] += [_only_with("top_logprobs", {"minimum": 1}, "logprobs"),
                            NOT_GREEDY_N, TEMPLATE_RULE]  # fmt: skip
        props["messages"]["contains"] = SOME_TEXT
    else:
        _prompts(props["prompt"]["anyOf"])
        props["logprobs"]["anyOf"][0]["maximum"] = options.max_logprobs
        max_width = min(MAX_BEAM_WIDTH, limits.max_n)  # beams count against --limit-n
        props["best_of"]["anyOf"][0]["maximum"] = max_width
        schema["allOf"] += [_beam_search_rules(max_width), ECHO_RULE]
    return schema


# vLLM's refusals across fields (playground/server/request_fields.py)
NOT_GREEDY_N = {  # n > 1 wants sampling: a temperature of at least 1e-5 (vLLM's epsilon)
    "if": {"required": ["temperature"], "properties": {"temperature": {
        "type": "number", "exclusiveMaximum": 1e-5}}},
    "then": {"properties": {"n": {"enum": [1, None]}}},
}  # fmt: skip
TEMPLATE_RULE = {  # continue_final_message does not take add_generation_prompt: true
    "if": {"required": ["continue_final_message"],
           "properties": {"continue_final_message": {"const": True}}},
    "then": {"properties": {"add_generation_prompt": {"enum": [False, None]}}},
}  # fmt: skip
ECHO_RULE = {  # echo has no prompt logprobs to give
    "if": {"required": ["echo"], "properties": {"echo": {"const": True}}},
    "then": {"properties": {"logprobs": {"type": "null"}}},
}


def _beam_search_rules(max_width: int) -> dict:
    """/v1/completions' beam search (use_beam_search): best_of beams (default n, at least 2,
    at most `max_width`, n <= best_of) and the sampling fields at the values beam search
    leaves alone. Without it, best_of is n and length_penalty 1. Cross-field rules, so one
    case per beam width."""
    null = {"type": "null"}
    leave_alone = {
        "temperature": {"enum": [0, None]}, "top_p": {"enum": [1, None]},
        "top_k": {"enum": [0, -1, None]}, "min_p": {"enum": [0, None]},
        "repetition_penalty": {"enum": [1, None]}, "seed": null, "logprobs": null,
        "stop": {"anyOf": [null, {"type": "array", "maxItems": 0}]},
        "stop_token_ids": {"anyOf": [null, {"type": "array", "maxItems": 0}]},
        "min_tokens": {"enum": [0, None]}, "presence_penalty": {"enum": [0, None]},
        "frequency_penalty": {"enum": [0, None]}, "structured_outputs": null,
        "response_format": {"anyOf": [null, {"properties": {"type": {"const": "text"}}}]},
    }  # fmt: skip
    up_to = lambda k: {"anyOf": [null, {"type": "integer", "maximum": k}]}  # noqa: E731
    widths = [
        {"required": ["best_of"], "properties": {"best_of": {"const": k}, "n": up_to(k)}}
        for k in range(2, max_width + 1)
    ]
    at_least_2 = {"type": "integer", "minimum": 2}  # n: null is 1
    widths.append({"required": ["n"], "properties": {"best_of": null, "n": at_least_2}})
    as_n = [{"properties": {"best_of": null}},
            {"properties": {"best_of": {"const": 1}, "n": {"enum": [1, None]}}}]  # fmt: skip
    as_n += [
        {"required": ["n"], "properties": {"best_of": {"const": k}, "n": {"const": k}}}
        for k in range(2, max_width + 1)
    ]
    return {
        "if": {"required": ["use_beam_search"], "properties": {"use_beam_search": {"const": True}}},
        "then": {"properties": leave_alone, "anyOf": widths},
        "else": {"properties": {"length_penalty": {"enum": [1, None]}}, "anyOf": as_n},
    }


TEXT = {"type": "string", "pattern": r"\S"}  # not only whitespace
TEXT_PART = {"type": "object", "required": ["text"], "properties": {"text": TEXT}}
SOME_TEXT = {  # chat messages: some message has text to answer
    "type": "object",
    "required": ["content"],
    "properties": {"content": {"anyOf": [TEXT, {"type": "array", "contains": TEXT_PART}]}},
}


def _prompts(variants: list[dict]) -> None:
    """A completion's prompt: a text with something in it, token ids, or a batch of either."""
    for v in variants:
        if v.get("type") == "string":
            v["pattern"] = TEXT["pattern"]
            continue
        v["minItems"] = 1
        items = v["items"]
        if items.get("type") != "integer":  # a batch: ["text", ...] or [[ids], ...]
            items.update(TEXT if items.get("type") == "string" else {"minItems": 1})


def _greedy_takes_one(beams: bool) -> dict:
    """vLLM's rule: n is 1 with greedy sampling (temperature 0), beam search apart."""
    when = {"required": ["temperature"], "properties": {"temperature": {"exclusiveMaximum": 1e-5}}}
    if beams:
        when["not"] = {"required": ["use_beam_search"],
                       "properties": {"use_beam_search": {"const": True}}}  # fmt: skip
    return {"if": when, "then": {"properties": {"n": {"enum": [1, None]}}}}


def _only_with(name: str, when: dict, flag: str) -> dict:
    """`name` (matching `when`) is allowed only with `flag: true`."""
    return {
        "if": {"required": [name], "properties": {name: when}},
        "then": {"required": [flag], "properties": {flag: {"const": True}}},
    }


def _token_id_schemas(props: dict):
    """The item schemas of a completion's prompt token ids."""
    for variant in props.get("prompt", {}).get("anyOf", ()):
        items = variant.get("items", {})
        if items.get("type") == "integer":
            yield items
        elif items.get("items", {}).get("type") == "integer":
            yield items["items"]


def allow_nulls(props: dict, required) -> None:
    """Every optional property also takes null: "the default", as the routes read it."""
    for name, prop in props.items():
        if name not in required and not _allows_null(prop):
            props[name] = {"anyOf": [prop, {"type": "null"}]}


def _allows_null(prop: dict) -> bool:
    return prop.get("type") == "null" or any(_allows_null(p) for p in prop.get("anyOf", ()))


def inline_refs(schema: dict) -> dict:
    """The schema with its `$defs` references replaced by the definitions (none recurse)."""
    defs = schema.pop("$defs", {})

    def walk(node):
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if ref.startswith("#/$defs/"):
                return walk(defs[ref.removeprefix("#/$defs/")])
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return walk(schema)
