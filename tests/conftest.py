"""Fixtures shared by the whole suite, and the `cuda` marker's deselection."""

import os

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from engine.loader import load_model

CUDA_TESTS_DEVICE = os.environ.get("CUDA_TESTS_DEVICE", "cuda")  # "cpu": a dry run of them


def pytest_collection_modifyitems(config, items):
    """Tests marked `cuda` need a CUDA device: without one they are deselected, not skipped
    (CUDA_TESTS_DEVICE=cpu runs them on the CPU instead, on smaller models)."""
    if CUDA_TESTS_DEVICE != "cuda" or torch.cuda.is_available():
        return
    deselected = [item for item in items if item.get_closest_marker("cuda")]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if not item.get_closest_marker("cuda")]


@pytest.fixture(scope="session")
def default_model():
    """`(model, tokenizer)` of `load_model("default")`, loaded once per session."""
    return load_model("default")


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


class CharTokenizer:
    """A stand-in tokenizer: id 0 is `<eos>` (special), every other id is one character."""

    eos_token_id = 0

    def __init__(self, alphabet: str = "abcdefghijklmnopqrstuvwxyz .,!?"):
        self.pieces = ["<eos>", *alphabet]
        self.ids = {c: i for i, c in enumerate(self.pieces)}

    def __len__(self) -> int:
        return len(self.pieces)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [self.ids[c] for c in text]

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return "".join(self.pieces[i] for i in ids if not (skip_special_tokens and i == 0))


@pytest.fixture
def char_tokenizer():
    """A tiny character-level tokenizer (32 ids, `<eos>` = 0) for tests that need no model."""
    return CharTokenizer()
