"""Greedy output through the engine equals transformers `generate`, in every batch mix.

The correctness criterion (docs/ARCHITECTURE.md): token for token, except a float near-tie at
the first difference.
"""

import pytest
import torch
from torch._dynamo.utils import counters

from engine import LLMEngine, SamplingParams, StopReason
from engine.loader import load_model
from tests.engine.checks import GreedyChecker, assert_no_leak, run_staggered
from tests.tiny_models import make_engine

SYSTEM = (
    "You are a patient teacher. You explain how large language models serve many users at "
    "once, with short sentences and concrete examples. "
)
PROMPTS = [
    SYSTEM + "What is a KV cache?",
    "Write a haiku about autumn leaves falling on a quiet pond.",
    SYSTEM + "Why does batching help throughput on a GPU?",
    "1, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144,",
    SYSTEM + "Explain preemption in one paragraph, as if to a student.",
    "Hi",
]
SCENARIOS = {
    "staggered": {},
    "chunked_prefill": dict(max_num_batched_tokens=8),
    "tiny_pool_preemption": dict(num_kv_blocks=24, max_num_batched_tokens=16),
    "static": dict(batching="static", max_num_batched_tokens=16),
    "hf_cache": dict(kv_backend="hf_cache"),
    "transformers_modules": dict(model_impl="transformers", max_num_batched_tokens=16),
    "sdpa_attention_preemption": dict(
        attention_backend="sdpa", num_kv_blocks=24, max_num_batched_tokens=16
    ),
    "no_prefix_cache_no_chunking": dict(
        enable_prefix_caching=False, enable_chunked_prefill=False, max_num_batched_tokens=128
    ),
}


def _requests(tokenizer, max_tokens=24, n=1):
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True, n=n)
    return [(f"r{i}", p, params) for i, p in enumerate(PROMPTS)]


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_greedy_equals_generate_on_tiny_models(tiny_pair, tokenizer, scenario):
    model, reference = tiny_pair
    engine = make_engine(model, tokenizer, **SCENARIOS[scenario])
    kernel = scenario != "hf_cache" and "attention_backend" not in SCENARIOS[scenario]
    assert engine.config.attention_backend == ("paged_kernel" if kernel else "sdpa")
    finals = run_staggered(engine, _requests(tokenizer))
    checker = GreedyChecker(reference)
    for i, prompt in enumerate(PROMPTS):
        out = finals[f"r{i}"]
        assert out.stop_reason == StopReason.MAX_TOKENS
        checker.check(tokenizer.encode(prompt), out.token_ids, 24)
    assert checker.num_exact + checker.num_near_ties == len(PROMPTS)
    assert checker.num_near_ties <= 1, "near-ties should be rare on these models"
    snap = engine.snapshot()
    if scenario in ("tiny_pool_preemption", "sdpa_attention_preemption"):
        assert snap.totals.num_preemptions > 0
        assert sum(o.metrics.num_preemptions for o in finals.values()) > 0
    if scenario in ("staggered", "chunked_prefill", "static"):
        assert engine.block_manager.num_prefix_hits > 0, "the shared system prompt was not reused"
        assert sum(o.metrics.num_cached_tokens for o in finals.values()) > 0
    if scenario == "chunked_prefill":
        assert max(s.num_tokens for s in snap.steps) <= 8
        assert any(e.kind == "prefill_chunk" for s in snap.steps for e in s.events)
    assert_no_leak(engine)


