"""playground/remote/wire.py: request bodies from SamplingParams, finish reasons."""

import pytest

from engine import SamplingParams, StopReason
from playground.remote import wire

CHAT = [{"role": "user", "content": "hi"}]


def test_a_chat_body_sends_only_what_differs_from_neutral():
    body = wire.request_body("m", CHAT, SamplingParams(max_tokens=9, temperature=0.0, seed=3))
    assert body == {
        "model": "m", "messages": CHAT, "max_tokens": 9, "temperature": 0.0, "top_p": 1.0,
        "seed": 3, "stream": True, "stream_options": {"include_usage": True},
    }  # fmt: skip
    assert wire.route(CHAT) == wire.CHAT


def test_text_and_token_ids_go_to_completions_with_vllm_extensions():
    params = SamplingParams(top_k=5, ignore_eos=True, stop=["\n"], stop_token_ids=[7])
    body = wire.request_body("m", [1, 2, 3], params)
    assert wire.route([1, 2, 3]) == wire.route("text") == wire.COMPLETIONS
    assert body["prompt"] == [1, 2, 3] and "messages" not in body
    assert (body["top_k"], body["ignore_eos"], body["stop"], body["stop_token_ids"]) == (
        5, True, ["\n"], [7],
    )  # fmt: skip
    assert "min_p" not in body and "repetition_penalty" not in body


@pytest.mark.parametrize(("params", "prompt", "field"), [
    (SamplingParams(n=2), CHAT, "n"), (SamplingParams(), "", "prompt"),
])  # fmt: skip
def test_what_a_remote_lane_cannot_send_names_its_field(params, prompt, field):
    with pytest.raises(ValueError, match=f"^{field}:"):
        wire.request_body("m", prompt, params)


@pytest.mark.parametrize(("finish", "matched", "tokens", "reason"), [
    ("stop", None, 3, StopReason.EOS),
    ("stop", "\n", 3, StopReason.STOP_WORD),
    ("stop", 7, 3, StopReason.STOP_WORD),  # one of the request's stop_token_ids
    ("stop", 2, 3, StopReason.EOS),  # the EOS token id
    ("length", None, 16, StopReason.MAX_TOKENS),
    ("length", None, 5, StopReason.LENGTH),  # short of max_tokens: the context was full
    ("abort", None, 1, StopReason.CANCELLED),
    ("cancelled", None, 1, StopReason.CANCELLED),
    ("timeout", None, 1, StopReason.TIMEOUT),
    ("error", None, 1, StopReason.ERROR),
])  # fmt: skip
def test_finish_reasons_become_stop_reasons(finish, matched, tokens, reason):
    params = SamplingParams(max_tokens=16, stop=["\n"], stop_token_ids=[7])
    assert wire.stop_reason(finish, matched, params, tokens) is reason


def test_chunks_of_both_routes():
    chat = {"choices": [{"delta": {"content": "Hel"}, "finish_reason": None}]}
    text = {"choices": [{"text": "lo", "finish_reason": "stop", "stop_reason": "!"}]}
    assert wire.chunk_text(chat) == ("Hel", None, None)
    assert wire.chunk_text(text) == ("lo", "stop", "!")
    assert wire.chunk_text({"choices": [], "usage": {"completion_tokens": 2}}) == ("", None, None)


def test_error_messages_read_openais_shape_and_anything_else():
    body = b'{"error": {"message": "max_tokens: too many", "type": "invalid_request_error"}}'
    assert wire.error_message(400, body) == "HTTP 400: max_tokens: too many"
    assert wire.error_message(502, b"Bad gateway") == "HTTP 502: Bad gateway"
    assert wire.error_message(500, b"") == "HTTP 500: no message"
