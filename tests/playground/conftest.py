"""Fixtures of the playground tests: a tiny random Llama with the default tokenizer."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from engine import EngineConfig, LLMEngine
from playground.driver import EngineDriver

TINY_CONFIG = dict(max_num_seqs=8, max_num_batched_tokens=64, block_size=4, num_kv_blocks=128)


@pytest.fixture(scope="session")
def tiny_model(default_model):
    """(model, tokenizer): 2 layers of 64, random weights, the bundled model's tokenizer."""
    _, tokenizer = default_model
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=49152, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
    )  # fmt: skip
    return LlamaForCausalLM(config).eval(), tokenizer


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
