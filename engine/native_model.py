"""NativeDecoder: the engine's own forward for Llama-family decoders, from the model's weights.

transformers' modules spend much of a small step on the way to the matmuls: per layer seven
projections, a dozen reshapes and casts, masks and kwargs. This forward runs the same maths
on the same weights with four fused projections per layer (qkv, o + residual, gate_up,
down + residual; see linear.py), RoPE on q and k in one go, the residual adds inside the
matmuls, and the final norm and LM head only on the tokens that are sampled. Attention is
the engine's paged attention over the step's AttentionContext, as in the transformers path.

Families whose layers are exactly "RMSNorm, q/k/v (+ bias, + per-head q/k RMSNorm), RoPE,
attention, o, RMSNorm, SiLU-gated MLP" are served: Llama, Mistral, Qwen2, Qwen3 (and the
models that reuse their classes, like SmolLM2). Any other model keeps transformers' modules
(`unsupported_reason`). The model object is not changed: `generate` and the hf_cache runner
still use its own modules.
"""

import torch
import torch.nn.functional as F

from engine.attention import packed_attention
from engine.linear import FusedLinear

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


def rms_norm(x: torch.Tensor, norm) -> torch.Tensor:
    """A transformers RMSNorm module's maths (float32 inside, weight times the cast input)."""
    if x.dtype == torch.float32:
        return F.rms_norm(x, norm.weight.shape, norm.weight, norm.variance_epsilon)
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
    return norm.weight * h.to(x.dtype)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor) -> torch.Tensor:
    """RoPE as transformers applies it: x * cos + rotate_half(x) * sin, with rotate_half's
    minus sign folded into `sin_signed`. x (T, heads, D); cos, sin_signed (T, 1, D)."""
    half = x.shape[-1] // 2
    swapped = torch.cat((x[..., half:], x[..., :half]), dim=-1)  # (T, heads, D)
    return x * cos + swapped * sin_signed  # rounded as transformers rounds (bf16)


class NativeLayer:
    def __init__(self, layer, pack: bool):
        attn, mlp = layer.self_attn, layer.mlp
        self.layer_idx = attn.layer_idx
        self.head_dim = attn.head_dim
        self.scaling = attn.scaling
        self.input_norm = layer.input_layernorm
        self.post_attention_norm = layer.post_attention_layernorm
        self.q_norm = getattr(attn, "q_norm", None)  # Qwen3: RMSNorm of each head
        self.k_norm = getattr(attn, "k_norm", None)
        self.qkv = FusedLinear([attn.q_proj, attn.k_proj, attn.v_proj], pack)
        self.o = FusedLinear([attn.o_proj], pack)
        self.gate_up = FusedLinear([mlp.gate_proj, mlp.up_proj], pack)
        self.down = FusedLinear([mlp.down_proj], pack)
        self.q_size, self.kv_size, _ = self.qkv.sizes
        self.intermediate_size = mlp.gate_proj.out_features

    def __call__(self, x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor):
        """x (T, hidden) -> (T, hidden)."""
        num_tokens, d = x.shape[0], self.head_dim
        qkv = self.qkv(rms_norm(x, self.input_norm))  # (T, (H + 2 Hkv) D)
        v = qkv[:, self.q_size + self.kv_size :].view(num_tokens, -1, d)  # (T, Hkv, D)
        if self.q_norm is None:  # q and k side by side: one RoPE for both
            qk = qkv[:, : self.q_size + self.kv_size].view(num_tokens, -1, d)  # (T, H + Hkv, D)
            qk = rotate(qk, cos, sin_signed)
            num_heads = self.q_size // d
            q, k = qk[:, :num_heads], qk[:, num_heads:]
        else:
            q = rms_norm(qkv[:, : self.q_size].view(num_tokens, -1, d), self.q_norm)
            k = rms_norm(qkv[:, self.q_size : self.q_size + self.kv_size].view(num_tokens, -1, d),
                         self.k_norm)  # fmt: skip
            q, k = rotate(q, cos, sin_signed), rotate(k, cos, sin_signed)
        attn = packed_attention(q, k, v, self.layer_idx, self.scaling)  # (T, H, D)
        x = self.o.add(attn.reshape(num_tokens, -1), x)
        gate_up = self.gate_up(rms_norm(x, self.post_attention_norm))  # (T, 2 I)
        gate, up = gate_up[:, : self.intermediate_size], gate_up[:, self.intermediate_size :]
        return self.down.add(F.silu(gate) * up, x)


class NativeDecoder:
    """Callable like the runner's model forward, but on plain tensors:
    (input_ids (T,), positions (T,), logits_indices (S,)) -> logits (S, vocab). Run it under
    torch.inference_mode(), as ModelRunner.execute does."""

    def __init__(self, model, pack: bool = True):
        reason = unsupported_reason(model)
        if reason is not None:
            raise ValueError(f"the native forward cannot run {type(model).__name__}: {reason}")
        base = model.model
        self.embed_tokens = base.embed_tokens
        self.rotary_emb = base.rotary_emb
        self.layers = [NativeLayer(layer, pack) for layer in base.layers]
        self.norm = base.norm
        self.lm_head = FusedLinear([model.lm_head], pack)
        self.is_packed = self.lm_head.is_packed

    def __call__(self, input_ids, positions, logits_indices) -> torch.Tensor:
        x = self.embed_tokens(input_ids)  # (T, hidden)
        cos, sin = self.rotary_emb(x, positions.unsqueeze(0))  # (1, T, D) each
        half = cos.shape[-1] // 2
        sin_signed = torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)
        cos, sin_signed = cos[0].unsqueeze(1), sin_signed[0].unsqueeze(1)  # (T, 1, D)
        for layer in self.layers:
            x = layer(x, cos, sin_signed)
        return self.lm_head(rms_norm(x[logits_indices], self.norm))  # (S, vocab)
