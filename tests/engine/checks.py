"""Engine checks: greedy equality with a stock reference, staggered runs, no leaked blocks."""

import torch
from transformers import GenerationConfig

from bench.common import classify


class GreedyChecker:
    """Compares engine outputs with `reference.generate(do_sample=False)` run alone."""

    _memo: dict = {}  # (reference, prompt, max_tokens, eos) -> reference tokens, suite-wide

    def __init__(self, reference):
        self.reference = reference
        self.num_exact = 0
        self.num_near_ties = 0

    @torch.inference_mode()
    def reference_tokens(self, prompt_ids: list[int], max_tokens: int, eos=None) -> list[int]:
        key = (id(self.reference), tuple(prompt_ids), max_tokens, tuple(eos or ()))
        if key not in self._memo:
            config = GenerationConfig(
                max_new_tokens=max_tokens, do_sample=False, eos_token_id=eos, pad_token_id=0
            )
            out = self.reference.generate(torch.tensor([prompt_ids]), generation_config=config)
            self._memo[key] = out[0, len(prompt_ids) :].tolist()
        return self._memo[key]

    @torch.inference_mode()
    def check(self, prompt_ids: list[int], engine_ids: list[int], max_tokens: int, eos=None):
        ref = self.reference_tokens(prompt_ids, max_tokens, eos)
        verdict = classify(self.reference, prompt_ids, ref, engine_ids)
        assert verdict != "mismatch", f"engine {engine_ids} vs reference {ref}"
        self.num_exact += verdict == "exact"
        self.num_near_ties += verdict == "near_tie"


def run_staggered(engine, requests, every: int = 2):
    """Add `requests` [(id, prompt, params)] one every `every` steps; run to the end.

    Returns {request_id: final RequestOutput} and checks that each request finishes once.
    """
    pending, finals, step = list(requests), {}, 0
    while pending or engine.has_unfinished_requests():
        if pending and step % every == 0:
            engine.add_request(*pending.pop(0))
        for out in engine.step():
            if out.finished:
                assert out.request_id not in finals, f"{out.request_id} finished twice"
                finals[out.request_id] = out
        step += 1
        assert step < 10_000, "engine does not finish"
    return finals


def assert_no_leak(engine):
    snap = engine.snapshot()
    assert snap.kv_blocks_used == 0, f"{snap.kv_blocks_used} KV blocks leaked"
    assert snap.num_running == snap.num_waiting == 0
    engine.block_manager.check_invariants([])
    assert not engine.scheduler.running and not engine.scheduler.waiting
