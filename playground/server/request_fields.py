"""Which request fields the routes take, and vLLM's fields that need no engine work.

- A field the route does not know is ignored, with one log line naming it, as vLLM's
  OpenAIBaseModel does (vllm/entrypoints/serve/engine/protocol.py); with
  `strict_request_fields` it is refused (400 naming it), as OpenAI refuses it. A field the
  engine cannot honour (UNSUPPORTED) is refused unless it has its neutral value.
- `n > 1` with greedy sampling is refused, as vLLM's SamplingParams refuses it
  (`_verify_greedy_sampling`, vllm/sampling_params.py); beam search aside.
- The chat template's options (add_generation_prompt, continue_final_message,
  chat_template_kwargs) go to the template, as vLLM's ChatParams passes them.
- `echo`: completions start with their prompt; a chat reply with the last message when it is
  the assistant's (vLLM's serving_chat).
"""

import json
import logging

from pydantic import ValidationError
from starlette.requests import Request

from playground.server.openai_protocol import (
    IGNORED,
    UNSUPPORTED,
    APIError,
    ChatCompletionRequest,
    RequestBody,
    validation_error,
)

log = logging.getLogger(__name__)

GREEDY_TEMPERATURE = 1e-5  # vLLM's _SAMPLING_EPS: below it, sampling is greedy
TEMPLATE_OWN_ARGS = frozenset({  # apply_chat_template's own arguments: not template variables
    "conversation", "messages", "tools", "documents", "chat_template", "tokenize", "padding",
    "truncation", "max_length", "return_tensors", "return_dict", "return_assistant_tokens_mask",
    "tokenizer_kwargs", "add_generation_prompt", "continue_final_message",
})  # fmt: skip


async def json_object(request: Request) -> dict:
    """The body as a JSON object; APIError 400 otherwise."""
    try:
        data = json.loads(await request.body())
    except ValueError as exc:
        raise APIError(400, f"the body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise APIError(400, "the body must be a JSON object")
    return data


def unknown_fields(request: Request, data: dict, known, strict: bool) -> list[str]:
    """The body's fields that are not `known` (logged: they are ignored, as vLLM ignores
    them); with `strict`, APIError 400 naming the first, as OpenAI refuses it."""
    unknown = sorted(set(data) - set(known))
    if unknown and strict:
        message = f"{unknown[0]}: unrecognized request argument"
        raise APIError(400, message, param=unknown[0], code="unknown_parameter")
    if unknown:
        log.info("%s: ignored the request fields it does not know: %s", request.url.path, unknown)
    return unknown


async def parse(request: Request, body_cls: type[RequestBody], strict: bool) -> RequestBody:
    """The validated body; APIError 400 naming the field."""
    data = await json_object(request)
    known = {*body_cls.model_fields, *UNSUPPORTED, *IGNORED}
    unknown = unknown_fields(request, data, known, strict)
    for name, unused in UNSUPPORTED.items():
        if name in body_cls.model_fields:  # this route supports it (best_of: completions)
            continue
        if data.get(name) is not None and not any(_same(data[name], u) for u in unused):
            message = f"{name} is not supported by this engine"
            raise APIError(400, message, param=name, code="unsupported_parameter")
    try:
        body = body_cls.model_validate({k: v for k, v in data.items() if k not in unknown})
    except ValidationError as exc:
        raise validation_error(exc) from None
    body.check()
    check_vllm_rules(body)
    return body


def _same(value, neutral) -> bool:
    """JSON equality: 0 and 0.0 are the same number, but false is not 0."""
    return value == neutral and isinstance(value, bool) == isinstance(neutral, bool)


def check_vllm_rules(body: RequestBody) -> None:
    """vLLM's refusals of fields that only make sense together (APIError 400 naming one)."""
    beams = getattr(body, "use_beam_search", False)
    if body.n > 1 and body.temperature < GREEDY_TEMPERATURE and not beams:
        message = f"n must be 1 when using greedy sampling, got {body.n}."
        raise APIError(400, message, param="n")
    if isinstance(body, ChatCompletionRequest):
        check_template_fields(body)
    elif body.echo and body.logprobs is not None:
        message = "echo with logprobs is not supported: this engine keeps no prompt logprobs"
        raise APIError(400, message, param="echo", code="unsupported_parameter")


def check_max_logprobs(body: RequestBody, max_logprobs: int) -> None:
    """More logprobs per token than --max-logprobs: 400 in vLLM's words, `param` `logprobs`
    on both routes (SamplingParams._validate_logprobs, vllm/sampling_params.py, and how
    VLLMValidationError reads, vllm/exceptions.py); prompt_logprobs are refused as
    unsupported before this."""
    chat = isinstance(body, ChatCompletionRequest)
    asked = (body.top_logprobs if body.logprobs else None) if chat else body.logprobs
    if asked is not None and asked > max_logprobs:
        message = (
            f"Requested sample logprobs of {asked}, which is greater than max allowed: "
            f"{max_logprobs} (parameter=logprobs, value={asked})"
        )
        raise APIError(400, message, param="logprobs")


def check_template_fields(body) -> None:
    """A chat body's continue_final_message with add_generation_prompt asked for too: 400, as
    vLLM's check_generation_prompt (vllm/entrypoints/openai/chat_completion/protocol.py)."""
    asked = "add_generation_prompt" in body.model_fields_set and body.add_generation_prompt
    if body.continue_final_message and asked:
        message = "Cannot set both `continue_final_message` and `add_generation_prompt` to True."
        raise APIError(400, message, param="continue_final_message")


def template_kwargs(body) -> dict:
    """The chat template's options: its own variables, then vLLM's two fields (continuing the
    last message adds no generation prompt unless it was asked for, which check refuses)."""
    own = {k: v for k, v in (body.chat_template_kwargs or {}).items() if k not in TEMPLATE_OWN_ARGS}
    adds = body.add_generation_prompt and not body.continue_final_message
    return {**own, "add_generation_prompt": adds,
            "continue_final_message": body.continue_final_message}  # fmt: skip


def echo_text(body: RequestBody, prompt, decode) -> str:
    """What each choice starts with under `echo` ("" without it): a completion's prompt (its
    text, or its token ids decoded), a chat's last message if it is the assistant's."""
    if not getattr(body, "echo", False):
        return ""
    if isinstance(body, ChatCompletionRequest):
        last = prompt[-1]
        return last["content"] if last["role"] == "assistant" else ""
    return prompt if isinstance(prompt, str) else decode(prompt)
