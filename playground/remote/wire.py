"""The OpenAI-compatible wire format the remote lane speaks: request bodies from
SamplingParams, and finish reasons to the engine's stop reasons.

Only fields a plain OpenAI server knows are sent, plus vLLM's extensions (`top_k`, `min_p`,
`repetition_penalty`, `ignore_eos`, `stop_token_ids`) when they differ from their neutral
value, so the same request works against vLLM, this project's own API and other servers.
"""

import json

from engine import SamplingParams, StopReason

CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"
EXTENSIONS = {  # SamplingParams field -> its neutral value: sent only when it differs
    "top_k": 0, "min_p": 0.0, "repetition_penalty": 1.0, "ignore_eos": False,
}  # fmt: skip


def route(prompt) -> str:
    """Chat messages go to the chat route; text and token ids to completions."""
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], dict):
        return CHAT
    return COMPLETIONS


def request_body(model: str, prompt, params: SamplingParams) -> dict:
    """ValueError (naming the field) for what a remote lane cannot send."""
    if params.n != 1:
        raise ValueError("n: a remote server lane streams one completion per request (n=1)")
    if not prompt:
        raise ValueError("prompt: empty")
    body = {
        "model": model,
        "max_tokens": params.max_tokens,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    body["messages" if route(prompt) == CHAT else "prompt"] = prompt
    if params.seed is not None:
        body["seed"] = params.seed
    if params.stop:
        body["stop"] = list(params.stop)
    if params.stop_token_ids:
        body["stop_token_ids"] = list(params.stop_token_ids)
    for name, neutral in EXTENSIONS.items():
        if getattr(params, name) != neutral:
            body[name] = getattr(params, name)
    return body


def chunk_text(chunk: dict) -> tuple[str, str | None, object]:
    """(text, finish_reason, vLLM's stop_reason) of a streamed chunk's first choice."""
    choices = chunk.get("choices") or []
    if not choices:
        return "", None, None
    choice = choices[0]
    delta = choice.get("delta")
    text = (delta.get("content") or "") if isinstance(delta, dict) else (choice.get("text") or "")
    return text, choice.get("finish_reason"), choice.get("stop_reason")


def stop_reason(finish_reason: str, matched, params: SamplingParams, num_tokens: int):
    """The engine's StopReason for a server's finish_reason. `matched` is vLLM's
    `stop_reason`: the stop string (or token id) that ended the answer, None for EOS."""
    if finish_reason == "stop":
        if isinstance(matched, str) or (matched is not None and matched in params.stop_token_ids):
            return StopReason.STOP_WORD
        return StopReason.EOS
    if finish_reason == "length":
        return StopReason.MAX_TOKENS if num_tokens >= params.max_tokens else StopReason.LENGTH
    if finish_reason in ("abort", "cancelled"):
        return StopReason.CANCELLED
    if finish_reason == "timeout":
        return StopReason.TIMEOUT
    if finish_reason == "error":
        return StopReason.ERROR
    return StopReason.EOS  # e.g. vLLM's "repetition": the server chose to stop


def error_message(status: int, body: bytes) -> str:
    """`HTTP 400: <the server's message>` from an OpenAI-shaped (or any) error body."""
    text = body.decode("utf-8", "replace").strip()
    try:
        err = json.loads(text).get("error", {})
        message = err.get("message") if isinstance(err, dict) else str(err)
    except (ValueError, AttributeError):
        message = None
    return f"HTTP {status}: {(message or text or 'no message')[:300]}"
