"""The OpenAI wire format: request bodies and error shapes (responses.py: the response objects).

playground/server/api.py serves it over HTTP; this file knows the protocol, not the driver.
"""

from typing import Annotated, Literal

from fastapi.responses import JSONResponse
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from engine import StopReason
from engine.sampling_params import (
    MAX_BEAM_WIDTH,
    MAX_N,
    MAX_PENALTY,
    MAX_STOP_STRING_LEN,
    MAX_STOP_STRINGS,
)
from playground.server.output_format import (
    ResponseFormat,
    StructuredOutputsBody,
    output_format_error,
    structured_outputs_spec,
)

FINISH_REASONS = {  # engine StopReason -> finish_reason: OpenAI's values, and vLLM's "abort"
    StopReason.EOS: "stop",
    StopReason.STOP_WORD: "stop",
    StopReason.MAX_TOKENS: "length",
    StopReason.LENGTH: "length",
    StopReason.CANCELLED: "abort",  # client gone, board reset, preset started
    StopReason.TIMEOUT: "abort",  # its timeout_s ran out
}  # StopReason.ERROR has none: as in vLLM, a failed request answers 500 (streamed: an error event)
MIN_LOGPROB = -9999.0
UNSUPPORTED = {  # OpenAI fields this engine cannot honour -> values that mean "not used"
    "logit_bias": ({},),
    "tools": ([],),
    "functions": ([],),
    "suffix": ("",),
    "best_of": (1,),
    "use_beam_search": (False,),  # chat: none (completions take it)
    "prompt_logprobs": (None,),  # vLLM's; the engine keeps no prompt logprobs: none but null
}
IGNORED = {  # OpenAI fields that do not change the output: accepted and not used
    "user", "metadata", "store", "service_tier", "prompt_cache_key", "safety_identifier",
    "parallel_tool_calls", "tool_choice", "modalities",
}  # fmt: skip


# -- errors
class APIError(Exception):
    """Answered as OpenAI does: {"error": {"message", "type", "param", "code"}}."""

    def __init__(self, status: int, message: str, param=None, code=None, type=None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.type = type or "invalid_request_error"

    def body(self) -> dict:
        error = {"message": self.message, "type": self.type, "param": self.param, "code": self.code}
        return {"error": error}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status)


def not_ready() -> APIError:
    message = "the engine is not serving (not started yet, or stopped); retry later"
    return APIError(503, message, code="model_not_ready", type="service_unavailable_error")


def unauthorized(key_given: bool) -> APIError:
    message = (
        "Incorrect API key provided"
        if key_given
        else ("You didn't provide an API key: send it as `Authorization: Bearer <key>`")
    )
    return APIError(401, message, code="invalid_api_key")


def queue_full(message: str) -> APIError:
    """503 with no param, as vLLM answers a full queue (its QueueOverflowError,
    vllm/exceptions.py, through create_error_response,
    vllm/entrypoints/serve/exception_handling/error_response.py): load balancers and client
    SDKs retry it, on another instance if there is one. `type` and `code` stay OpenAI's words,
    as in every error here (vLLM's are "Service Unavailable" and 503)."""
    return APIError(503, message, code="queue_full", type="service_unavailable_error")


def validation_error(exc: ValidationError) -> APIError:
    """The first problem of each field, with `param` naming the first field."""
    seen: dict[str, str] = {}
    for err in exc.errors():
        param = param_of(err["loc"])
        if param in seen:
            continue
        if err["type"] == "missing":
            seen[param] = f"{param} is required"
        else:
            seen[param] = f"{param}: {err['msg']}, got {err.get('input')!r:.80}"
    first = next(iter(seen))
    return APIError(400, "; ".join(list(seen.values())[:3]), param=first)


