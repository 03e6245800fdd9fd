"""The paged decode kernel (csrc/paged_decode.c), in the engine's C library (native_build.py).

PyTorch has no attention that reads a paged KV pool in place, so the "sdpa" backend copies
each decode's blocks into a contiguous buffer and then runs SDPA over it (padded to the
longest context of its group). This kernel reads every sequence's blocks where they lie, each
to its own length, and takes q as the view of the packed q/k/v projection it is (no copy).

`load()` returns the kernel, or raises KernelUnavailable with the reason (no compiler, not
GCC >= 12 with OpenMP, ...); `unsupported_reason` says which tensors it cannot take.
"""

import ctypes

import torch

from engine import native_build
from engine.native_build import KernelUnavailable

__all__ = ["KernelUnavailable", "PagedDecodeKernel", "load", "unsupported_reason"]


def unsupported_reason(device: torch.device, dtype: torch.dtype, head_dim: int) -> str | None:
    """Why the kernel cannot serve a pool on `device` of `dtype` with `head_dim`, or None."""
    if reason := native_build.unsupported_reason(device, dtype):
        return reason
    if head_dim % 16:
        return f"head_dim {head_dim} is not a multiple of 16"
    return None


class PagedDecodeKernel:
    def __init__(self, library: ctypes.CDLL):
        self._fn = library.paged_decode
        self._fn.restype = None
        pointers, sizes = [ctypes.c_void_p] * 5, [ctypes.c_int] * 6
        self._fn.argtypes = [
            ctypes.c_int, ctypes.c_void_p, ctypes.c_int64, *pointers, *sizes, ctypes.c_float,
            ctypes.c_int,
        ]  # fmt: skip

    def __call__(
        self,
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        block_tables: torch.Tensor,
        context_lens: torch.Tensor,
        scale: float,
    ) -> torch.Tensor:
        """q (B, H, D), rows of any stride (the packed q/k/v's q, in place); k_cache, v_cache
        (blocks, bs, Hkv, D), contiguous, of q's dtype; block_tables (B, nb) and context_lens
        (B,), contiguous int64 -> (B, H, D): softmax(q k^T * scale) v over each sequence's
        first context_lens keys. Called once per layer with the runner's own tensors, which are
        made that way: nothing else is checked or converted here."""
        num_seqs, num_heads, head_dim = q.shape
        _, block_size, num_kv_heads, _ = k_cache.shape
        if q.stride(2) != 1 or q.stride(1) != head_dim:  # a row's heads are not side by side
            q = q.contiguous()
        out = q.new_empty(q.shape)
        self._fn(
            int(q.dtype == torch.bfloat16),
            q.data_ptr(),
            q.stride(0),
            k_cache.data_ptr(),
            v_cache.data_ptr(),
            block_tables.data_ptr(),
            context_lens.data_ptr(),
            out.data_ptr(),
            num_seqs,
            num_heads,
            num_kv_heads,
            head_dim,
            block_size,
            block_tables.shape[1],
            head_dim**-0.5 if scale is None else scale,
            torch.get_num_threads(),
        )
        return out


def load() -> PagedDecodeKernel:
    """The kernel; KernelUnavailable if the library cannot be built or loaded here."""
    return PagedDecodeKernel(native_build.library())
