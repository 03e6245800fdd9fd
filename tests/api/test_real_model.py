"""The real default model (SmolLM2-135M-Instruct) behind the API: chat template, greedy."""

import pytest
from fastapi import FastAPI

from engine import EngineConfig, LLMEngine
from playground.driver import EngineDriver
from playground.server.api import register_api
from tests.api.server import Server, openai_client

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def real_server(default_model):
    model, tokenizer = default_model
    config = EngineConfig(max_num_seqs=4, max_num_batched_tokens=256, num_kv_blocks=64)
    driver = EngineDriver(LLMEngine(model, tokenizer, config))
    app = FastAPI()
    register_api(app, driver)  # the model's own name
    server = Server(app)
    server.tokenizer = tokenizer
    yield server
    server.stop()
    driver.stop()


def test_greedy_chat_on_the_real_model(real_server):
    client = openai_client(real_server.url)
    (model,) = [m.id for m in client.models.list().data]
    assert model == "SmolLM2-135M-Instruct"
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    r = client.chat.completions.create(
        model=model, messages=messages, max_tokens=12, temperature=0, logprobs=True
    )
    tok = real_server.tokenizer
    text = r.choices[0].message.content
    assert "Paris" in text
    template = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert r.usage.prompt_tokens == len(tok.encode(template, add_special_tokens=False))
    assert r.usage.completion_tokens == len(r.choices[0].logprobs.content)
    eos = r.choices[0].finish_reason == "stop"  # the EOS token counts, as vLLM counts it
    assert r.usage.completion_tokens == len(tok.encode(text, add_special_tokens=False)) + eos
    assert r.choices[0].finish_reason in ("stop", "length")
