"""vLLM's request fields over HTTP: response_format and structured_outputs (vLLM's
structured_outputs_from_response_format, vllm/entrypoints/generate/base/protocol.py, maps
both onto StructuredOutputsParams for vllm/entrypoints/openai/chat_completion/protocol.py and
completion/protocol.py), min_tokens, presence / frequency penalties, skip_special_tokens,
include_stop_str_in_output, and n > 1 refused with greedy sampling (vllm/sampling_params.py,
_verify_greedy_sampling)."""

import json
import re

import httpx
import jsonschema_rs
import pytest
import torch
from fastapi.testclient import TestClient

from engine import EngineConfig
from playground.driver import EngineDriver
from playground.server.openai_protocol import ChatCompletionRequest
from tests.api.conftest import SERVER_ENGINE
from tests.api.server import TINY_MODEL, bare_app
from tests.tiny_models import make_engine, make_tiny_model

CHAT = [{"role": "user", "content": "Answer in JSON."}]
SCHEMA = {
    "type": "object",
    "properties": {"mood": {"enum": ["calm", "busy"]},
                   "count": {"type": "integer", "minimum": 0, "maximum": 9}},
    "required": ["mood", "count"],
}  # fmt: skip
NESTED = {
    "type": "object",
    "properties": {"user": {"type": "object",
                            "properties": {"age": {"type": "integer", "minimum": 0, "maximum": 99},
                                           "admin": {"type": "boolean"}},
                            "required": ["age", "admin"], "additionalProperties": False}},
    "required": ["user"], "additionalProperties": False,
}  # fmt: skip
ENUM = {
    "type": "object",
    "properties": {"color": {"enum": ["red", "green", "blue"]},
                   "size": {"type": "string", "enum": ["s", "m", "l"]}},
    "required": ["color", "size"], "additionalProperties": False,
}  # fmt: skip
ARRAY = {
    "type": "object",
    "properties": {"tags": {"type": "array", "items": {"enum": ["a", "b", "c"]},
                            "minItems": 2, "maxItems": 3}},
    "required": ["tags"], "additionalProperties": False,
}  # fmt: skip
SCHEMAS = {"nested": NESTED, "enum": ENUM, "array": ARRAY}


def post(server, path, body):
    return httpx.post(server.url + path, json={"model": server.model, **body}, timeout=120)


def test_response_format_maps_onto_structured_outputs():
    """vllm/entrypoints/generate/base/protocol.py structured_outputs_from_response_format:
    json_schema -> structured_outputs json, json_object -> json_object, text -> none."""
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
    """vllm/sampling_params.py StructuredOutputsParams(json=..., disable_any_whitespace) with
    presence / frequency penalties in [-2, 2] (_verify_args);
    vllm/v1/structured_output/backend_xgrammar.py compiles the schema, compact."""
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
    """vllm/sampling_params.py StructuredOutputsParams choice and regex, each of n sampled
    completions held to it (vllm/v1/structured_output/backend_xgrammar.py: choice as a
    grammar, regex compiled)."""
    r = post(app_server, "/v1/completions",
             {"prompt": "Pick:", "structured_outputs": so, "max_tokens": 20, "n": 2,
              "temperature": 0.9, "seed": 4})  # fmt: skip
    assert r.status_code == 200, r.text
    for choice in r.json()["choices"]:
        assert check(choice["text"]), choice["text"]


def test_stop_string_kept_when_asked_and_min_tokens_honoured(app_server):
    """vllm/v1/engine/detokenizer.py: a stop string counts only past min_tokens, and stays
    in the text with include_stop_str_in_output (vllm/sampling_params.py)."""
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
    """400 naming the field, as vLLM refuses them: a regex the backend cannot compile
    (vllm/v1/structured_output/backend_xgrammar.py validate_xgrammar_grammar), two kinds of
    constraint (vllm/sampling_params.py StructuredOutputsParams, and
    check_structured_outputs_count in vllm/entrypoints/openai/chat_completion/protocol.py),
    json_schema without its schema (validate_response_format, same file), a penalty out of
    [-2, 2], min_tokens above max_tokens (SamplingParams._verify_args) and n > 1 greedy
    (_verify_greedy_sampling)."""
    r = post(app_server, "/v1/chat/completions", {"messages": CHAT, **body})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param, r.text