def param_of(loc) -> str:
    """("messages", 0, "content", "str") -> "messages[0].content" (union tags dropped)."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.isidentifier() and part not in {"str", "int", "float", "bool", "list", "dict"}:
            out += f".{part}" if out else part
    return out or "body"


# -- request bodies
StopString = Annotated[str, Field(min_length=1, max_length=MAX_STOP_STRING_LEN)]


class RequestBody(BaseModel):
    """Fields shared by both routes. A field that is neither here, nor UNSUPPORTED, nor
    IGNORED is refused by the route (400 naming it), as OpenAI refuses an unrecognized
    argument; inside messages, unknown keys are ignored. Types are strict, as the OpenAPI
    document says (`"1"` is not a number, `1` not a boolean)."""

    model_config = ConfigDict(extra="ignore", strict=True)

    model: str | None = None  # None: the served model
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    temperature: float = Field(1.0, ge=0.0, le=2.0)  # OpenAI's range and default
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=-1)  # vLLM extension; 0 or -1 = off
    min_p: float = Field(0.0, ge=0.0, le=1.0)  # vLLM extension
    repetition_penalty: float = Field(1.0, gt=0.0)  # vLLM extension
    stop: StopString | Annotated[list[StopString], Field(max_length=MAX_STOP_STRINGS)] = Field(
        default_factory=list
    )
    stop_token_ids: list[Annotated[int, Field(ge=0)]] = Field(default_factory=list)  # vLLM's
    ignore_eos: bool = False  # vLLM extension
    seed: Annotated[int, Field(ge=0, le=2**63 - 1)] | None = None
    n: int = Field(1, ge=1, le=MAX_N)
    priority: int = 0  # vLLM extension: lower runs first (the engine's policy "priority")
    stream: bool = False
    stream_options: "StreamOptions | None" = None
    # vLLM extension: new tokens per streamed chunk; raises the server's --stream-interval
    stream_interval: Annotated[int, Field(ge=1)] | None = None
    # OpenAI's penalties and output format, vLLM's sampling and structured-output extensions
    presence_penalty: float = Field(0.0, ge=-MAX_PENALTY, le=MAX_PENALTY)
    frequency_penalty: float = Field(0.0, ge=-MAX_PENALTY, le=MAX_PENALTY)
    min_tokens: int = Field(0, ge=0)
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    response_format: "ResponseFormat | None" = None
    structured_outputs: "StructuredOutputsBody | None" = None

    @model_validator(mode="before")
    @classmethod
    def _drop_nulls(cls, data):
        """An explicit null means "the default", as OpenAI treats it; and 3.0 is the integer 3,
        as JSON Schema counts it (3.5 stays a float, which an integer field refuses)."""
        if not isinstance(data, dict):
            return data
        return {k: whole_numbers(v) for k, v in data.items() if v is not None}

    @property
    def include_usage(self) -> bool:
        return bool(self.stream and self.stream_options and self.stream_options.include_usage)

    def check(self) -> None:
        """Fields that only make sense together (APIError naming the field, as OpenAI does)."""
        if self.stream_options is not None and not self.stream:
            message = "stream_options is only allowed when stream is true"
            raise APIError(400, message, param="stream_options")
        if error := output_format_error(self.response_format, self.structured_outputs):
            raise APIError(400, error[1], param=error[0])

    def sampling_extensions(self) -> dict:
        """The SamplingParams fields of the penalties, min_tokens, the text options and the
        output format (response_format or structured_outputs), in the engine's names."""
        fields = {
            name: getattr(self, name)
            for name in ("presence_penalty", "frequency_penalty", "min_tokens",
                         "skip_special_tokens", "include_stop_str_in_output")
        }  # fmt: skip
        spec = structured_outputs_spec(self.response_format, self.structured_outputs)
        return fields if spec is None else fields | {"structured_outputs": spec}


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    include_usage: bool = False


def whole_numbers(value):
    """`value` with its integer-valued floats as ints, in lists too."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return [whole_numbers(v) for v in value] if isinstance(value, list) else value


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    type: Literal["text"]  # the only part a text model reads
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None


RequestBody.model_rebuild()


# -- vLLM's fields of the chat template and echo (playground/server/request_fields.py)
class ChatTemplateFields(BaseModel):
    """vLLM's chat template options: passed to the template, as vllm serve does."""

    add_generation_prompt: bool = True
    continue_final_message: bool = False  # the last message is continued, not answered
    chat_template_kwargs: dict | None = None  # the template's own variables
    echo: bool = False  # the reply starts with the last message if it is the assistant's


class ChatCompletionRequest(ChatTemplateFields, RequestBody):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None  # newer max_tokens
    logprobs: bool = False
    top_logprobs: int = Field(0, ge=0)  # at most --max-logprobs (request_fields.py)

    def check(self) -> None:
        super().check()
        if self.top_logprobs and not self.logprobs:  # 0 asks for nothing: let it pass, as vLLM
            message = "top_logprobs is only allowed when logprobs is true"
            raise APIError(400, message, param="top_logprobs")


class CompletionRequest(RequestBody):
    prompt: str | list[int] | list[str] | list[list[int]]  # a list of several: a batch
    echo: bool = False  # vLLM's and OpenAI's: each choice's text starts with its prompt
    logprobs: Annotated[int, Field(ge=0)] | None = None  # at most --max-logprobs
    # vLLM's beam search extension: best_of (default n) beams, the n best returned
    use_beam_search: bool = False
    best_of: Annotated[int, Field(ge=1, le=MAX_BEAM_WIDTH)] | None = None
    length_penalty: float = 1.0

    def check(self) -> None:
        super().check()
        if not self.use_beam_search and self.best_of not in (None, self.n):
            message = "best_of other than n is only supported with use_beam_search"
            raise APIError(400, message, param="best_of", code="unsupported_parameter")
        if self.use_beam_search and (self.best_of or self.n) < 2:
            message = "best_of must be >= 2 with use_beam_search (the number of beams; default n)"
            raise APIError(400, message, param="best_of")

    def beam_fields(self) -> dict:
        """The SamplingParams fields of the beam search extension (temperature 0 unless
        the client set one, which beam search then refuses)."""
        if not self.use_beam_search:
            return {"length_penalty": self.length_penalty}
        fields = {"beam_width": self.best_of or self.n, "length_penalty": self.length_penalty}
        if "temperature" not in self.model_fields_set:
            fields["temperature"] = 0.0
        return fields
