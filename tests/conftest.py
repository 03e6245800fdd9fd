"""Fixtures shared by the whole suite."""

import pytest

from engine.loader import load_model


@pytest.fixture(scope="session")
def default_model():
    """`(model, tokenizer)` of `load_model("default")`, loaded once per session."""
    return load_model("default")
