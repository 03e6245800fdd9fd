"""vLLM's extension fields on /v1/completions: beam search (use_beam_search, best_of, n,
length_penalty) and priority; and vLLM's stream interval (--stream-interval, and a request's
own stream_interval)."""

import json

import httpx
import pytest
from fastapi.testclient import TestClient

from engine import SamplingParams
from tests.api.server import TINY_MODEL, Server, bare_app, openai_client
from tests.tiny_models import make_engine

PROMPT = "Beam search keeps several candidates:"


def test_beam_search_returns_the_engines_best_hypotheses(app_server, tiny_model):
    body = {"model": TINY_MODEL, "prompt": PROMPT, "max_tokens": 8, "use_beam_search": True,
            "best_of": 3, "n": 2, "length_penalty": 0.5}  # fmt: skip
    r = httpx.post(app_server.url + "/v1/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    choices = r.json()["choices"]
    model, tokenizer = tiny_model
    params = SamplingParams(max_tokens=8, temperature=0.0, beam_width=3, n=2, length_penalty=0.5)
    alone = make_engine(model, tokenizer).generate([PROMPT], params)[0]
    assert [c["text"] for c in choices] == [c.text for c in alone.outputs]
    assert [c["index"] for c in choices] == [0, 1]
    assert r.json()["usage"]["completion_tokens"] == sum(len(c.token_ids) for c in alone.outputs)


def test_a_streamed_beam_search_sends_each_beam_whole_at_the_end(app_server):
    body = {"model": TINY_MODEL, "prompt": PROMPT, "max_tokens": 6, "use_beam_search": True,
            "n": 2, "stream": True}  # fmt: skip
    texts, finishes = {0: "", 1: ""}, {}
    with httpx.stream("POST", app_server.url + "/v1/completions", json=body, timeout=60) as r:
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            for choice in json.loads(line[6:])["choices"]:
                texts[choice["index"]] += choice["text"]
                if choice["finish_reason"]:
                    finishes[choice["index"]] = choice["finish_reason"]
    assert set(finishes) == {0, 1} and all(texts.values())
    unstreamed = {**body, "stream": False}
    r = httpx.post(app_server.url + "/v1/completions", json=unstreamed, timeout=60)
    assert [c["text"] for c in r.json()["choices"]] == [texts[0], texts[1]]


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"use_beam_search": True, "n": 2, "temperature": 0.7}, "temperature"),
        ({"use_beam_search": True}, "best_of"),  # one beam
        ({"use_beam_search": True, "n": 3, "best_of": 2}, "n"),
        ({"use_beam_search": True, "best_of": 5}, "best_of"),  # past --limit-n (4)
        ({"use_beam_search": True, "best_of": 99}, "best_of"),
        ({"use_beam_search": True, "best_of": 2, "top_p": 0.5}, "top_p"),
        ({"best_of": 3}, "best_of"),  # without beams
        ({"length_penalty": 0.5}, "length_penalty"),  # without beams
        ({"stream": True, "stream_interval": 0}, "stream_interval"),
    ],
)
def test_bad_extension_fields_are_refused_naming_them(app_server, fields, param):
    body = {"model": TINY_MODEL, "prompt": PROMPT, "max_tokens": 4, **fields}
    r = httpx.post(app_server.url + "/v1/completions", json=body, timeout=30)
    error = r.json()["error"]
    assert (r.status_code, error["param"]) == (400, param), error
    assert param in error["message"]


def test_priority_reaches_an_engine_that_orders_by_priority(make_driver):
    driver = make_driver(scheduling_policy="priority")
    with TestClient(bare_app(lambda: driver)) as http:
        r = http.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 2, "priority": 5})
        assert r.status_code == 200, r.text
    rid = r.json()["id"]
    state = next(s for s in driver.snapshot().requests if s.request_id == rid)
    assert state.priority == 5
    driver.stop()


def test_chat_does_not_take_beam_search(app_server):
    body = {"model": TINY_MODEL, "messages": [{"role": "user", "content": "hi"}],
            "use_beam_search": True}  # fmt: skip
    r = httpx.post(app_server.url + "/v1/chat/completions", json=body, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "use_beam_search"


def test_a_stream_interval_sends_chunks_of_that_many_tokens(make_driver):
    driver = make_driver()
    server = Server(bare_app(lambda: driver, stream_interval=3))  # --stream-interval 3
    kw = dict(model=TINY_MODEL, prompt=PROMPT, max_tokens=11, temperature=0, logprobs=0)
    try:
        client = openai_client(server.url)
        whole = client.completions.create(**kw).choices[0]

        def streamed(**extra) -> tuple[str, list[int], str | None]:
            chunks = list(client.completions.create(stream=True, **kw, **extra))
            text = "".join(c.choices[0].text for c in chunks)
            return text, [len(c.choices[0].logprobs.tokens) for c in chunks], chunks[-1]

        for extra, every in [({}, 3), ({"extra_body": {"stream_interval": 1}}, 3),
                             ({"extra_body": {"stream_interval": 5}}, 5)]:  # fmt: skip
            text, sizes, last = streamed(**extra)
            assert text == whole.text and sum(sizes) == 11, (extra, sizes)
            assert sizes[0] == 1 and all(n >= every for n in sizes[1:-1]), (extra, sizes)
            assert len(sizes) <= 1 + -(-10 // every), (extra, sizes)
            assert last.choices[0].finish_reason == "length"
    finally:
        server.stop()


def test_register_api_refuses_a_stream_interval_below_one(make_driver):
    driver = make_driver()
    with pytest.raises(ValueError, match="stream_interval"):
        bare_app(lambda: driver, stream_interval=0)
    with pytest.raises(TypeError, match="stream_interval"):
        bare_app(lambda: driver, stream_interval=2.5)
