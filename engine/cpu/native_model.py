"""NativeDecoder: the engine's own forward for Llama-family decoders, from the model's weights.

transformers' modules spend much of a small step on the way to the matmuls: per layer seven
projections, a dozen reshapes and casts, masks and kwargs. This forward runs the same maths
on the same weights with four fused projections per layer (qkv, o + residual, gate_up,
down + residual; see linear.py), the residual adds inside the matmuls, each RMSNorm, the
SiLU-and-mul and RoPE with the KV write as one op (fused_ops.py), and the final norm and LM
head only on the tokens that are sampled. Attention is the engine's paged attention over the
step's AttentionContext, as in the transformers path.

Families whose layers are exactly "RMSNorm, q/k/v (+ bias, + per-head q/k RMSNorm), RoPE,
attention, o, RMSNorm, SiLU-gated MLP" are served: Llama, Mistral, Qwen2, Qwen3 (and the
models that reuse their classes, like SmolLM2). Any other model keeps transformers' modules
(`unsupported_reason`). The model object is not changed: `generate` and the hf_cache runner
still use its own modules.
"""

import torch

from engine.attention import attend, step_kv
from engine.cpu import fused_ops
from engine.cpu.fused_ops import FusedOps, TorchOps
from engine.cpu.linear import FusedLinear

NATIVE_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")


def unsupported_reason(model) -> str | None:
    """Why NativeDecoder cannot run this model exactly, or None if it can."""
    config = model.config
    if config.model_type not in NATIVE_MODEL_TYPES:
        return f"model_type {config.model_type!r} is not one of {NATIVE_MODEL_TYPES}"
    if getattr(config, "hidden_act", "silu") != "silu":
        return f"hidden_act {config.hidden_act!r} (only silu)"
    base = getattr(model, "model", None)
    if base is None or not hasattr(base, "rotary_emb") or not hasattr(model, "lm_head"):
        return "not a decoder with model.layers, model.rotary_emb and lm_head"
    return None


class NativeLayer:
    def __init__(self, layer, pack: bool, ops: FusedOps | TorchOps):
        attn, mlp = layer.self_attn, layer.mlp
        self.ops = ops
        self.layer_idx = attn.layer_idx
        self.head_dim = attn.head_dim
        self.scaling = attn.scaling
        self.input_norm = _norm(layer.input_layernorm)
        self.post_attention_norm = _norm(layer.post_attention_layernorm)
        q_norm = getattr(attn, "q_norm", None)  # Qwen3: RMSNorm of each head
        self.q_norm = None if q_norm is None else _norm(q_norm)
        self.k_norm = None if q_norm is None else _norm(attn.k_norm)
        self.qkv = FusedLinear([attn.q_proj, attn.k_proj, attn.v_proj], pack)
        self.o = FusedLinear([attn.o_proj], pack)
        self.gate_up = FusedLinear([mlp.gate_proj, mlp.up_proj], pack)
        self.down = FusedLinear([mlp.down_proj], pack)
        self.q_size, self.kv_size, _ = self.qkv.sizes

    def __call__(self, x, cos, sin):
        """x (T, hidden), cos and sin (T, D) -> (T, hidden)."""
        ops, num_tokens, d = self.ops, x.shape[0], self.head_dim
        qkv = self.qkv(ops.rms_norm(x, *self.input_norm))  # (T, (H + 2 Hkv) D)
        q = qkv[:, : self.q_size].view(num_tokens, -1, d)  # (T, H, D)
        k = qkv[:, self.q_size : self.q_size + self.kv_size].view(num_tokens, -1, d)  # (T, Hkv, D)
        v = qkv[:, self.q_size + self.kv_size :].view(num_tokens, -1, d)
        if self.q_norm is not None:  # per head, on strided views: in torch ops
            q, k = TorchOps.rms_norm(q, *self.q_norm), TorchOps.rms_norm(k, *self.k_norm)
        q, k = ops.rope_and_cache(q, k, v, cos, sin, *step_kv(self.layer_idx))
        attn = attend(q, k, v, self.layer_idx, self.scaling)  # (T, H, D)
        x = self.o.add(attn.reshape(num_tokens, -1), x)
        gate_up = self.gate_up(ops.rms_norm(x, *self.post_attention_norm))  # (T, 2 I)
        return self.down.add(ops.silu_and_mul(gate_up), x)


class NativeDecoder:
    """Callable like the runner's model forward, but on plain tensors:
    (input_ids (T,), positions (T,), logits_indices (S,)) -> logits (S, vocab). Run it under
    torch.inference_mode(), as ModelRunner.execute does."""

    def __init__(self, model, pack: bool = True):
        reason = unsupported_reason(model)
        if reason is not None:
            raise ValueError(f"the native forward cannot run {type(model).__name__}: {reason}")
        base = model.model
        param = base.embed_tokens.weight
        self.ops = fused_ops.select(param.device, param.dtype)  # the elementwise ops
        self.embed_tokens = base.embed_tokens
        self.rotary_emb = base.rotary_emb
        self.layers = [NativeLayer(layer, pack, self.ops) for layer in base.layers]
        self.norm = _norm(base.norm)
        self.lm_head = FusedLinear([model.lm_head], pack)
        self.backend = self.lm_head.backend

    def __call__(self, input_ids, positions, logits_indices) -> torch.Tensor:
        x = self.embed_tokens(input_ids)  # (T, hidden)
        cos, sin = self.rotary_emb(x, positions.unsqueeze(0))  # (1, T, D) each
        cos, sin = cos[0], sin[0]
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.ops.rms_norm(x[logits_indices], *self.norm))  # (S, vocab)


def _norm(module) -> tuple:
    """An RMSNorm module as the ops take it: (weight, eps)."""
    return module.weight, module.variance_epsilon
