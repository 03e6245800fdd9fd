"""The official `openai` client against the real app: chat and completions, streamed or not."""

from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest

from playground.board.cards import render_cards
from playground.server.models import served_model_names
from tests.api.server import TINY_MODEL, wait_for

MESSAGES = [{"role": "user", "content": "Name three colours."}]


def _template_ids(tokenizer, messages) -> list[int]:
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return tokenizer.encode(text, add_special_tokens=False)


def _join(stream) -> tuple[str, str | None, object]:
    """(joined text, finish_reason, usage) of a one-choice chat or completion stream."""
    text, finish, usage = "", None, None
    for chunk in stream:
        usage = chunk.usage or usage
        for choice in chunk.choices:
            text += (choice.delta.content or "") if hasattr(choice, "delta") else choice.text
            finish = choice.finish_reason or finish
    return text, finish, usage


def _finished_record(driver, request_id: str):
    """The board's ledger record of a request, once the published state has it finished."""
    return wait_for(
        lambda: next((x for x in driver.state().records
                      if x.request_id == request_id and x.finished), None)
    )  # fmt: skip


def test_models_lists_the_served_model(client):
    models = client.models.list().data
    assert [m.id for m in models] == [TINY_MODEL]


def test_chat_completion_counts_tokens_like_the_tokenizer(client, app_server, tiny_model):
    _, tokenizer = tiny_model
    r = client.chat.completions.create(
        model=TINY_MODEL, messages=MESSAGES, max_tokens=6, temperature=0, logprobs=True,
        top_logprobs=2,
    )  # fmt: skip
    choice = r.choices[0]
    assert r.object == "chat.completion" and choice.message.role == "assistant"
    assert choice.finish_reason == "length"  # a random model does not stop on its own
    assert r.usage.prompt_tokens == len(_template_ids(tokenizer, MESSAGES))
    assert r.usage.completion_tokens == 6 == len(choice.logprobs.content)
    assert r.usage.total_tokens == r.usage.prompt_tokens + 6
    assert all(len(t.top_logprobs) == 2 for t in choice.logprobs.content)
    assert "".join(t.token for t in choice.logprobs.content) == choice.message.content
    # it is on the board, labelled as an API request
    record = _finished_record(app_server.driver, r.id)
    assert record.owner.startswith("api:") and record.text == choice.message.content


def test_completion_counts_tokens_like_the_tokenizer(client, tiny_model):
    _, tokenizer = tiny_model
    prompt = "The capital of France is"
    r = client.completions.create(model=TINY_MODEL, prompt=prompt, max_tokens=5, temperature=0,
                                  logprobs=1)  # fmt: skip
    assert r.object == "text_completion" and r.choices[0].finish_reason == "length"
    assert r.usage.prompt_tokens == len(tokenizer.encode(prompt))
    assert r.usage.completion_tokens == 5 == len(r.choices[0].logprobs.tokens)
    # a prompt of token ids is taken as it is
    ids = tokenizer.encode(prompt)
    r2 = client.completions.create(model=TINY_MODEL, prompt=ids, max_tokens=5, temperature=0)
    assert r2.choices[0].text == r.choices[0].text and r2.usage.prompt_tokens == len(ids)


def test_streams_join_to_the_greedy_non_streamed_text(client):
    kw = dict(model=TINY_MODEL, max_tokens=12, temperature=0)
    chat = client.chat.completions.create(messages=MESSAGES, **kw)
    text, finish, usage = _join(
        client.chat.completions.create(
            messages=MESSAGES, stream=True, stream_options={"include_usage": True}, **kw
        )
    )
    assert (text, finish) == (chat.choices[0].message.content, chat.choices[0].finish_reason)
    assert (usage.prompt_tokens, usage.completion_tokens) == (
        chat.usage.prompt_tokens, chat.usage.completion_tokens,
    )  # fmt: skip
    plain = client.completions.create(prompt="Once upon a time", **kw)
    text, finish, usage = _join(
        client.completions.create(prompt="Once upon a time", stream=True, **kw)
    )
    assert (text, finish) == (plain.choices[0].text, plain.choices[0].finish_reason)
    assert usage is None  # only with stream_options.include_usage


def test_sixteen_concurrent_streams_all_finish_in_shared_batches(client, app_server):
    def one(i: int):
        stream = client.chat.completions.create(
            model=TINY_MODEL, messages=[{"role": "user", "content": f"Count to {i}."}],
            max_tokens=8 + i % 4, temperature=0.8, seed=i, stream=True,
        )  # fmt: skip
        text, finish, _ = _join(stream)
        return text, finish

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(one, range(16)))
    assert all(finish == "length" and text for text, finish in results)
    steps = app_server.driver.snapshot().steps
    assert max(s.num_seqs for s in steps) > 1  # continuous batching, not one at a time


