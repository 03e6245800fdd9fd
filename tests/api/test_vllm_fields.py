"""vLLM's defaults and request fields, as `vllm serve` 0.32 answers them (each test cites the
vLLM source it follows)."""

import logging
import threading
import time

import httpx
import pytest
from fastapi.testclient import TestClient

import app as app_module
from playground.access.limits import PublicLimits
from playground.cli.startup import public_limits
from playground.server.options import ServingOptions
from tests.api.server import TINY_MODEL, Server, bare_app, openai_client

HI = [{"role": "user", "content": "Tell me a story."}]


def test_local_defaults_are_vllm_serves_and_a_space_keeps_its_limits(monkeypatch):
    """vllm/entrypoints/launchers/cli_args.py: sse_keep_alive_interval defaults to 0 (no
    comments); vLLM has no per-client in-flight limit. A Space keeps both of its own."""
    monkeypatch.delenv("SPACE_ID", raising=False)
    assert PublicLimits().max_in_flight is None and ServingOptions().sse_keep_alive_interval == 0
    assert public_limits(app_module.parse_args([])).max_in_flight is None
    public = public_limits(app_module.parse_args(["--public"]))
    assert public.max_in_flight == PublicLimits.defaults(True).max_in_flight
    monkeypatch.setenv("SPACE_ID", "someone/space")
    assert public_limits(app_module.parse_args([])).max_in_flight == public.max_in_flight
    assert PublicLimits.defaults(True).max_in_flight == 4
    assert ServingOptions.defaults(public=True).sse_keep_alive_interval > 0
    with pytest.raises(ValueError, match="sse_keep_alive_interval"):
        ServingOptions(sse_keep_alive_interval=-1)


def test_by_default_one_client_may_have_many_requests_and_streams_carry_no_comments(make_driver):
    """vllm/entrypoints/serve/utils/sse_keep_alive.py: no comment unless an interval is set;
    `vllm bench serve` sends 32 requests at once from one address."""
    driver = make_driver()
    server = Server(bare_app(lambda: driver))
    results: list = []

    def stream():
        body = {"model": TINY_MODEL, "prompt": "wait", "max_tokens": 3, "stream": True}
        with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=30) as r:
            results.append((r.status_code, [ln for ln in r.iter_lines() if ln]))

    try:
        driver.pause()  # they all wait, unfinished, well past the old 2 s keep-alive
        readers = [threading.Thread(target=stream) for _ in range(8)]
        for t in readers:
            t.start()
        time.sleep(2.5)
        driver.resume()
        for t in readers:
            t.join(30)
    finally:
        driver.resume()
        server.stop()
    assert [status for status, _ in results] == [200] * 8
    assert all(lines[-1] == "data: [DONE]" for _, lines in results)
    assert not any(ln.startswith(":") for _, lines in results for ln in lines)


def test_unknown_fields_are_ignored_with_a_log_line_or_refused_when_strict(make_driver, caplog):
    """vllm/entrypoints/serve/engine/protocol.py (OpenAIBaseModel): extra fields are allowed
    and logged ("The following fields were present in the request but ignored")."""
    driver = make_driver()
    body = {"model": TINY_MODEL, "prompt": "x", "max_tokens": 2, "colour": "blue", "zz": 1}
    with TestClient(bare_app(lambda: driver)) as http, caplog.at_level(logging.INFO):
        r = http.post("/v1/completions", json=body)
    assert r.status_code == 200, r.text
    lines = [rec.getMessage() for rec in caplog.records if "colour" in rec.getMessage()]
    assert len(lines) == 1 and "zz" in lines[0]
    with TestClient(bare_app(lambda: driver, strict_request_fields=True)) as http:
        error = http.post("/v1/completions", json=body).json()["error"]
    assert (error["param"], error["code"]) == ("colour", "unknown_parameter")


def test_n_above_one_with_greedy_sampling_is_refused(app_server):
    """vllm/sampling_params.py (_verify_greedy_sampling): "n must be 1 when using greedy
    sampling, got 2." Beam search (its own params in vLLM) still takes n beams."""
    url = app_server.url + "/v1/completions"
    r = httpx.post(url, json={"prompt": "x", "n": 2, "temperature": 0}, timeout=30)
    error = r.json()["error"]
    assert r.status_code == 400 and error["param"] == "n"
    assert error["message"] == "n must be 1 when using greedy sampling, got 2."
    beams = {"prompt": "x", "n": 2, "use_beam_search": True, "max_tokens": 2}
    assert len(httpx.post(url, json=beams, timeout=30).json()["choices"]) == 2


