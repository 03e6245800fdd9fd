"""Every response and stream chunk validates with the openai package's own pydantic types,
strictly (no coercion), with no field beyond them but our declared extensions; finish_reason
takes only OpenAI's values and vLLM's "abort"; the engine's reason rides beside it."""

import json

import httpx
import pytest
from openai.types import Completion
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from pydantic import BaseModel

from engine import StopReason
from playground.server.responses import ResponseTracker
from tests.api.server import TINY_MODEL

EXTENSIONS = {"stop_reason", "engine_stop_reason"}  # per choice: vLLM's, the engine's
HI = [{"role": "user", "content": "Say something."}]
N_SAMPLED = {"n": 2, "temperature": 1.0, "seed": 0}  # n > 1 samples: greedy takes n=1 (vLLM)


def strictly(cls, data: dict):
    """`data` as `cls`, strict; every extra field anywhere is one of EXTENSIONS on a choice."""
    obj = cls.model_validate(data, strict=True)

    def walk(m, where):
        if isinstance(m, BaseModel):
            extra = set(m.model_extra or {})
            allowed = EXTENSIONS if where.endswith("choices") else set()
            assert extra <= allowed, (where, extra - allowed)
            for name in type(m).model_fields:
                walk(getattr(m, name), f"{where}.{name}")
        elif isinstance(m, list):
            for v in m:
                walk(v, where)

    walk(obj, cls.__name__)
    return obj


def post(url, path, body, stream=False):
    if not stream:
        return httpx.post(url + path, json=body, timeout=60)
    with httpx.stream("POST", url + path, json={**body, "stream": True}, timeout=60) as r:
        lines = [ln for ln in r.iter_lines() if ln.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    return [json.loads(ln.removeprefix("data: ")) for ln in lines[:-1]]


@pytest.mark.parametrize("extra", [{}, {"logprobs": True, "top_logprobs": 2}, N_SAMPLED])
def test_chat_responses_and_chunks_are_openai_objects(app_server, extra):
    body = {"model": TINY_MODEL, "messages": HI, "max_tokens": 5, "temperature": 0, **extra}
    r = post(app_server.url, "/v1/chat/completions", body)
    assert r.status_code == 200
    full = strictly(ChatCompletion, r.json())
    assert {c.finish_reason for c in full.choices} <= {"stop", "length"}
    chunks = post(app_server.url, "/v1/chat/completions",
                  {**body, "stream_options": {"include_usage": True}}, stream=True)  # fmt: skip
    for chunk in chunks:
        strictly(ChatCompletionChunk, chunk)
    assert chunks[-1]["usage"]["completion_tokens"] == full.usage.completion_tokens


@pytest.mark.parametrize("extra", [{}, {"logprobs": 2}, N_SAMPLED])
def test_completions_and_their_chunks_are_openai_objects(app_server, extra):
    body = {"model": TINY_MODEL, "prompt": "Once", "max_tokens": 5, "temperature": 0, **extra}
    full = strictly(Completion, post(app_server.url, "/v1/completions", body).json())
    assert [c.model_extra["engine_stop_reason"] for c in full.choices] == ["max_tokens"] * len(
        full.choices
    )
    chunks = post(app_server.url, "/v1/completions", body, stream=True)
    finishes = [c["choices"][0]["finish_reason"] for c in chunks]
    assert sorted(f for f in finishes if f) == ["length"] * len(full.choices)  # one per choice
    for chunk in chunks:  # OpenAI streams completions as Completion objects, with a null
        # finish_reason until the last one, which its type does not allow: the rest is checked
        choices = [{**c, "finish_reason": c["finish_reason"] or "length"} for c in chunk["choices"]]
        strictly(Completion, {**chunk, "choices": choices})


def test_stop_reason_is_the_stop_string_or_token_that_ended_it(app_server, client):
    greedy = client.completions.create(model=TINY_MODEL, prompt="abc", max_tokens=12,
                                       temperature=0)  # fmt: skip
    text = greedy.choices[0].text
    stop = text[4:6]
    body = {"model": TINY_MODEL, "prompt": "abc", "max_tokens": 12, "temperature": 0}
    cut = post(app_server.url, "/v1/completions", {**body, "stop": ["zzzz", stop]}).json()
    choice = strictly(Completion, cut).choices[0]
    assert (choice.finish_reason, choice.model_extra) == (
        "stop", {"stop_reason": stop, "engine_stop_reason": "stop_word"})  # fmt: skip
    tokens = post(app_server.url, "/v1/completions", {**body, "logprobs": 0}).json()
    third = app_server.driver.tokenizer.encode(text)[2]
    by_id = post(app_server.url, "/v1/completions", {**body, "stop_token_ids": [third]}).json()
    assert tokens["choices"][0]["finish_reason"] == "length"
    assert by_id["choices"][0]["stop_reason"] == third
    assert by_id["choices"][0]["engine_stop_reason"] == "stop_word"


def _tracker(chat: bool) -> ResponseTracker:
    from engine import SamplingParams
    from playground.server.responses import CompletionJob

    job = CompletionJob(chat, "id-1", TINY_MODEL, "x", [5], SamplingParams(max_tokens=4), None,
                        0, False, False, 1)  # fmt: skip
    return ResponseTracker(job, lambda ids: "")


@pytest.mark.parametrize("reason", [StopReason.CANCELLED, StopReason.TIMEOUT])
def test_an_aborted_choice_says_abort_and_the_engine_says_why(reason):
    from playground.handles import final_output

    out = final_output("id-1", "partial", reason)
    for chat, cls in ((True, ChatCompletion), (False, Completion)):
        data = _tracker(chat).response(out)
        choice = data["choices"][0]
        assert (choice["finish_reason"], choice["engine_stop_reason"]) == ("abort", reason.value)
        # vLLM's "abort" is not in OpenAI's list: everything else validates strictly
        strictly(cls, {**data, "choices": [{**choice, "finish_reason": "stop"}]})


def test_a_request_whose_forward_failed_answers_500_as_vllm_does(tiny_model):
    from fastapi.testclient import TestClient

    from playground.driver import EngineDriver
    from tests.api.server import bare_app
    from tests.tiny_models import make_engine

    engine = make_engine(*tiny_model)
    real_step = engine.step

    def failing_step():  # every step with a prompt in it fails
        if engine.has_unfinished_requests():
            raise RuntimeError("boom")
        return real_step()

    engine.step = failing_step
    driver = EngineDriver(engine)
    try:
        with TestClient(bare_app(lambda: driver)) as http:
            body = {"model": TINY_MODEL, "prompt": "fail", "max_tokens": 4}
            r = http.post("/v1/completions", json=body)
            assert r.status_code == 500
            error = r.json()["error"]
            assert (error["type"], error["code"]) == ("server_error", "engine_error")
            chat = {"model": TINY_MODEL, "messages": HI, "stream": True}
            with http.stream("POST", "/v1/chat/completions", json=chat) as r:
                lines = [ln for ln in r.iter_lines() if ln.startswith("data: ")]
            assert lines[-1] == "data: [DONE]"
            assert json.loads(lines[-2].removeprefix("data: "))["error"]["code"] == "engine_error"
    finally:
        driver.stop()