def test_skip_special_tokens_false_shows_them(app_server):
    """vllm/sampling_params.py skip_special_tokens (default true): false keeps a special
    token's text in the output (vllm/v1/engine/detokenizer.py)."""
    grammar = 'root ::= "<|im_start|>" [a-z]'
    r = post(app_server, "/v1/completions",
             {"prompt": "x", "structured_outputs": {"grammar": grammar}, "max_tokens": 8,
              "skip_special_tokens": False, "temperature": 0})  # fmt: skip
    assert r.status_code == 200, r.text
    assert re.fullmatch(r"<\|im_start\|>[a-z]", r.json()["choices"][0]["text"])


def _json_score(text: str) -> float:
    """A token's fixed logit in `json_http`, by its text: never whitespace (nor an escape),
    brackets alone first, then anything with a quote, closing brackets before the rest."""
    if not text or any(c.isspace() or c == "\\" for c in text):
        return -100.0
    if set(text) <= set("{}[]"):
        return 20.0
    return 8.0 * ('"' in text) + 3.0 * (("}" in text) + ("]" in text))


@pytest.fixture(scope="module")
def json_http(default_model):
    """The API over a tiny Llama whose next token ignores the context: attention and MLP add
    nothing, every embedding is the same, so each token's logit is fixed by its text
    (_json_score). A JSON grammar allows whitespace anywhere, and a random model drifts into
    it for hundreds of tokens; this one never takes whitespace and closes each bracket as
    soon as the grammar lets it, so greedy output completes in a few dozen tokens."""
    tokenizer = default_model[1]
    model = make_tiny_model("llama", max_position_embeddings=512)
    texts = tokenizer.batch_decode([[i] for i in range(model.config.vocab_size)])
    scores = torch.tensor([_json_score(t) for t in texts])  # (vocab,)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        model.model.embed_tokens.weight.fill_(1.0)  # every hidden state: ones, after the norm
        model.model.norm.weight.fill_(1.0)
        hidden = model.config.hidden_size
        model.lm_head.weight.copy_(scores[:, None].expand(-1, hidden) / hidden)
    driver = EngineDriver(make_engine(model, tokenizer, EngineConfig(**SERVER_ENGINE)))
    with TestClient(bare_app(lambda: driver)) as http:
        yield http
    driver.stop()


@pytest.mark.parametrize("route", ["/v1/chat/completions", "/v1/completions"])
@pytest.mark.parametrize("name", [None, *SCHEMAS])
def test_response_format_text_parses_and_follows_the_schema(json_http, route, name):
    """vllm/entrypoints/generate/base/protocol.py structured_outputs_from_response_format:
    json_object -> StructuredOutputsParams(json_object=True), json_schema -> json=its schema,
    on both routes; vllm/v1/structured_output/backend_xgrammar.py compiles them with
    whitespace allowed (disable_any_whitespace off by default). The answer's text is JSON
    that follows the schema, the grammar completed (finish_reason stop)."""
    fmt = {"type": "json_object"} if name is None else {
        "type": "json_schema", "json_schema": {"name": name, "schema": SCHEMAS[name]}}  # fmt: skip
    chat = route == "/v1/chat/completions"
    body = {"model": TINY_MODEL, "response_format": fmt, "max_tokens": 64, "temperature": 0,
            **({"messages": CHAT} if chat else {"prompt": "JSON:"})}  # fmt: skip
    r = json_http.post(route, json=body)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    text = choice["message"]["content"] if chat else choice["text"]
    assert choice["finish_reason"] == "stop", text
    value = json.loads(text)
    assert isinstance(value, dict), text
    if name is not None:  # schemathesis' validator (the suite has no `jsonschema`)
        jsonschema_rs.validate(SCHEMAS[name], value)
