"""vLLM's /tokenize and /detokenize (vllm/entrypoints/serve/tokenize/): the served model's
tokenizer over HTTP, a completion's prompt or a chat through its template.

The routes parse their bodies themselves (OpenAI's 400s; an unknown field ignored, or refused
with --strict-request-fields, as on the completion routes); `BODIES` declares them in the
OpenAPI document (openapi.py's document_bodies), which the schema fuzzer checks.
"""

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request

from playground.access import public
from playground.driver import RequestRejected
from playground.server.models import ServedModel
from playground.server.openai_protocol import (
    APIError,
    ChatMessage,
    validation_error,
    whole_numbers,
)
from playground.server.openapi import (
    SOME_TEXT,
    TEMPLATE_RULE,
    ServerFacts,
    allow_nulls,
    inline_refs,
)
from playground.server.request_fields import (
    check_template_fields,
    json_object,
    template_kwargs,
    unknown_fields,
)
from playground.server.serving import chat_prompt


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    model: str | None = None


class TokenizeCompletionRequest(_Body):
    prompt: str
    add_special_tokens: bool = True  # e.g. BOS, as the tokenizer adds them
    return_token_strs: bool = False


class TokenizeChatRequest(_Body):
    messages: list[ChatMessage] = Field(min_length=1)
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    chat_template_kwargs: dict | None = None
    return_token_strs: bool = False


class TokenizeResponse(BaseModel):
    count: int
    max_model_len: int
    tokens: list[int]
    token_strs: list[str] | None = None


class DetokenizeRequest(_Body):
    tokens: list[Annotated[int, Field(ge=0, le=2**63 - 1)]]


class DetokenizeResponse(BaseModel):
    prompt: str


async def tokenize(request: Request, served: ServedModel, strict: bool) -> TokenizeResponse:
    d = served.ready()
    data = await json_object(request)
    chat = data.get("messages") is not None  # with messages, a chat: its prompt is not read
    body = _validate(request, TokenizeChatRequest if chat else TokenizeCompletionRequest, data,
                     strict)  # fmt: skip
    served.check(d, body.model)
    if isinstance(body, TokenizeChatRequest):
        check_template_fields(body)
        options = template_kwargs(body)
        try:
            ids = public.tokenize(d, chat_prompt(body.messages), options)
        except RequestRejected as exc:
            raise APIError(400, f"messages: {exc}", param="messages") from None
    else:
        _check_text(body.prompt)
        ids = d.tokenizer.encode(body.prompt, add_special_tokens=body.add_special_tokens)
    strs = d.tokenizer.convert_ids_to_tokens(ids) if body.return_token_strs else None
    return TokenizeResponse(count=len(ids), max_model_len=d.config.max_model_len, tokens=ids,
                            token_strs=strs)  # fmt: skip


async def detokenize(request: Request, served: ServedModel, strict: bool) -> DetokenizeResponse:
    d = served.ready()
    body = _validate(request, DetokenizeRequest, await json_object(request), strict)
    served.check(d, body.model)
    vocab = len(d.tokenizer)
    bad = next((t for t in body.tokens if t >= vocab), None)
    if bad is not None:
        raise APIError(400, f"tokens: {bad} is not a token id of this model (< {vocab})",
                       param="tokens")  # fmt: skip
    return DetokenizeResponse(prompt=d.tokenizer.decode(body.tokens))


def _validate(request: Request, body_cls: type[BaseModel], data: dict, strict: bool):
    """The body as `body_cls` (null: the default; 3.0 is the integer 3, as JSON Schema counts
    it); APIError 400 naming the field."""
    unknown = unknown_fields(request, data, body_cls.model_fields, strict)
    try:
        return body_cls.model_validate(
            {k: whole_numbers(v) for k, v in data.items() if v is not None and k not in unknown}
        )
    except ValidationError as exc:
        raise validation_error(exc) from None


def _check_text(prompt: str) -> None:
    """A prompt the tokenizer can read: lone surrogates (JSON escapes such as \\ud800) are
    not text."""
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError as exc:
        message = f"prompt is not valid Unicode text: {exc.reason} at character {exc.start}"
        raise APIError(400, message, param="prompt") from None


def _body_schema(body_cls: type[BaseModel], facts: ServerFacts) -> dict:
    """A body's JSON schema as the route takes it: null for any optional field, unknown fields
    ignored (refused with strict_request_fields)."""
    schema = inline_refs(body_cls.model_json_schema())
    allow_nulls(schema["properties"], set(schema.get("required", ())))
    schema["additionalProperties"] = not facts.options.strict_request_fields
    return schema


def tokenize_schema(facts: ServerFacts) -> dict:
    """/tokenize: a prompt, or chat messages (some with text) that the template takes."""
    text = _body_schema(TokenizeCompletionRequest, facts)
    text["properties"]["messages"] = {"type": "null"}  # a body with messages is a chat
    chat = _body_schema(TokenizeChatRequest, facts)
    chat["properties"]["messages"]["contains"] = SOME_TEXT
    chat["allOf"] = [TEMPLATE_RULE]
    return {"anyOf": [text, chat]}


def detokenize_schema(facts: ServerFacts) -> dict:
    """/detokenize: token ids of this model's vocabulary."""
    schema = _body_schema(DetokenizeRequest, facts)
    if facts.vocab is not None:
        schema["properties"]["tokens"]["items"]["maximum"] = facts.vocab - 1
    return schema


BODIES = {"/tokenize": tokenize_schema, "/detokenize": detokenize_schema}
