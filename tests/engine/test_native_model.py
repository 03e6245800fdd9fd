"""NativeDecoder: the engine's own forward gives the transformers modules' logits."""

import copy

import pytest
import torch
from transformers import GemmaConfig, GemmaForCausalLM

from engine import EngineConfig, LLMEngine, SamplingParams
from engine.attention import AttentionContext, DecodeGroup, PrefillChunk
from engine.cpu import fused_ops, linear
from engine.cpu.fused_ops import FusedOps, TorchOps
from engine.cpu.native_model import NativeDecoder, unsupported_reason
from tests.engine.checks import GreedyChecker
from tests.tiny_models import TINY, TINY_ARCHS, make_engine, make_tiny_pair


@torch.inference_mode()
def _runner_logits(engine, prompt: list[int], extra: list[int]) -> torch.Tensor:
    """Logits of a prefill of `prompt`, then one decode step per token of `extra`, through
    the engine's runner forward (whichever implementation it runs)."""
    runner, bs = engine.runner, engine.config.block_size
    table = list(range(-(-(len(prompt) + len(extra)) // bs)))
    slots = [table[p // bs] * bs + p % bs for p in range(len(prompt) + len(extra))]
    rows = []
    ctx = AttentionContext(
        kv_caches=runner.kv_caches,
        slot_mapping=torch.tensor(slots[: len(prompt)]),
        decodes=[],
        prefills=[PrefillChunk(0, len(prompt), None, len(prompt), None)],
        gather_buffers=runner._new_gather_buffers(len(table)),
        decode_kernel=runner._decode_kernel,
    )
    rows.append(runner._forward(ctx, prompt, list(range(len(prompt))), list(range(len(prompt)))))
    for i, token in enumerate(extra):
        pos = len(prompt) + i
        nb = -(-(pos + 1) // bs)
        ctx.slot_mapping = torch.tensor([slots[pos]])
        ctx.prefills = []
        mask = torch.zeros(1, 1, 1, nb * bs).masked_fill_(torch.arange(nb * bs) > pos, -torch.inf)
        ctx.decodes = [DecodeGroup(0, 1, torch.tensor([table[:nb]]), torch.tensor([pos + 1]), mask)]
        rows.append(runner._forward(ctx, [token], [pos], [0]))
    return torch.cat(rows)


@pytest.mark.parametrize("arch", list(TINY_ARCHS))
@pytest.mark.parametrize("kernel", ["panels", "onednn", "torch"])
@pytest.mark.parametrize("ops", [FusedOps, TorchOps])
def test_native_logits_equal_the_transformers_modules(arch, kernel, ops, tokenizer, monkeypatch):
    monkeypatch.setattr(linear.torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    if kernel != "panels":  # the CPUs without AVX2, or no C compiler
        monkeypatch.setattr(linear, "panel_gemm", lambda: None)
    if kernel == "torch":  # the F.linear fallback (CUDA, a torch without oneDNN)
        monkeypatch.setattr(linear, "can_pack", lambda weight: False)
    if ops is TorchOps:  # the elementwise ops' fallback (CUDA, no C compiler)
        monkeypatch.setattr(fused_ops, "select", lambda device, dtype: TorchOps())
    model, reference = make_tiny_pair(arch)
    engine = make_engine(model, tokenizer, model_impl="native")
    assert engine.config.model_impl == "native"
    assert engine.runner.forward.backend == kernel
    assert isinstance(engine.runner.forward.ops, ops)
    prompt, extra = list(range(100, 117)), [5, 6, 7]
    got = _runner_logits(engine, prompt, extra)
    with torch.inference_mode():
        want = reference(torch.tensor([prompt + extra])).logits[0, len(prompt) - 1 :]
    torch.testing.assert_close(got[len(prompt) - 1 :], want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("arch", list(TINY_ARCHS))
def test_auto_picks_native_for_llama_family(arch, tokenizer):
    model, _ = make_tiny_pair(arch)
    assert unsupported_reason(model) is None
    assert make_engine(model, tokenizer).config.model_impl == "native"
    assert not isinstance(
        make_engine(model, tokenizer, model_impl="transformers").runner.forward, NativeDecoder
    )
    assert make_engine(model, tokenizer, kv_backend="hf_cache").config.model_impl == (
        "transformers"
    )


def _tiny_gemma():
    config = GemmaConfig(**{**TINY, "head_dim": 16})
    torch.manual_seed(0)
    model = GemmaForCausalLM(copy.deepcopy(config)).eval()
    reference = GemmaForCausalLM(copy.deepcopy(config)).eval()
    reference.load_state_dict(model.state_dict())
    return model, reference


def test_other_families_keep_the_transformers_modules(tokenizer):
    """Gemma's norm is (1 + w) and its embedding is scaled: not the native forward's maths, so
    "auto" serves it with transformers' modules, still exactly."""
    model, reference = _tiny_gemma()
    assert "gemma" in unsupported_reason(model)
    engine = make_engine(model, tokenizer)
    assert engine.config.model_impl == "transformers"
    assert not isinstance(engine.runner.forward, NativeDecoder)
    params = SamplingParams(max_tokens=8, temperature=0, ignore_eos=True)
    prompt = tokenizer.encode("The paged KV cache")
    out = engine.generate([prompt], params)[0]
    checker = GreedyChecker(reference)
    checker.check(prompt, out.token_ids, 8)
    with pytest.raises(ValueError, match="model_impl='native' cannot serve this model"):
        make_engine(model, tokenizer, model_impl="native")


def test_native_refuses_what_it_cannot_run(tokenizer):
    model, _ = _tiny_gemma()
    with pytest.raises(ValueError, match="native forward cannot run GemmaForCausalLM"):
        NativeDecoder(model)
    llama, _ = make_tiny_pair("llama")
    with pytest.raises(ValueError, match="kv_backend='hf_cache'"):
        make_engine(llama, tokenizer, kv_backend="hf_cache", model_impl="native")


def test_model_impl_is_validated():
    with pytest.raises(ValueError, match="model_impl must be one of"):
        EngineConfig(model_impl="vllm")
    with pytest.raises(ValueError, match="model_impl='native' cannot be compiled"):
        EngineConfig(model_impl="native", torch_compile=True)
    assert EngineConfig(torch_compile=True).model_impl == "auto"


def test_the_model_object_is_untouched(tokenizer):
    """The native forward copies weights; the model's own modules still run `generate`."""
    model, reference = make_tiny_pair("llama")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    LLMEngine(model, tokenizer, EngineConfig(num_kv_blocks=32, block_size=4))
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


@pytest.mark.parametrize("arch", list(TINY_ARCHS))
def test_bf16_logits_on_the_bf16_panels_equal_f_linear(arch, tokenizer, monkeypatch):
    """bfloat16 weights: the engine's vdpbf16ps GEMM (where the CPU has AVX512_BF16) gives
    the logits plain F.linear gives, within bfloat16 rounding."""
    model, _ = make_tiny_pair(arch)
    model = model.to(torch.bfloat16)
    prompt, extra = list(range(100, 117)), [5, 6, 7]
    fast = make_engine(copy.deepcopy(model), tokenizer, model_impl="native")
    built = linear.panel_gemm_bf16() is not None
    assert (fast.runner.forward.backend == "bf16_panels") == built
    got = _runner_logits(fast, prompt, extra)
    monkeypatch.setattr(linear, "panel_gemm_bf16", lambda: None)
    monkeypatch.setattr(linear, "panel_gemm", lambda: None)  # nor the float32 upcast's
    monkeypatch.setattr(linear, "can_pack", lambda weight: False)
    plain = make_engine(model, tokenizer, model_impl="native")
    assert plain.runner.forward.backend == "torch"
    want = _runner_logits(plain, prompt, extra)
    assert got.dtype == want.dtype == torch.bfloat16
    # bfloat16 rounding at the logits' scale: without AVX512_BF16 the engine multiplies the
    # float32 upcast and rounds once, F.linear rounds each layer, so a logit near zero may
    # differ by one bfloat16 step of the largest ones
    torch.testing.assert_close(got, want, rtol=1.6e-2, atol=float(want.abs().max()) * 2**-7)