@pytest.mark.parametrize("kv_backend", ["paged", "hf_cache"])
def test_n_siblings_share_prompt_blocks_and_match_generate(llama_pair, tokenizer, kv_backend):
    model, reference = llama_pair
    engine = make_engine(model, tokenizer, kv_backend=kv_backend)
    prompt = PROMPTS[0]
    # top_k=1 draws the argmax: n > 1 needs sampling (vLLM refuses it with greedy)
    params = SamplingParams(max_tokens=12, temperature=1.0, top_k=1, ignore_eos=True, n=3)
    engine.add_request("fan", prompt, params)
    engine.step()  # the whole prompt fits one step: prefill + first tokens of 3 siblings
    num_prompt_blocks = -(-len(tokenizer.encode(prompt)) // 4)
    # Shared: 3 completions hold far fewer blocks than 3 private copies of the prompt.
    assert engine.snapshot().kv_blocks_used <= num_prompt_blocks + 2
    finals = run_staggered(engine, [])
    out = finals["fan"]
    assert [c.index for c in out.outputs] == [0, 1, 2]
    checker = GreedyChecker(reference)
    for completion in out.outputs:
        checker.check(tokenizer.encode(prompt), completion.token_ids, 12)
    assert_no_leak(engine)


def test_torch_compile_greedy_equals_generate_in_one_graph(llama_pair, tokenizer):
    """One compiled graph serves every step: prefill chunks, decode groups of mixed lengths,
    single decodes and recomputation after preemption; greedy output still equals generate."""
    model, reference = llama_pair
    counters.clear()
    engine = make_engine(
        model, tokenizer, torch_compile=True, num_kv_blocks=24, max_num_batched_tokens=16
    )
    assert engine.config.torch_compile
    finals = run_staggered(engine, _requests(tokenizer))
    assert counters["stats"]["unique_graphs"] == 1  # fullgraph: no eager parts, no recompiles
    checker = GreedyChecker(reference)
    for i, prompt in enumerate(PROMPTS):
        checker.check(tokenizer.encode(prompt), finals[f"r{i}"].token_ids, 24)
    assert checker.num_exact + checker.num_near_ties == len(PROMPTS)
    snap = engine.snapshot()
    assert snap.totals.num_preemptions > 0
    assert any(e.kind == "prefill_chunk" for s in snap.steps for e in s.events)
    assert any(s.num_tokens == 1 for s in snap.steps), "no batch-1 step ran compiled"
    assert_no_leak(engine)
    # A second engine on the model (a board reset) reuses the graph, and the model stays eager.
    make_engine(model, tokenizer, torch_compile=True)
    assert counters["stats"]["unique_graphs"] == 1
    assert not isinstance(model, torch._dynamo.eval_frame.OptimizedModule)
    # The per-sequence baseline is never compiled; its resolved config says so.
    assert not make_engine(
        model, tokenizer, torch_compile=True, kv_backend="hf_cache"
    ).config.torch_compile


def test_greedy_equals_generate_on_smollm2(default_model, smollm2_reference):
    """The real default model, chat-templated prompts, prefix cache and chunked prefill."""
    model, tokenizer = default_model
    reference = smollm2_reference
    engine = make_engine(model, tokenizer, block_size=16, max_num_batched_tokens=48)
    system = {"role": "system", "content": SYSTEM}
    questions = ["What is a KV cache?", "Name three colours.", "What is 12 times 11?"]
    requests = [
        (
            f"q{i}",
            [system, {"role": "user", "content": q}],
            SamplingParams(max_tokens=24, temperature=0),
        )
        for i, q in enumerate(questions)
    ]
    finals = run_staggered(engine, requests, every=3)
    checker = GreedyChecker(reference)
    for rid, messages, _ in requests:
        out = finals[rid]
        ids = out.prompt_token_ids
        assert ids == tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, return_dict=False
        )
        eos = engine.eos_token_ids
        checker.check(ids, out.token_ids, 24, eos=sorted(eos))
        assert out.text == tokenizer.decode(out.token_ids, skip_special_tokens=True)
        if out.stop_reason == StopReason.EOS:
            assert out.token_ids[-1] in eos
    assert engine.block_manager.num_prefix_hits > 0
    assert_no_leak(engine)


def test_smollm2_under_preemption(default_model, smollm2_reference):
    model, tokenizer = default_model
    reference = smollm2_reference
    engine = make_engine(
        model, tokenizer, block_size=8, num_kv_blocks=10, max_num_batched_tokens=32
    )
    params = SamplingParams(max_tokens=20, temperature=0, ignore_eos=True)
    prompts = ["The quick brown fox", "In 1492, Columbus", "def fibonacci(n):", "Dear diary, today"]
    finals = run_staggered(engine, [(f"p{i}", p, params) for i, p in enumerate(prompts)], every=1)
    assert engine.snapshot().totals.num_preemptions > 0
    checker = GreedyChecker(reference)
    for i, p in enumerate(prompts):
        checker.check(tokenizer.encode(p), finals[f"p{i}"].token_ids, 20)
    assert_no_leak(engine)


@torch.inference_mode()
def test_bfloat16_on_cpu_matches_transformers_in_bfloat16():
    """dtype="bfloat16" on CPU, the relaxed check (README): each answer's first 16 tokens
    equal transformers' bf16 `generate`, or part from it at a bf16 near-tie. Measured: 8-9 of
    12 equal; the others part at top-2 gaps of 1-2 ulps (0.125 at logits near 23), where
    transformers' own bf16 forwards disagree with each other too."""
    engine = LLMEngine.from_pretrained(
        "default", device="cpu", dtype="bfloat16", num_kv_blocks=256, max_num_batched_tokens=48
    )
    reference, _ = load_model("default", device="cpu", dtype="bfloat16", cpu_layout=False)
    system = {"role": "system", "content": SYSTEM}
    questions = ["What is a KV cache?", "Name three colours.", "What is 12 times 11?",
                 "Write a haiku about autumn.", "Why is the sky blue?",
                 "What is batching?"]  # fmt: skip
    inputs = [[system, {"role": "user", "content": q}] for q in questions] + PROMPTS
    outs = engine.generate(inputs, SamplingParams(max_tokens=16, temperature=0))
    checker = GreedyChecker(reference)
    for out in outs:
        checker.check_bf16(out.prompt_token_ids, out.token_ids, 16)
    print(f"bf16: {checker.num_exact}/{len(outs)} answers equal for 16 tokens, the rest at ties")
    assert checker.num_exact >= len(outs) // 2
