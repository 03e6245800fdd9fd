"""Fixtures shared by the whole suite, and the `cuda` marker's deselection."""

import os
from pathlib import Path

import pytest
import torch

from engine import EngineConfig, LLMEngine
from engine.loader import load_model
from playground.driver import EngineDriver
from tests.tiny_models import make_engine as tiny_engine
from tests.tiny_models import make_tiny_model

CUDA_TESTS_DEVICE = os.environ.get("CUDA_TESTS_DEVICE", "cuda")  # "cpu": a dry run of them
VLLM_PYTHON = Path(__file__).resolve().parent.parent / ".venv-vllm" / "bin" / "python"


def pytest_collection_modifyitems(config, items):
    """Tests marked `cuda` need a CUDA device: without one they are deselected, not skipped
    (CUDA_TESTS_DEVICE=cpu runs them on the CPU instead, on smaller models). Tests marked
    `vllm` need vLLM's venv (`make .venv-vllm/.stamp`): without it they are deselected."""
    needs = []
    if CUDA_TESTS_DEVICE == "cuda" and not torch.cuda.is_available():
        needs.append("cuda")
    if not VLLM_PYTHON.exists():
        needs.append("vllm")
    deselected = [item for item in items if any(item.get_closest_marker(m) for m in needs)]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        dropped = set(deselected)
        items[:] = [item for item in items if item not in dropped]


@pytest.fixture(scope="session")
def default_model():
    """`(model, tokenizer)` of `load_model("default")`, loaded once per session."""
    return load_model("default")


@pytest.fixture(scope="session")
def tiny_model(default_model):
    """(model, tokenizer): the tiny random Llama (context 512), the bundled model's tokenizer."""
    return make_tiny_model("llama", max_position_embeddings=512), default_model[1]


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


@pytest.fixture
def make_engine(tiny_model):
    """tests.tiny_models.make_engine over the tiny model: (config=None, **overrides)."""
    model, tokenizer = tiny_model

    def make(config: EngineConfig | None = None, **overrides) -> LLMEngine:
        return tiny_engine(model, tokenizer, config, **overrides)

    return make


@pytest.fixture
def driver(make_engine):
    d = EngineDriver(make_engine(), engine_factory=make_engine)
    yield d
    d.stop()
