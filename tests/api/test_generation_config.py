"""vLLM's --generation-config over HTTP, on tiny models whose generation config is set here
(each test cites the vLLM 0.32 source it follows)."""

import json
from contextlib import contextmanager
from dataclasses import replace

from transformers import GenerationConfig

from engine import EngineConfig, SamplingParams
from playground.driver import EngineDriver
from playground.server.generation_config import GenerationDefaults, generation_defaults
from tests.api.conftest import SERVER_ENGINE
from tests.api.server import TINY_MODEL, Server, bare_app, openai_client
from tests.tiny_models import make_engine, make_tiny_model

HI = [{"role": "user", "content": "Tell me a story."}]
MOST = 24  # the server's max_tokens limit: a chat's default length without a generation config


@contextmanager
def serving(model, tokenizer, generation_config: str):
    """An openai client of a server over `model` with this --generation-config."""
    config = EngineConfig(**SERVER_ENGINE)
    driver = EngineDriver(make_engine(model, tokenizer, config), base_config=config)
    driver.limits = replace(driver.limits, max_tokens=MOST)
    server = Server(bare_app(lambda: driver, generation_config=generation_config))
    try:
        yield openai_client(server.url)
    finally:
        server.stop()
        driver.stop()


def chat(client, **fields):
    return client.chat.completions.create(model=TINY_MODEL, messages=HI, **fields)


def test_auto_takes_the_models_sampling_defaults_and_vllm_none(tiny_model):
    """vllm/config/model.py (get_diff_sampling_param: "auto" reads the model's generation
    config, "vllm" none); chat_completion/protocol.py (to_sampling_params: the request's
    value, else the config's, else the API's); serve/utils/api_utils.py (get_max_tokens:
    max_new_tokens is a chat's default max_tokens, not a cap, with "auto")."""
    model = make_tiny_model(seed=3)
    model.generation_config = GenerationConfig(max_new_tokens=2)
    model.generation_config.temperature = 0.0  # set, not validated: greedy needs no do_sample
    with serving(model, tiny_model[1], "auto") as client:
        one, two = (chat(client, seed=s) for s in (1, 2))
        assert one.choices[0].message.content == two.choices[0].message.content  # greedy
        assert one.usage.completion_tokens == 2
        sampled = [chat(client, seed=s, temperature=1.0, max_tokens=6) for s in (1, 2)]
        assert sampled[0].choices[0].message.content != sampled[1].choices[0].message.content
        assert sampled[0].usage.completion_tokens == 6  # asked for: not capped
        done = client.completions.create(
            model=TINY_MODEL, prompt="Once", extra_body={"ignore_eos": True}
        )
        assert done.usage.completion_tokens == 16  # a completion's own default stays
    with serving(model, tiny_model[1], "vllm") as client:
        one, two = (chat(client, seed=s, extra_body={"ignore_eos": True}) for s in (1, 2))
        assert one.choices[0].message.content != two.choices[0].message.content  # temperature 1
        assert one.usage.completion_tokens == MOST


def test_a_folder_caps_every_request_and_stops_at_its_eos_ids(tiny_model, tmp_path):
    """chat_completion/serving.py (override_max_tokens: a folder's max_new_tokens caps every
    request); sampling_params.py (update_from_generation_config: its eos ids other than the
    tokenizer's stop a request as stop token ids, unless ignore_eos)."""
    model, tokenizer = make_tiny_model(seed=4), tiny_model[1]
    greedy = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)
    engine = make_engine(model, tokenizer, EngineConfig(**SERVER_ENGINE))
    tokens = list(engine.generate("Once upon", greedy)[0].outputs[0].token_ids)
    stop = tokens[2]
    config = {"temperature": 0.0, "max_new_tokens": 6, "eos_token_id": [stop, 2]}
    (tmp_path / "generation_config.json").write_text(json.dumps(config))
    assert generation_defaults(str(tmp_path), model, tokenizer) == GenerationDefaults(
        (("temperature", 0.0),),
        6,
        6,
        (stop,),  # 2: the model's own EOS already
    )
    with serving(model, tokenizer, str(tmp_path)) as client:
        out = client.completions.create(model=TINY_MODEL, prompt="Once upon", max_tokens=50)
        choice = out.choices[0]
        assert (choice.finish_reason, choice.stop_reason) == ("stop", stop)
        assert out.usage.completion_tokens == tokens.index(stop) + 1
        kept_on = client.completions.create(
            model=TINY_MODEL, prompt="Once upon", max_tokens=50, extra_body={"ignore_eos": True}
        )
        assert kept_on.usage.completion_tokens == 6  # capped
        assert kept_on.choices[0].finish_reason == "length"
