"""vLLM's /tokenize and /detokenize (vllm/entrypoints/serve/tokenize/): the served model's
tokenizer over HTTP, a completion's prompt or a chat through its template."""

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request

from playground.access import public
from playground.driver import RequestRejected
from playground.server.models import ServedModel
from playground.server.openai_protocol import APIError, ChatMessage, validation_error
from playground.server.request_fields import check_template_fields, json_object, template_kwargs
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


async def tokenize(request: Request, served: ServedModel) -> TokenizeResponse:
    d = served.ready()
    data = await _json(request)
    body = _validate(TokenizeChatRequest if "messages" in data else TokenizeCompletionRequest, data)
    served.check(d, body.model)
    if isinstance(body, TokenizeChatRequest):
        check_template_fields(body)
        options = template_kwargs(body)
        try:
            ids = public.tokenize(d, chat_prompt(body.messages), options)
        except RequestRejected as exc:
            raise APIError(400, f"messages: {exc}", param="messages") from None
    else:
        ids = d.tokenizer.encode(body.prompt, add_special_tokens=body.add_special_tokens)
    strs = d.tokenizer.convert_ids_to_tokens(ids) if body.return_token_strs else None
    return TokenizeResponse(count=len(ids), max_model_len=d.config.max_model_len, tokens=ids,
                            token_strs=strs)  # fmt: skip


async def detokenize(request: Request, served: ServedModel) -> DetokenizeResponse:
    d = served.ready()
    body = _validate(DetokenizeRequest, await _json(request))
    served.check(d, body.model)
    vocab = len(d.tokenizer)
    bad = next((t for t in body.tokens if t >= vocab), None)
    if bad is not None:
        raise APIError(400, f"tokens: {bad} is not a token id of this model (< {vocab})",
                       param="tokens")  # fmt: skip
    return DetokenizeResponse(prompt=d.tokenizer.decode(body.tokens))


async def _json(request: Request) -> dict:
    data = await json_object(request)
    return {k: v for k, v in data.items() if v is not None}  # null: the default


def _validate(body_cls: type[BaseModel], data: dict):
    try:
        return body_cls.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc) from None