def test_chat_template_fields_reach_the_template(app_server, tiny_model, monkeypatch):
    """vllm/entrypoints/openai/chat_completion/protocol.py: add_generation_prompt,
    continue_final_message and chat_template_kwargs go to the template; both flags true: 400."""
    tokenizer = tiny_model[1]
    messages = [*HI, {"role": "assistant", "content": "Once upon"}]
    url = app_server.url + "/v1/chat/completions"
    body = {"messages": messages, "max_tokens": 1, "continue_final_message": True,
            "add_generation_prompt": False}  # fmt: skip
    expected = tokenizer.apply_chat_template(messages, continue_final_message=True,
                                             tokenize=False)  # fmt: skip
    r = httpx.post(url, json=body, timeout=30)
    assert r.json()["usage"]["prompt_tokens"] == len(
        tokenizer.encode(expected, add_special_tokens=False)
    )
    seen = []
    apply = tokenizer.apply_chat_template
    monkeypatch.setattr(tokenizer, "apply_chat_template",
                        lambda *a, **kw: seen.append(kw) or apply(*a, **kw))  # fmt: skip
    body = {
        "messages": HI,
        "max_tokens": 1,
        "chat_template_kwargs": {"enable_thinking": False, "tokenize": True},
    }
    assert httpx.post(url, json=body, timeout=30).status_code == 200
    assert seen[-1]["enable_thinking"] is False and seen[-1]["tokenize"] is False
    both = {"messages": messages, "continue_final_message": True, "add_generation_prompt": True}
    error = httpx.post(url, json=both, timeout=30).json()["error"]
    assert error["param"] == "continue_final_message" and "Cannot set both" in error["message"]


def test_echo_puts_the_prompt_first(app_server):
    """vllm/entrypoints/openai/completion/serving.py (echo: prompt text + output, in the
    first chunk when streamed); serving_chat: the last message when it is the assistant's."""
    client = openai_client(app_server.url)
    kw = dict(model=TINY_MODEL, prompt="Once upon a time", max_tokens=4, temperature=0)
    plain = client.completions.create(**kw).choices[0].text
    assert client.completions.create(echo=True, **kw).choices[0].text == kw["prompt"] + plain
    chunks = list(client.completions.create(echo=True, stream=True, **kw))
    assert chunks[0].choices[0].text.startswith(kw["prompt"])
    assert "".join(c.choices[0].text for c in chunks) == kw["prompt"] + plain
    said = [*HI, {"role": "assistant", "content": "Once"}]
    chat = client.chat.completions.create(model=TINY_MODEL, messages=said, max_tokens=3,
                                          temperature=0, extra_body={"echo": True})  # fmt: skip
    assert chat.choices[0].message.content.startswith("Once")


def test_a_list_of_prompts_is_a_batch(app_server):
    """vllm/entrypoints/openai/completion/serving.py: one request per prompt, choice index =
    prompt index * n + choice, one id, usage summed."""
    client = openai_client(app_server.url)
    prompts = ["Once upon a time", "The weather today"]
    kw = dict(model=TINY_MODEL, max_tokens=4, temperature=0)
    alone = [client.completions.create(prompt=p, **kw) for p in prompts]
    batch = client.completions.create(prompt=prompts, **kw)
    assert [c.index for c in batch.choices] == [0, 1]
    assert [c.text for c in batch.choices] == [a.choices[0].text for a in alone]
    assert batch.usage.prompt_tokens == sum(a.usage.prompt_tokens for a in alone)
    chunks = list(
        client.completions.create(
            prompt=prompts, n=2, temperature=1, seed=1, max_tokens=3, model=TINY_MODEL, stream=True
        )
    )
    assert len({c.id for c in chunks}) == 1
    finished = sorted(c.choices[0].index for c in chunks if c.choices[0].finish_reason)
    assert finished == [0, 1, 2, 3]


def test_more_logprobs_than_max_logprobs_is_vllms_400(make_driver, app_server):
    """vllm/sampling_params.py (_validate_logprobs: "Requested sample logprobs of N, which is
    greater than max allowed: M", parameter logprobs, read as vllm/exceptions.py's
    VLLMValidationError writes it); vllm/config/model.py (--max-logprobs defaults to 20).
    prompt_logprobs: this engine keeps none, so any is refused."""
    driver = make_driver()
    server = Server(bare_app(lambda: driver, max_logprobs=2))
    chat = {"model": TINY_MODEL, "messages": HI, "max_tokens": 2, "logprobs": True}
    completion = {"model": TINY_MODEL, "prompt": "Hi", "max_tokens": 2}
    try:
        for path, body, asked in (
            ("/v1/chat/completions", chat | {"top_logprobs": 2}, None),
            ("/v1/chat/completions", chat | {"top_logprobs": 3}, 3),
            ("/v1/completions", completion | {"logprobs": 2}, None),
            ("/v1/completions", completion | {"logprobs": 5}, 5),
        ):
            r = httpx.post(server.url + path, json=body, timeout=30)
            if asked is None:
                assert r.status_code == 200, r.text
                continue
            assert r.status_code == 400 and r.json()["error"]["param"] == "logprobs"
            assert r.json()["error"]["message"] == (
                f"Requested sample logprobs of {asked}, which is greater than max allowed: 2 "
                f"(parameter=logprobs, value={asked})"
            )
        spec = httpx.get(server.url + "/openapi.json").json()["paths"]
        chat_schema = spec["/v1/chat/completions"]["post"]["requestBody"]["content"]
        top = chat_schema["application/json"]["schema"]["properties"]["top_logprobs"]
        assert top["maximum"] == 2  # the document says it too
    finally:
        server.stop()
    r = httpx.post(app_server.url + "/v1/chat/completions", json=chat | {"top_logprobs": 21})
    assert r.status_code == 400 and "max allowed: 20 " in r.json()["error"]["message"]
    r = httpx.post(app_server.url + "/v1/completions", json=completion | {"prompt_logprobs": 1})
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt_logprobs"
