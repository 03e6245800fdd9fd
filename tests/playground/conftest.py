"""Fixtures of the playground tests: a tiny random Llama with the default tokenizer."""

import pytest

from engine import EngineConfig, LLMEngine
from playground.driver import EngineDriver

TINY_CONFIG = dict(max_num_seqs=8, max_num_batched_tokens=64, block_size=4, num_kv_blocks=128)


@pytest.fixture
def make_engine(tiny_model):
    model, tokenizer = tiny_model

    def make(config: EngineConfig | None = None, **overrides) -> LLMEngine:
        return LLMEngine(model, tokenizer, config or EngineConfig(**{**TINY_CONFIG, **overrides}))

    return make


@pytest.fixture
def driver(make_engine):
    d = EngineDriver(make_engine(), engine_factory=make_engine)
    yield d
    d.stop()
