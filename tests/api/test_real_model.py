"""The real default model (SmolLM2-135M-Instruct) behind the API: chat template, greedy, the
end of a turn."""

import re

import pytest
from fastapi import FastAPI

from engine import EngineConfig, LLMEngine
from playground.driver import EngineDriver
from playground.server.api import register_api
from playground.server.generation_config import GenerationDefaults, generation_defaults
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
    server.model, server.tokenizer = model, tokenizer
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


def test_a_chat_answer_stops_at_the_end_of_its_turn_as_vllm_does(real_server):
    """vllm/v1/engine/input_processor.py and vllm/sampling_params.py
    (update_from_generation_config): a request stops at the tokenizer's EOS and at its
    generation config's eos_token_id; for this model both are <|im_end|>, the chat template's
    end of a turn, and "auto" finds no sampling defaults (vllm/config/model.py). So an answer
    never runs on into a next turn; with skip_special_tokens off a marker would show."""
    tok, model = real_server.tokenizer, real_server.model
    assert (
        tok.eos_token
        == "<|im_end|>"
        == tok.convert_ids_to_tokens(model.generation_config.eos_token_id)
    )
    assert generation_defaults("auto", model, tok) == GenerationDefaults()
    client = openai_client(real_server.url)
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    shown = {"skip_special_tokens": False}
    greedy = client.chat.completions.create(
        model="default", messages=messages, max_tokens=64, temperature=0, extra_body=shown
    )
    sampled = client.chat.completions.create(
        model="default", messages=messages, max_tokens=64, n=4, seed=0, extra_body=shown
    )
    choices = [*greedy.choices, *sampled.choices]
    assert greedy.choices[0].finish_reason == "stop"  # at <|im_end|>, well before 64 tokens
    for choice in choices:
        text = choice.message.content
        assert "<|im_start|>" not in text and "<|im_end|>" not in text, text
        assert not re.search(r"^(user|assistant|system)$", text, re.MULTILINE), text
        if choice.finish_reason == "stop":
            assert choice.stop_reason is None  # EOS, not a stop string or token