def test_n_seed_and_stop(client):
    kw = dict(model=TINY_MODEL, prompt="Hello there", max_tokens=10)
    a = client.completions.create(n=2, seed=7, temperature=1.0, **kw)
    b = client.completions.create(n=2, seed=7, temperature=1.0, **kw)
    assert [c.index for c in a.choices] == [0, 1]
    assert [c.text for c in a.choices] == [c.text for c in b.choices]
    assert a.usage.completion_tokens == 20
    greedy = client.completions.create(temperature=0, **kw).choices[0].text
    stop = greedy[len(greedy) // 2 :][:3]
    cut = client.completions.create(temperature=0, stop=[stop], **kw).choices[0]
    assert cut.finish_reason == "stop" and cut.text == greedy[: greedy.index(stop)]


def test_api_requests_show_on_the_board(client, app_server):
    r = client.completions.create(model=TINY_MODEL, prompt="Board check", max_tokens=3)
    record = _finished_record(app_server.driver, r.id)  # published up to 50 ms later
    state = app_server.driver.state()
    assert record.owner.startswith("api:") and record.stop_reason == "max_tokens"
    assert any(s.request_id == r.id for s in state.snapshot.requests)  # queues and timeline
    html = render_cards(state)  # the client's latest request has its card, "API <hash>"
    name = f"API {record.owner.removeprefix('api:')[:4]}"
    assert f'<span class="pg-name">{name}</span><span class="pg-rid">{r.id}</span>' in html


def test_sampling_fields_reach_sampling_params(client, app_server, monkeypatch):
    driver, sent = app_server.driver, []
    submit = driver.submit

    def spy(prompt, params=None, **kw):
        sent.append(params)
        return submit(prompt, params, **kw)

    monkeypatch.setattr(driver, "submit", spy)
    vllm = {"top_k": 7, "min_p": 0.05, "repetition_penalty": 1.3, "stop_token_ids": [5],
            "ignore_eos": True}  # fmt: skip
    client.chat.completions.create(
        model=TINY_MODEL, messages=MESSAGES, max_tokens=3, temperature=0.7, top_p=0.9, seed=11,
        n=2, stop=["zz"], logprobs=True, top_logprobs=3, extra_body=vllm,
    )  # fmt: skip
    client.completions.create(model=TINY_MODEL, prompt="x", max_tokens=2, top_p=0.5, logprobs=2,
                              extra_body={"top_k": -1, "min_p": 0.2})  # fmt: skip
    chat, plain = sent
    assert (chat.max_tokens, chat.temperature, chat.top_p, chat.seed) == (3, 0.7, 0.9, 11)
    assert (chat.top_k, chat.min_p, chat.repetition_penalty, chat.n) == (7, 0.05, 1.3, 2)
    assert (chat.stop, chat.stop_token_ids, chat.ignore_eos) == (["zz"], [5], True)
    assert chat.logprobs == 3  # top_logprobs
    assert (plain.top_p, plain.top_k, plain.min_p, plain.logprobs) == (0.5, 0, 0.2, 2)  # -1: off
    assert (plain.temperature, plain.repetition_penalty, plain.n) == (1.0, 1.0, 1)  # defaults


SMOL = ("SmolLM2-135M-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct")


@pytest.mark.parametrize("name,served", [
    ("SmolLM2-135M-Instruct.Q4_1-98362432-747cb1f0195582d0", SMOL),
    ("SmolLM2-135M-Instruct.Q4_1-98362432-1712345678901234567", SMOL),
    ("llama-2-7b", ("llama-2-7b",)),
    ("model-2024-11", ("model-2024-11",)),
])  # fmt: skip
def test_served_name_of_a_converted_gguf_drops_the_cache_suffix(tmp_path, name, served):
    (tmp_path / name).mkdir()
    model = SimpleNamespace(config=SimpleNamespace(_name_or_path=str(tmp_path / name)))
    assert served_model_names(model) == served


@pytest.mark.parametrize("hub_id,served", [
    ("HuggingFaceTB/SmolLM2-135M-Instruct", SMOL),  # the default model on a Space
    ("Qwen/Qwen2.5-0.5B-Instruct", ("Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct")),
    ("gpt2", ("gpt2",)),
])  # fmt: skip
def test_a_hub_model_is_served_by_its_short_name_with_the_hub_id_as_an_alias(hub_id, served):
    model = SimpleNamespace(config=SimpleNamespace(_name_or_path=hub_id))
    assert served_model_names(model) == served
