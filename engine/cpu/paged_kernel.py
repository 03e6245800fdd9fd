"""The paged attention kernels (csrc/paged_decode.c, csrc/paged_prefill.c), in the engine's C
library (native_build.py).

PyTorch has no attention that reads a paged KV pool in place, so the "sdpa" backend copies
each sequence's blocks into a contiguous buffer and then runs SDPA over it (decodes padded to
the longest context of their group). These kernels read every sequence's blocks where they
lie, each to its own length, and take q as the view of the packed q/k/v projection it is (no
copy): the decode kernel one query per sequence, the prefill kernel every query of each
prefill chunk, causally (a chunk's own K/V are in the pool by then).

`load()` and `load_prefill()` return a kernel, or raise KernelUnavailable with the reason (no
compiler, not GCC >= 12 with OpenMP, ...); `unsupported_reason` says which tensors they cannot
take.
"""

import ctypes

import torch

from engine.cpu import native_build
from engine.cpu.native_build import KernelUnavailable

__all__ = [
    "KernelUnavailable",
    "PagedDecodeKernel",
    "PagedPrefillKernel",
    "load",
    "load_prefill",
    "unsupported_reason",
]


def unsupported_reason(device: torch.device, dtype: torch.dtype, head_dim: int) -> str | None:
    """Why the kernel cannot serve a pool on `device` of `dtype` with `head_dim`, or None."""
    if reason := native_build.unsupported_reason(device, dtype):
        return reason
    if head_dim % 16:
        return f"head_dim {head_dim} is not a multiple of 16"
    return None


def _bind(library: ctypes.CDLL, name: str, restype):
    """One of the kernels: both take (bf16, q, q's row stride, k_cache, v_cache, block_tables,
    per-sequence or per-chunk int64 rows, out, their number, num_heads, num_kv_heads,
    head_dim, block_size, blocks per table row, scale, threads)."""
    fn = getattr(library, name)
    fn.restype = restype
    pointers, sizes = [ctypes.c_void_p] * 5, [ctypes.c_int] * 6
    fn.argtypes = [
        ctypes.c_int, ctypes.c_void_p, ctypes.c_int64, *pointers, *sizes, ctypes.c_float,
        ctypes.c_int,
    ]  # fmt: skip
    return fn


def _run(fn, q, k_cache, v_cache, block_tables, rows, out, scale: float | None):
    """Calls `fn` (see _bind) on the runner's own tensors, which are made as the kernels take
    them: q's rows may have any stride, everything else is contiguous; nothing else is checked
    or converted here."""
    _, num_heads, head_dim = q.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    if q.stride(2) != 1 or q.stride(1) != head_dim:  # a row's heads are not side by side
        q = q.contiguous()
    return fn(
        int(q.dtype == torch.bfloat16),
        q.data_ptr(),
        q.stride(0),
        k_cache.data_ptr(),
        v_cache.data_ptr(),
        block_tables.data_ptr(),
        rows.data_ptr(),
        out.data_ptr(),
        rows.shape[0],
        num_heads,
        num_kv_heads,
        head_dim,
        block_size,
        block_tables.shape[1],
        head_dim**-0.5 if scale is None else scale,
        torch.get_num_threads(),
    )


class PagedDecodeKernel:
    def __init__(self, library: ctypes.CDLL):
        self._fn = _bind(library, "paged_decode", None)

    def __call__(
        self,
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        block_tables: torch.Tensor,
        context_lens: torch.Tensor,
        scale: float | None,
    ) -> torch.Tensor:
        """q (B, H, D), rows of any stride (the packed q/k/v's q, in place); k_cache, v_cache
        (blocks, bs, Hkv, D), contiguous, of q's dtype; block_tables (B, nb) and context_lens
        (B,), contiguous int64 -> (B, H, D): softmax(q k^T * scale) v over each sequence's
        first context_lens keys."""
        out = q.new_empty(q.shape)
        _run(self._fn, q, k_cache, v_cache, block_tables, context_lens, out, scale)
        return out


class PagedPrefillKernel:
    def __init__(self, library: ctypes.CDLL):
        self._fn = _bind(library, "paged_prefill", ctypes.c_int)

    def __call__(
        self,
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        block_tables: torch.Tensor,
        chunks: torch.Tensor,
        scale: float | None,
        out: torch.Tensor,
    ) -> None:
        """Writes the prefill chunks' rows of `out`. q (T, H, D), rows of any stride (the
        packed q/k/v's q); out (T, H, D) contiguous, of q's dtype; k_cache, v_cache as the
        decode kernel's; block_tables (C, nb) and chunks (C, 3) contiguous int64, a row of
        chunks holding the chunk's first row of q, its number of queries n and its context
        length L: its query i attends to the first L - n + i + 1 keys of its blocks."""
        if _run(self._fn, q, k_cache, v_cache, block_tables, chunks, out, scale):
            raise MemoryError("the paged prefill kernel could not allocate its scratch memory")


def load() -> PagedDecodeKernel:
    """The decode kernel; KernelUnavailable if the library cannot be built or loaded here."""
    return PagedDecodeKernel(native_build.library())


def load_prefill() -> PagedPrefillKernel:
    """The prefill kernel; KernelUnavailable if the library cannot be built or loaded here."""
    return PagedPrefillKernel(native_build.library())
