"""Errors in OpenAI's shape: 400 naming the field, 404, 429 and 503; the server lives on."""

import httpx
import openai
import pytest
from fastapi.testclient import TestClient

from tests.api.server import TINY_MODEL, bare_app, wait_for

HI = [{"role": "user", "content": "hi"}]
CHAT_CASES = [  # (body, status, param)
    ({"model": TINY_MODEL}, 400, "messages"),
    ({"model": TINY_MODEL, "messages": []}, 400, "messages"),
    ({"model": TINY_MODEL, "messages": HI, "temperature": -1}, 400, "temperature"),
    ({"model": TINY_MODEL, "messages": HI, "temperature": 2.5}, 400, "temperature"),
    ({"model": TINY_MODEL, "messages": HI, "n": 1000}, 400, "n"),
    ({"model": TINY_MODEL, "messages": HI, "max_tokens": 100_000}, 400, "max_tokens"),
    ({"model": TINY_MODEL, "messages": HI, "max_completion_tokens": 0}, 400,
     "max_completion_tokens"),
    ({"model": TINY_MODEL, "messages": HI, "top_p": 0}, 400, "top_p"),
    ({"model": TINY_MODEL, "messages": HI, "top_logprobs": 99}, 400, "top_logprobs"),
    ({"model": TINY_MODEL, "messages": HI, "top_logprobs": 2}, 400, "top_logprobs"),
    ({"model": TINY_MODEL, "messages": HI, "logprobs": False, "top_logprobs": 2}, 400,
     "top_logprobs"),
    ({"model": TINY_MODEL, "messages": HI, "stream_options": {"include_usage": True}}, 400,
     "stream_options"),
    ({"model": TINY_MODEL, "messages": HI, "stream": False, "stream_options": {}}, 400,
     "stream_options"),
    ({"model": TINY_MODEL, "messages": HI, "stop": 3}, 400, "stop"),
    ({"model": TINY_MODEL, "messages": HI, "presence_penalty": 2.5}, 400, "presence_penalty"),
    ({"model": TINY_MODEL, "messages": [{"role": "user"}]}, 400, "messages"),
    ({"model": TINY_MODEL, "messages": [{"role": "robot", "content": "x"}]}, 400,
     "messages[0].role"),
    ({"model": TINY_MODEL, "messages": [{"role": "user", "content": " "}]}, 400, "messages"),
    ({"model": TINY_MODEL, "messages": [{"role": "user", "content": "x " * 600}]}, 400,
     "messages"),
    ({"model": TINY_MODEL, "messages": HI, "priority": 1}, 400, "priority"),  # fcfs server
    ({"model": TINY_MODEL, "messages": HI, "priority": "high"}, 400, "priority"),
    ({"model": "gpt-17", "messages": HI}, 404, "model"),
]  # fmt: skip


def _error(response: httpx.Response) -> dict:
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]


@pytest.mark.parametrize("body,status,param", CHAT_CASES)
def test_bad_chat_requests_name_the_field(app_server, body, status, param):
    r = httpx.post(app_server.url + "/v1/chat/completions", json=body, timeout=30)
    error = _error(r)
    assert r.status_code == status and error["param"] == param
    assert param.split("[")[0] in error["message"] or status == 404


def test_bad_completion_requests_and_bodies(app_server):
    url = app_server.url + "/v1/completions"
    cases = [
        ({"model": TINY_MODEL}, "prompt"),
        ({"prompt": ["a", " "]}, "prompt"),
        ({"prompt": "x", "logprobs": 50}, "logprobs"),
        ({"prompt": "x", "max_tokens": 600}, "max_tokens"),
        ({"prompt": "x", "echo": True, "logprobs": 1}, "echo"),
        ({"prompt": "x", "stream_options": {"include_usage": True}}, "stream_options"),
    ]
    for body, param in cases:
        r = httpx.post(url, json=body, timeout=30)
        assert (r.status_code, _error(r)["param"]) == (400, param), body
        assert param in _error(r)["message"], body
    r = httpx.post(url, content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "JSON" in _error(r)["message"]


def test_the_openai_client_raises_and_the_server_keeps_serving(client):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=TINY_MODEL, messages=HI, temperature=-1)
    assert info.value.status_code == 400 and "temperature" in info.value.message
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="nope", prompt="x", max_tokens=2)
    r = client.completions.create(model=TINY_MODEL, prompt="still here?", max_tokens=2)
    assert r.usage.completion_tokens == 2


def test_full_waiting_queue_answers_503_as_vllm(make_driver):
    """The engine's own --max-waiting (no limit by default): a full waiting queue is answered
    as vLLM answers a full one, 503 (QueueOverflowError, vllm/exceptions.py)."""
    driver = make_driver(max_waiting=1)
    driver.pause()  # nothing leaves the waiting queue
    driver.submit("fill the queue", wait=True)
    with TestClient(bare_app(lambda: driver)) as http:
        r = http.post("/v1/completions", json={"prompt": "one more", "max_tokens": 2})
        assert r.status_code == 503 and _error(r)["code"] == "queue_full"
        wait_for(lambda: driver.snapshot().num_waiting == 1)  # the up-to-date snapshot path
        r = http.post("/v1/completions", json={"prompt": "one more", "max_tokens": 2})
        assert r.status_code == 503
    driver.stop()


def test_503_while_the_model_loads():
    with TestClient(bare_app(lambda: None)) as http:
        for r in (http.get("/v1/models"),
                  http.post("/v1/chat/completions", json={"messages": HI})):  # fmt: skip
            assert r.status_code == 503 and _error(r)["code"] == "model_not_ready"
        assert http.get("/metrics").status_code == 200  # empty until the model is there


def test_the_valid_neighbours_of_those_pairs_are_served(app_server):
    url = app_server.url + "/v1/chat/completions"
    for extra in ({"stream_options": None}, {"top_logprobs": 0},
                  {"logprobs": True, "top_logprobs": 2}):  # fmt: skip
        body = {"model": TINY_MODEL, "messages": HI, "max_tokens": 2, **extra}
        r = httpx.post(url, json=body, timeout=30)
        assert r.status_code == 200, (extra, r.text)
