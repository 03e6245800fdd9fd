"""vLLM's request fields over HTTP: response_format and structured_outputs (vLLM's
vllm/entrypoints/openai/protocol.py maps both onto StructuredOutputsParams), min_tokens,
presence / frequency penalties, skip_special_tokens, include_stop_str_in_output, and n > 1
refused with greedy sampling (vllm/sampling_params.py, _verify_greedy_sampling)."""

import json
import re

import httpx
import pytest

from playground.server.openai_protocol import ChatCompletionRequest

CHAT = [{"role": "user", "content": "Answer in JSON."}]
SCHEMA = {
    "type": "object",
    "properties": {"mood": {"enum": ["calm", "busy"]},
                   "count": {"type": "integer", "minimum": 0, "maximum": 9}},
    "required": ["mood", "count"],
}  # fmt: skip


def post(server, path, body):
    return httpx.post(server.url + path, json={"model": server.model, **body}, timeout=120)


def test_response_format_maps_onto_structured_outputs():
    """vLLM's protocol: json_schema -> structured_outputs json, json_object -> json_object."""
    fmt = {"type": "json_schema", "json_schema": {"name": "m", "schema": SCHEMA}}
    body = ChatCompletionRequest.model_validate({"messages": CHAT, "response_format": fmt})
    assert body.sampling_extensions()["structured_outputs"] == {"json": SCHEMA}
    body = ChatCompletionRequest.model_validate(
        {"messages": CHAT, "response_format": {"type": "json_object"}}
    )
    assert body.sampling_extensions()["structured_outputs"] == {"json_object": True}
    plain = ChatCompletionRequest.model_validate(
        {"messages": CHAT, "response_format": {"type": "text"}}
    )
    assert "structured_outputs" not in plain.sampling_extensions()


def test_chat_json_schema_parses_with_penalties(app_server):
    so = {"json": SCHEMA, "disable_any_whitespace": True}
    r = post(app_server, "/v1/chat/completions",
             {"messages": CHAT, "structured_outputs": so, "max_tokens": 40, "seed": 1,
              "presence_penalty": 0.5, "frequency_penalty": -0.5})  # fmt: skip
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    value = json.loads(choice["message"]["content"])
    assert value["mood"] in ("calm", "busy") and 0 <= value["count"] <= 9
    assert choice["finish_reason"] == "stop"


@pytest.mark.parametrize(
    ("so", "check"),
    [({"choice": ["red", "green"]}, lambda t: t in ("red", "green")),
     ({"regex": "[0-9]{3}"}, lambda t: re.fullmatch("[0-9]{3}", t))],
)  # fmt: skip
def test_completions_structured_outputs(app_server, so, check):
    r = post(app_server, "/v1/completions",
             {"prompt": "Pick:", "structured_outputs": so, "max_tokens": 20, "n": 2,
              "temperature": 0.9, "seed": 4})  # fmt: skip
    assert r.status_code == 200, r.text
    for choice in r.json()["choices"]:
        assert check(choice["text"]), choice["text"]


def test_stop_string_kept_when_asked_and_min_tokens_honoured(app_server):
    texts = {}
    for include in (False, True):
        r = post(app_server, "/v1/completions",
                 {"prompt": "x", "structured_outputs": {"regex": "ab{5}c"}, "stop": ["bb"],
                  "include_stop_str_in_output": include, "max_tokens": 20,
                  "min_tokens": 3, "temperature": 0})  # fmt: skip
        assert r.status_code == 200, r.text
        texts[include] = r.json()["choices"][0]["text"]
    # min_tokens=3: the "bb" inside the first 3 tokens does not count; the next one does
    assert texts[True].endswith("bb") and texts[False] == texts[True][:-2]
    assert texts[True].startswith("ab") and set(texts[True][1:]) == {"b"}


@pytest.mark.parametrize(
    ("body", "param"),
    [({"structured_outputs": {"regex": "(oops"}}, "structured_outputs.regex"),
     ({"structured_outputs": {"regex": "a", "choice": ["a"]}}, "structured_outputs"),
     ({"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
     ({"response_format": {"type": "json_object"}, "structured_outputs": {"regex": "a"}},
      "response_format"),
     ({"presence_penalty": 2.5}, "presence_penalty"),
     ({"min_tokens": 9, "max_tokens": 4}, "min_tokens"),
     ({"n": 2, "temperature": 0}, "n")],
)  # fmt: skip
def test_bad_fields_answer_400_naming_them(app_server, body, param):
    r = post(app_server, "/v1/chat/completions", {"messages": CHAT, **body})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param, r.text


def test_skip_special_tokens_false_shows_them(app_server):
    grammar = 'root ::= "<|im_start|>" [a-z]'
    r = post(app_server, "/v1/completions",
             {"prompt": "x", "structured_outputs": {"grammar": grammar}, "max_tokens": 8,
              "skip_special_tokens": False, "temperature": 0})  # fmt: skip
    assert r.status_code == 200, r.text
    assert re.fullmatch(r"<\|im_start\|>[a-z]", r.json()["choices"][0]["text"])
