"""Fixtures of the HTTP API tests: the real app (board + /v1 + /metrics) on 127.0.0.1.

The bulk runs on a tiny random Llama with the bundled tokenizer (fast, greedy-deterministic);
test_real_model.py serves the real default model. Servers run uvicorn in a thread.
"""

from dataclasses import replace

import pytest

from engine import EngineConfig
from playground.driver import EngineDriver
from tests.api.server import TINY_MODEL, Server, openai_client
from tests.tiny_models import make_engine

SERVER_ENGINE = dict(max_num_seqs=16, max_num_batched_tokens=256, block_size=16, num_kv_blocks=64)


@pytest.fixture(scope="session")
def make_driver(tiny_model):
    """EngineDriver factory over the tiny model; every driver is stopped at the end."""
    model, tokenizer = tiny_model
    drivers = []

    def make(**overrides) -> EngineDriver:
        config = EngineConfig(**{**SERVER_ENGINE, **overrides})
        engine = make_engine(model, tokenizer, config)
        factory = lambda cfg: make_engine(model, tokenizer, cfg)  # noqa: E731
        drivers.append(EngineDriver(engine, engine_factory=factory, base_config=config))
        return drivers[-1]

    yield make
    for d in drivers:
        d.stop()


@pytest.fixture(scope="session")
def app_server(make_driver):
    """The real app (app.create_app: board + /v1 + /metrics) over the tiny model."""
    import app as app_module

    driver = make_driver()
    driver.limits = replace(driver.limits, max_in_flight=64)  # every test client is 127.0.0.1
    driver.model.config._name_or_path = TINY_MODEL
    server = Server(app_module.create_app(driver))
    server.driver, server.model = driver, TINY_MODEL
    yield server
    server.stop()


@pytest.fixture
def client(app_server):
    return openai_client(app_server.url)
