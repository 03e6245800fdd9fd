"""vLLM's routes beside /v1: /tokenize, /detokenize, /version, and its /v1/models card."""

import httpx

from tests.api.server import TINY_MODEL, Server, bare_app

HI = [{"role": "user", "content": "Tell me a story."}]


def test_tokenize_and_detokenize_as_vllm(app_server, tiny_model):
    """vllm/entrypoints/serve/tokenize/protocol.py and serving.py: a prompt (special tokens
    added unless add_special_tokens is false) or chat messages through the template;
    {count, max_model_len, tokens, token_strs}; /detokenize answers {prompt}."""
    tokenizer, url = tiny_model[1], app_server.url
    r = httpx.post(url + "/tokenize", json={"model": TINY_MODEL, "prompt": "Hello world",
                                            "return_token_strs": True})  # fmt: skip
    ids = tokenizer.encode("Hello world")
    assert r.json() == {
        "count": len(ids),
        "max_model_len": app_server.driver.config.max_model_len,
        "tokens": ids,
        "token_strs": tokenizer.convert_ids_to_tokens(ids),
    }
    text = tokenizer.apply_chat_template(HI, add_generation_prompt=False, tokenize=False)
    r = httpx.post(url + "/tokenize", json={"messages": HI, "add_generation_prompt": False})
    assert r.json()["tokens"] == tokenizer.encode(text, add_special_tokens=False)
    assert r.json()["token_strs"] is None
    r = httpx.post(url + "/detokenize", json={"model": TINY_MODEL, "tokens": ids})
    assert r.status_code == 200 and r.json() == {"prompt": tokenizer.decode(ids)}
    bad = httpx.post(url + "/detokenize", json={"tokens": [len(tokenizer) + 5]})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "tokens"
    assert httpx.post(url + "/tokenize", json={"prompt": 3}).json()["error"]["param"] == "prompt"
    other = httpx.post(url + "/tokenize", json={"model": "gpt-17", "prompt": "x"})
    assert other.status_code == 404


def test_tokenizer_routes_read_their_bodies_as_the_completion_routes(app_server, make_driver):
    """vllm/entrypoints/serve/engine/protocol.py (OpenAIBaseModel: an unknown field is
    ignored); with --strict-request-fields refused, as on the completion routes. A body with
    messages is a chat (vllm/entrypoints/serve/tokenize/protocol.py: TokenizeRequest's
    union); null is the default, 3.0 the integer 3; a lone surrogate is no text: 400."""
    url = app_server.url
    r = httpx.post(url + "/tokenize", json={"prompt": "Hi", "colour": "blue", "messages": None})
    assert r.status_code == 200 and r.json()["token_strs"] is None
    r = httpx.post(url + "/detokenize", json={"tokens": [6004.0], "model": None})
    assert r.status_code == 200 and r.json()["prompt"] == "hi"
    r = httpx.post(url + "/tokenize", content=b'{"prompt": "a\\ud800b"}')
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt"
    driver = make_driver()
    server = Server(bare_app(lambda: driver, strict_request_fields=True))
    try:
        r = httpx.post(server.url + "/tokenize", json={"prompt": "Hi", "colour": "blue"})
        assert r.status_code == 400 and r.json()["error"]["code"] == "unknown_parameter"
    finally:
        server.stop()


def test_version_and_the_model_card(app_server):
    """vllm/entrypoints/serve/instrumentator/basic.py ({"version"}) and
    vllm/entrypoints/openai/models/serving.py (ModelCard: root, parent, permission)."""
    version = httpx.get(app_server.url + "/version").json()
    assert version["version"] == "0.32.0" and version["server"] == "cb-playground"
    card = httpx.get(app_server.url + "/v1/models").json()["data"][0]
    assert (card["id"], card["object"], card["parent"]) == (TINY_MODEL, "model", None)
    assert card["root"] and card["max_model_len"] == app_server.driver.config.max_model_len
    [permission] = card["permission"]
    assert permission["object"] == "model_permission" and permission["id"].startswith("modelperm-")
    assert {k: permission[k] for k in ("allow_sampling", "allow_logprobs", "organization",
                                       "is_blocking")} == {"allow_sampling": True,
                                       "allow_logprobs": True, "organization": "*",
                                       "is_blocking": False}  # fmt: skip
