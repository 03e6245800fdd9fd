"""The greedy checker's memo of reference tokens."""

import gc

from tests.engine.checks import GreedyChecker
from tests.tiny_models import make_tiny_model


def test_reference_tokens_are_remembered_only_while_their_model_lives():
    """Keyed by id(), a freed model's tokens were read for a later model that got its id: one
    full run of the suite compared every engine path of one tiny model with another's tokens."""
    before = len(GreedyChecker._memo)
    model = make_tiny_model("llama")
    checker = GreedyChecker(model)
    tokens = checker.reference_tokens([5, 6, 7], 3)
    assert len(tokens) == 3 and checker.reference_tokens([5, 6, 7], 3) == tokens
    assert len(GreedyChecker._memo) == before + 1
    del model, checker
    gc.collect()
    assert len(GreedyChecker._memo) == before
