"""HFCacheRunner: one DynamicCache per sequence; a step that raises leaves them as they were."""

import pytest
import torch

from engine.hf_cache_runner import HFCacheRunner
from engine.scheduler import ScheduledSequence
from tests.engine.test_block_manager import make_seq


def run(runner, seqs, token=5):
    """One step over `seqs` (each computes all it has left); stand-in for the engine after."""
    logits, _ = runner.execute([ScheduledSequence(s, s.num_uncomputed_tokens) for s in seqs], [])
    for seq in seqs:
        seq.num_computed_tokens = seq.num_tokens
        seq.output_token_ids.append(token)
    return logits


def layer_lengths(runner, seq):
    return [layer.get_seq_length() for layer in runner.caches[seq.seq_id].layers]


def test_a_forward_failing_midway_rolls_back_every_cache_it_touched(llama_pair, monkeypatch):
    model = llama_pair[0]
    runner, clean = HFCacheRunner(model), HFCacheRunner(model)
    a, b = make_seq(range(100, 110), seq_id=0), make_seq(range(200, 207), seq_id=1)
    a2, b2 = make_seq(range(100, 110), seq_id=0), make_seq(range(200, 207), seq_id=1)
    run(runner, [a, b])
    run(clean, [a2, b2])
    layer = model.model.layers[1]
    real, calls = layer.forward, {"n": 0}

    def fail_on_b(*args, **kwargs):  # a's forward passes; b's raises after layer 0 ran
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("injected fault")
        return real(*args, **kwargs)

    monkeypatch.setattr(layer, "forward", fail_on_b)
    with pytest.raises(RuntimeError, match="injected"):
        runner.execute([ScheduledSequence(a, 1), ScheduledSequence(b, 1)], [])
    assert layer_lengths(runner, a) == [10, 10] and layer_lengths(runner, b) == [7, 7]
    monkeypatch.undo()
    assert torch.equal(run(runner, [b, a]), run(clean, [b2, a2]))  # retried in another order


def test_a_cache_out_of_step_is_a_clear_error(llama_pair):
    runner = HFCacheRunner(llama_pair[0])
    seq = make_seq(range(100, 106))
    run(runner, [seq])
    seq.num_computed_tokens -= 1  # the scheduler and the cache disagree
    with pytest.raises(RuntimeError, match="6 tokens cached.*out of step"):
        runner.execute([ScheduledSequence(seq, seq.num_uncomputed_tokens)], [])
    runner.free(seq)
    seq.num_computed_tokens += 1
    with pytest.raises(RuntimeError, match="no cache"):
        runner.execute([ScheduledSequence(seq, 1)], [])
