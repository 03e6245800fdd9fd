"""The suite's one tiny-model recipe and its one engine factory.

Tiny random decoder models (2 layers of 64) built from a config, no download, with the
bundled model's tokenizer (vocab 49,152), and the small engine config the tests share
(block_size 4, so preemption and block sharing happen within a few tokens).
"""

import torch
from transformers import (
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
TINY_ENGINE = dict(block_size=4, num_kv_blocks=256, max_num_batched_tokens=64, max_num_seqs=8)


def tiny_config(arch: str = "llama", **overrides):
    config_cls, _, extra = TINY_ARCHS[arch]
    return config_cls(**{**TINY, **extra, **overrides})


def make_tiny_model(arch: str = "llama", seed: int = 0, **overrides):
    """A tiny random model in transformers' own layout (eval mode)."""
    torch.manual_seed(seed)
    return TINY_ARCHS[arch][1](tiny_config(arch, **overrides)).eval()


def make_tiny_pair(arch: str, seed: int = 0):
    """(model for the engine, identical stock model for reference), from separate configs.
    The engine's model gets the weight layout `load_model` gives a CPU model."""
    model = make_tiny_model(arch, seed)
    # Bigger weights than the init's 0.02 spread the logits, so exact ties stay rare.
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.mul_(4.0)
    reference = TINY_ARCHS[arch][1](tiny_config(arch)).eval()  # its own config object
    reference.load_state_dict(model.state_dict())
    transpose_linear_weights(model)
    return model, reference


def make_engine(model, tokenizer, config: EngineConfig | None = None, **overrides) -> LLMEngine:
    """An engine over `model` with TINY_ENGINE's knobs (and `overrides`), or with `config`."""
    config = config or EngineConfig(**{**TINY_ENGINE, **overrides})
    return LLMEngine(model, tokenizer, config, seed=0)
