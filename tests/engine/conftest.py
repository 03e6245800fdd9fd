"""Engine fixtures: the real tokenizer, tiny random model pairs, a stock SmolLM2 reference."""

import pytest

from tests.tiny_models import TINY_ARCHS, make_tiny_pair


@pytest.fixture(scope="session")
def tokenizer(default_model):
    return default_model[1]


@pytest.fixture(scope="session", params=list(TINY_ARCHS))
def tiny_pair(request):
    """(engine model, identical stock reference) for each tiny architecture."""
    return make_tiny_pair(request.param)


@pytest.fixture(scope="session")
def llama_pair():
    return make_tiny_pair("llama")


@pytest.fixture(scope="session")
def smollm2_reference():
    """A second SmolLM2 model object in transformers' own weight layout and attention."""
    from engine.loader import load_model

    return load_model("default", cpu_layout=False)[0]
