"""The bad-input matrix through all three doors: the engine's add_request, the board's
callbacks (as the board's page calls them) and the HTTP API. Every bad input gets a clear error
that names the field; nothing is queued; the engine serves the next good request."""

import httpx
import pytest

from engine import EngineConfig, LLMEngine, SamplingParams
from tests.api.server import TINY_MODEL, Page

MEGABYTE_PROMPT = "lorem ipsum " * 90_000  # ~1 MB
MANY_STOPS = [f"stop{i}" for i in range(10_000)]
GOOD = SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True)

ENGINE_CASES = [  # (prompt, SamplingParams kwargs, the field the error names)
    ("", {}, "prompt"),
    ("  \n\t ", {}, "prompt"),
    (MEGABYTE_PROMPT, {}, "prompt"),
    ("bad \ud800 surrogate", {}, "prompt"),
    ([{"role": "user", "content": "x\udfff"}], {}, "prompt[0].content"),
    (12345, {}, "prompt"),
    ("ok", {"max_tokens": -1}, "max_tokens"),
    ("ok", {"max_tokens": 10**12}, "max_tokens"),
    ("ok", {"temperature": float("nan")}, "temperature"),
    ("ok", {"top_p": float("inf")}, "top_p"),
    ("ok", {"seed": -5}, "seed"),
    ("ok", {"max_tokens": "ten"}, "max_tokens"),
    ("ok", {"stop": 3}, "stop"),
    ("ok", {"n": 0}, "n"),
    ("ok", {"stop": MANY_STOPS}, "stop"),
]


@pytest.mark.parametrize("prompt,kwargs,field", ENGINE_CASES)
def test_engine_door(tiny_model, prompt, kwargs, field):
    engine = LLMEngine(*tiny_model, EngineConfig(num_kv_blocks=64, max_model_len=512))
    with pytest.raises(ValueError) as info:
        engine.add_request("bad", prompt, SamplingParams(**kwargs) if kwargs else GOOD)
    assert str(info.value).startswith(field), str(info.value)
    assert not engine.has_unfinished_requests()
    with pytest.raises(TypeError, match="colour"):  # an unknown field
        SamplingParams(colour="blue")
    engine.add_request("good", "still serving?", GOOD)
    with pytest.raises(ValueError, match="request_id"):  # a duplicate id
        engine.add_request("good", "again", GOOD)
    outs = engine.generate(["and a second one"], GOOD)
    assert outs[0].finished and len(outs[0].outputs[0].token_ids) == 3
    while engine.has_unfinished_requests():
        engine.step()
    assert engine.snapshot().kv_blocks_used == 0


@pytest.fixture(scope="module")
def page(app_server):
    return Page(app_server.url, "bad-input").load()


# (a lone surrogate cannot leave a browser's textarea, nor gradio_client: the engine and API
# doors cover it)
BOARD_CASES = [  # (text, max_tokens, temperature, seed, stop strings, the field named)
    ("", 6, 0.0, -1, "", "Type a prompt"),
    ("   \n ", 6, 0.0, -1, "", "Type a prompt"),
    (MEGABYTE_PROMPT, 6, 0.0, -1, "", "prompt"),
    ("ok", -1, 0.0, -1, "", "less than minimum value 1"),  # Gradio checks a slider's range
    ("ok", 10**9, 0.0, -1, "", "greater than maximum value"),
    ("ok", 6, -3.0, -1, "", "less than minimum value 0"),
    ("ok", 6, 0.0, 2**70, "", "seed"),
    ("ok", 6, 0.0, -1, "|".join(MANY_STOPS), "stop"),
]


@pytest.mark.parametrize("text,max_tokens,temperature,seed,stops,field", BOARD_CASES)
def test_board_door(page, app_server, text, max_tokens, temperature, seed, stops, field):
    before = len(app_server.driver.state().records)
    r = page.call("submit_prompt", text, max_tokens, temperature, 1.0, 0, seed, stops, False)
    if r.status_code != 200:  # refused by the component before our callback ran
        assert field in r.json()["error"] and "value" in field, r.text
    else:
        cleared, status = r.json()["data"]
        assert field in status and cleared != "", status
        if field != "Type a prompt":
            assert status.startswith("Refused:"), status
    assert app_server.driver.is_alive
    records = app_server.driver.state().records
    assert all(not r.text for r in records[before:])  # nothing of it ran


API_CASES = [  # (path, body or raw bytes, the param named)
    ("/v1/completions", {"prompt": ""}, "prompt"),
    ("/v1/completions", {"prompt": " \n "}, "prompt"),
    ("/v1/completions", {"prompt": MEGABYTE_PROMPT}, "prompt"),
    ("/v1/completions", b'{"prompt": "bad \xff\xfe bytes"}', None),
    ("/v1/completions", b'{"prompt": "bad \\ud800 escape"}', "prompt"),
    ("/v1/completions", {"prompt": "x", "max_tokens": -1}, "max_tokens"),
    ("/v1/completions", {"prompt": "x", "max_tokens": 10**30}, "max_tokens"),
    ("/v1/completions", b'{"prompt": "x", "temperature": NaN}', "temperature"),
    ("/v1/completions", {"prompt": "x", "seed": -5}, "seed"),
    ("/v1/completions", {"prompt": "x", "max_tokens": "ten"}, "max_tokens"),
    ("/v1/completions", {"prompt": 12345}, "prompt"),
    ("/v1/completions", {"prompt": "x", "stop": MANY_STOPS}, "stop"),
    ("/v1/chat/completions", {"messages": "hi"}, "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": MEGABYTE_PROMPT}]},
     "messages"),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "\\udfff"}]}',
     "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "n": 10**6},
     "n"),
]  # fmt: skip


@pytest.mark.parametrize("path,body,param", API_CASES)
def test_api_door(app_server, path, body, param):
    kw = {"content": body, "headers": {"content-type": "application/json"}}
    if isinstance(body, dict):
        kw = {"json": {"model": TINY_MODEL, **body}}
    r = httpx.post(app_server.url + path, timeout=60, **kw)
    error = r.json()["error"]
    assert r.status_code == 400, error
    assert error["param"] == param, error
    assert (param or "JSON") in error["message"], error
    ok = httpx.post(app_server.url + "/v1/completions", timeout=60,
                    json={"model": TINY_MODEL, "prompt": "fine", "max_tokens": 2})  # fmt: skip
    assert ok.status_code == 200 and ok.json()["choices"][0]["finish_reason"] in ("length", "stop")
