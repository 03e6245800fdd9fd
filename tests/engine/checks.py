"""Engine checks: greedy equality with a stock reference, staggered runs, no leaked blocks."""

import math
import weakref

import torch
from transformers import GenerationConfig

from bench.common import classify

BF16_NEAR_TIE_ULPS = 2  # bfloat16 keeps 8 significant bits: a tie is within 2 ulps of the top


class GreedyChecker:
    """Compares engine outputs with `reference.generate(do_sample=False)` run alone."""

    # reference -> {(prompt, max_tokens, eos): tokens}, suite-wide. Weak keys: the tokens go
    # with their model, so a later model that gets a freed one's id() never reads them.
    _memo: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()

    def __init__(self, reference):
        self.reference = reference
        self.num_exact = 0
        self.num_near_ties = 0

    @torch.inference_mode()
    def reference_tokens(self, prompt_ids: list[int], max_tokens: int, eos=None) -> list[int]:
        memo = self._memo.setdefault(self.reference, {})
        key = (tuple(prompt_ids), max_tokens, tuple(eos or ()))
        if key not in memo:
            config = GenerationConfig(
                max_new_tokens=max_tokens, do_sample=False, eos_token_id=eos, pad_token_id=0
            )
            ids = torch.tensor([prompt_ids], device=self.reference.device)
            out = self.reference.generate(ids, generation_config=config)
            memo[key] = out[0, len(prompt_ids) :].tolist()
        return memo[key]

    @torch.inference_mode()
    def check(self, prompt_ids: list[int], engine_ids: list[int], max_tokens: int, eos=None):
        ref = self.reference_tokens(prompt_ids, max_tokens, eos)
        verdict = classify(self.reference, prompt_ids, ref, engine_ids)
        assert verdict != "mismatch", f"engine {engine_ids} vs reference {ref}"
        self.num_exact += verdict == "exact"
        self.num_near_ties += verdict == "near_tie"

    @torch.inference_mode()
    def check_bf16(
        self, prompt_ids, engine_ids, max_tokens: int, eos=None, ulps: int = BF16_NEAR_TIE_ULPS
    ):
        """The bf16 criterion (README): equal, or parted at a bf16 near-tie, where the engine's
        token's logit is within `ulps` bf16 ulps of the reference's top logit."""
        ref = self.reference_tokens(prompt_ids, max_tokens, eos)
        if engine_ids == ref:
            self.num_exact += 1
            return
        i = next((k for k, (a, b) in enumerate(zip(engine_ids, ref, strict=False)) if a != b), None)
        assert i is not None, f"lengths differ: engine {len(engine_ids)} vs reference {len(ref)}"
        ids = torch.tensor([prompt_ids + ref[:i]], device=self.reference.device)
        logits = self.reference(ids).logits[0, -1].float()
        top = logits.max().item()
        ulp = 2.0 ** (math.floor(math.log2(abs(top))) - 7)  # bf16: 8 significant bits
        below = top - logits[engine_ids[i]].item()
        assert below <= ulps * ulp, (
            f"parted at token {i}: engine {engine_ids[i]}, {below:.3f} below the reference's "
            f"top logit ({ulp=})"
        )
        self.num_near_ties += 1


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


def beam_events(records) -> tuple[set[tuple[int, int]], list[int]]:
    """What the step log says the beams did, from StepRecords: the forks as (child, parent)
    and the beams pruned, from details like "forked beam 5 from 2, pruned 3, 4"."""
    forks, pruned = set(), []
    for e in (e for r in records for e in r.events if e.kind == "beams"):
        head, _, tail = e.detail.partition("pruned ")
        for part in filter(None, head.split(", ")):
            _, _, child, _, parent = part.split()
            forks.add((int(child), int(parent)))
        pruned += [int(b) for b in tail.split(", ")] if tail else []
    return forks, pruned


def assert_no_leak(engine):
    snap = engine.snapshot()
    assert snap.kv_blocks_used == 0, f"{snap.kv_blocks_used} KV blocks leaked"
    assert snap.num_running == snap.num_waiting == 0
    engine.block_manager.check_invariants([])
    assert not engine.scheduler.running and not engine.scheduler.waiting


POISON = 777  # a token id whose presence in a forward makes the (wrapped) forward raise


def poison(engine, monkeypatch) -> None:
    """Make the engine's forward raise on any batch whose input holds POISON: the paged
    runner's forward (native or transformers modules), or the model's for hf_cache."""
    target = engine.runner if engine.config.kv_backend == "paged" else engine.runner.model
    real = target.forward

    def forward(*args, **kwargs):
        input_ids = kwargs["input_ids"] if "input_ids" in kwargs else args[0]
        if (input_ids == POISON).any():
            raise RuntimeError("injected fault")
        return real(*args, **kwargs)

    monkeypatch.setattr(target, "forward", forward)
