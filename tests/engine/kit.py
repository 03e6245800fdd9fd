"""Engine test kit: tiny random models, a stock reference, and the greedy-equality check."""

import copy
import math

import torch
from transformers import (
    GenerationConfig,
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from engine import EngineConfig, LLMEngine
from engine.loader import transpose_linear_weights

TINY = dict(
    vocab_size=49152,  # the SmolLM2 tokenizer's
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=1024,
    eos_token_id=2,
    bos_token_id=1,
)
TINY_ARCHS = {
    "llama": (LlamaConfig, LlamaForCausalLM, {}),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM, {}),  # q/k/v projections with bias
    "qwen3": (Qwen3Config, Qwen3ForCausalLM, {"head_dim": 16}),  # q/k RMS norm
}
NEAR_TIE = 1e-3  # DESIGN.md's correctness criterion
BF16_NEAR_TIE_ULPS = 2  # bfloat16 keeps 8 significant bits: a tie is within 2 ulps of the top


def make_tiny_pair(arch: str, seed: int = 0):
    """(model for the engine, identical stock model for reference), from separate configs.
    The engine's model gets the weight layout `load_model` gives a CPU model."""
    config_cls, model_cls, extra = TINY_ARCHS[arch]
    config = config_cls(**TINY, **extra)
    torch.manual_seed(seed)
    model = model_cls(copy.deepcopy(config)).eval()
    # Bigger weights than the init's 0.02 spread the logits, so exact ties stay rare.
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.mul_(4.0)
    reference = model_cls(copy.deepcopy(config)).eval()
    reference.load_state_dict(model.state_dict())
    transpose_linear_weights(model)
    return model, reference


def make_engine(model, tokenizer, **overrides) -> LLMEngine:
    config = dict(block_size=4, num_kv_blocks=256, max_num_batched_tokens=64, max_num_seqs=8)
    return LLMEngine(model, tokenizer, EngineConfig(**{**config, **overrides}), seed=0)


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
            ids = torch.tensor([prompt_ids], device=self.reference.device)
            out = self.reference.generate(ids, generation_config=config)
            self._memo[key] = out[0, len(prompt_ids) :].tolist()
        return self._memo[key]

    def check(self, prompt_ids: list[int], engine_ids: list[int], max_tokens: int, eos=None):
        """DESIGN.md's criterion: equal, or the engine took the reference's second choice at
        the first difference, where the top-2 logits are within NEAR_TIE."""
        parting = self._first_difference(prompt_ids, engine_ids, max_tokens, eos)
        if parting is not None:
            got, logits = parting
            top2 = logits.topk(2)
            gap = (top2.values[0] - top2.values[1]).item()
            assert gap <= NEAR_TIE and got == top2.indices[1].item(), (
                f"diverged: engine {got}, reference top-2 {top2.indices.tolist()}, gap {gap:.2e}"
            )

    def check_bf16(
        self, prompt_ids, engine_ids, max_tokens: int, eos=None, ulps: int = BF16_NEAR_TIE_ULPS
    ):
        """The bf16 criterion (README): equal, or parted at a bf16 near-tie, where the engine's
        token's logit is within `ulps` bf16 ulps of the reference's top logit."""
        parting = self._first_difference(prompt_ids, engine_ids, max_tokens, eos)
        if parting is not None:
            got, logits = parting
            top = logits.max().item()
            ulp = 2.0 ** (math.floor(math.log2(abs(top))) - 7)  # bf16: 8 significant bits
            below = top - logits[got].item()
            assert below <= ulps * ulp, (
                f"parted: engine {got}, {below:.3f} below the reference's top logit ({ulp=})"
            )

    @torch.inference_mode()
    def _first_difference(self, prompt_ids, engine_ids, max_tokens, eos):
        """None (counted exact) when the tokens are equal, else the engine's token and the
        reference's float logits (vocab,) at the first difference (counted as a near-tie)."""
        ref = self.reference_tokens(prompt_ids, max_tokens, eos)
        if engine_ids == ref:
            self.num_exact += 1
            return None
        i = next((k for k, (a, b) in enumerate(zip(engine_ids, ref, strict=False)) if a != b), None)
        assert i is not None, f"lengths differ: engine {len(engine_ids)} vs reference {len(ref)}"
        ids = torch.tensor([prompt_ids + ref[:i]], device=self.reference.device)
        self.num_near_ties += 1
        return engine_ids[i], self.reference(ids).logits[0, -1].float()


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
