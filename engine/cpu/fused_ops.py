"""The native forward's elementwise ops: RMSNorm, SiLU-and-mul, RoPE + the KV write; and the
greedy sampler's argmax.

Between its matmuls a layer of the native forward does little arithmetic, but in PyTorch
ops it is some twenty passes over memory, each with its own dispatch: RMSNorm alone is pow,
mean, rsqrt, two muls and two casts. `FusedOps` runs each op as one pass of the
engine's C library (csrc/fused_ops.c, built by native_build.py) on the CPU, in float32 or
bfloat16, rounding where the transformers modules round. `TorchOps` is the same maths in
PyTorch ops, for everywhere else (CUDA, another dtype, no C compiler), and the reference the
tests hold FusedOps to. `select` picks one for a model.
"""

import ctypes
import logging

import torch
import torch.nn.functional as F

from engine.attention import write_kv
from engine.cpu import native_build

logger = logging.getLogger(__name__)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """A transformers RMSNorm module's maths (float32 inside, weight times the cast input)."""
    if x.dtype == torch.float32:
        return F.rms_norm(x, weight.shape, weight, eps)
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE as transformers applies it: x * cos + rotate_half(x) * sin. x (T, heads, D);
    cos, sin (T, 1, D)."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class TorchOps:
    """The ops in PyTorch: any device and dtype."""

    rms_norm = staticmethod(rms_norm)

    @staticmethod
    def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
        """x (T, 2 I) = [gate | up] -> silu(gate) * up (T, I)."""
        gate, up = x.chunk(2, dim=-1)
        return F.silu(gate) * up

    @staticmethod
    def argmax(x: torch.Tensor) -> torch.Tensor:
        """Each row's argmax, the first of equal maxima, as `argmax` picks (NaN counts as the
        maximum). Through torch.max's indices: the same ids as torch.argmax, and faster on a
        CPU."""
        return torch.max(x, dim=-1).indices

    @staticmethod
    def rope_and_cache(q, k, v, cos, sin, k_cache, v_cache, slots):
        """q (T, H, D) and k (T, Hkv, D) rotated by cos, sin (T, D); this step's k and v
        written into the pool (slots, Hkv, D) at `slots` (T,). Returns the rotated q, k."""
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        write_kv(k, v, k_cache, v_cache, slots)
        return q, k


class FusedOps:
    """The ops of csrc/fused_ops.c: CPU tensors of one dtype in native_build.DTYPES; x, cos,
    sin, the pool and slots contiguous, q, k and v rows of heads side by side (views of the
    packed q/k/v projection). Nothing is checked per call: the native forward's tensors are
    made so."""

    def __init__(self, library: ctypes.CDLL):
        int_, ptr, float_, i64 = ctypes.c_int, ctypes.c_void_p, ctypes.c_float, ctypes.c_int64
        self._rms_norm = library.fused_rms_norm
        self._rms_norm.argtypes = [int_, ptr, ptr, ptr, int_, int_, float_, int_]
        self._silu_and_mul = library.fused_silu_and_mul
        self._silu_and_mul.argtypes = [int_, ptr, ptr, int_, int_, int_]
        self._rope_and_cache = library.fused_rope_and_cache
        self._rope_and_cache.argtypes = [
            int_, ptr, i64, ptr, i64, ptr, i64, ptr, ptr, int_, int_, int_, int_, ptr, ptr, ptr,
            int_,
        ]  # fmt: skip
        self._argmax = library.fused_argmax
        self._argmax.argtypes = [int_, ptr, ptr, int_, int_, int_]
        for fn in (self._rms_norm, self._silu_and_mul, self._rope_and_cache, self._argmax):
            fn.restype = None

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        """x (T, hidden) contiguous -> (T, hidden)."""
        out = torch.empty_like(x)
        self._rms_norm(
            int(x.dtype == torch.bfloat16),
            x.data_ptr(),
            weight.data_ptr(),
            out.data_ptr(),
            x.shape[0],
            x.shape[1],
            eps,
            torch.get_num_threads(),
        )
        return out

    def silu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
        """x (T, 2 I) = [gate | up], contiguous -> silu(gate) * up (T, I)."""
        rows, cols = x.shape[0], x.shape[1] // 2
        out = x.new_empty(rows, cols)
        self._silu_and_mul(
            int(x.dtype == torch.bfloat16),
            x.data_ptr(),
            out.data_ptr(),
            rows,
            cols,
            torch.get_num_threads(),
        )
        return out

    def argmax(self, x: torch.Tensor) -> torch.Tensor:
        """TorchOps.argmax of x (rows, cols), rows split over the threads (torch.max runs a
        row-wise max on one thread)."""
        x = x.contiguous()
        out = torch.empty(x.shape[0], dtype=torch.int64)
        self._argmax(
            int(x.dtype == torch.bfloat16),
            x.data_ptr(),
            out.data_ptr(),
            x.shape[0],
            x.shape[1],
            torch.get_num_threads(),
        )
        return out

    def rope_and_cache(self, q, k, v, cos, sin, k_cache, v_cache, slots):
        """TorchOps.rope_and_cache, with q and k rotated in place."""
        num_tokens, num_heads, head_dim = q.shape
        self._rope_and_cache(
            int(q.dtype == torch.bfloat16),
            q.data_ptr(),
            q.stride(0),
            k.data_ptr(),
            k.stride(0),
            v.data_ptr(),
            v.stride(0),
            cos.data_ptr(),
            sin.data_ptr(),
            num_tokens,
            num_heads,
            k.shape[1],
            head_dim,
            k_cache.data_ptr(),
            v_cache.data_ptr(),
            slots.data_ptr(),
            torch.get_num_threads(),
        )
        return q, k


def select(device: torch.device, dtype: torch.dtype) -> FusedOps | TorchOps:
    """FusedOps where they can run, else TorchOps (the reason logged)."""
    reason = native_build.unsupported_reason(device, dtype)
    if reason is None:
        try:
            return FusedOps(native_build.library())
        except native_build.KernelUnavailable as exc:
            reason = str(exc)
    logger.info("elementwise ops: torch (the fused C ops cannot serve: %s)", reason)
    return TorchOps()
