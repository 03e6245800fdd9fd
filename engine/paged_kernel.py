"""The paged decode kernel (csrc/paged_decode.c), built with the system C compiler, run by ctypes.

PyTorch has no attention that reads a paged KV pool in place, so the "sdpa" backend copies
each decode's blocks into a contiguous buffer and then runs SDPA over it (padded to the
longest context of its group). This kernel reads every sequence's blocks where they lie, each
to its own length. It is built once per source, compiler and CPU (about half a second) into
$CB_PLAYGROUND_KERNEL_CACHE (else ~/.cache/cb-playground/kernels) and loaded from there
afterwards; ctypes lets go of the GIL while it runs. Its threads are an OpenMP region on the
libgomp that torch has loaded (the same SONAME), so it runs on torch's own team of workers.

`load()` returns the kernel, or raises KernelUnavailable with the reason (no compiler, not
GCC >= 12 with OpenMP, ...); `unsupported_reason` says which tensors it cannot take.
"""

import ctypes
import functools
import hashlib
import os
import platform
import subprocess
import tempfile
from pathlib import Path

import torch

SOURCE = Path(__file__).parent / "csrc" / "paged_decode.c"
CACHE_ENV_VAR = "CB_PLAYGROUND_KERNEL_CACHE"
FLAGS = (
    "-O3",
    "-march=native",
    "-fno-math-errno",
    "-fno-trapping-math",
    "-fopenmp",
    "-shared",
    "-fPIC",
)
LIBS = ("-lm",)
DTYPES = (torch.float32, torch.bfloat16)
BUILD_TIMEOUT_S = 120


class KernelUnavailable(RuntimeError):
    """The kernel could not be built or loaded here; the message says why."""


def unsupported_reason(device: torch.device, dtype: torch.dtype, head_dim: int) -> str | None:
    """Why the kernel cannot serve a pool on `device` of `dtype` with `head_dim`, or None."""
    if device.type != "cpu":
        return f"it runs on the CPU only, not {device.type}"
    if dtype not in DTYPES:
        return f"dtype {dtype} is not float32 or bfloat16"
    if head_dim % 16:
        return f"head_dim {head_dim} is not a multiple of 16"
    return None


class PagedDecodeKernel:
    def __init__(self, library: ctypes.CDLL):
        self._fn = library.paged_decode
        self._fn.restype = None
        pointers, sizes = [ctypes.c_void_p] * 6, [ctypes.c_int] * 6
        self._fn.argtypes = [ctypes.c_int, *pointers, *sizes, ctypes.c_float, ctypes.c_int]

    def __call__(
        self,
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        block_tables: torch.Tensor,
        context_lens: torch.Tensor,
        scale: float,
    ) -> torch.Tensor:
        """q (B, H, D); k_cache, v_cache (blocks, bs, Hkv, D), contiguous, of q's dtype;
        block_tables (B, nb) and context_lens (B,), contiguous int64 -> (B, H, D):
        softmax(q k^T * scale) v over each sequence's first context_lens keys. Called once per
        layer with the runner's own tensors, which are made that way: nothing is checked or
        converted here."""
        num_seqs, num_heads, head_dim = q.shape
        _, block_size, num_kv_heads, _ = k_cache.shape
        q = q.contiguous()  # a view of the packed q, k, v
        out = torch.empty_like(q)
        self._fn(
            int(q.dtype == torch.bfloat16),
            q.data_ptr(),
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
    """The kernel, built on first use; KernelUnavailable if it cannot be built or loaded
    (tried once per process)."""
    kernel = _load()
    if isinstance(kernel, KernelUnavailable):
        raise kernel
    return kernel


@functools.cache
def _load() -> PagedDecodeKernel | KernelUnavailable:
    try:
        return _build_and_load()
    except KernelUnavailable as exc:
        return exc


def _build_and_load() -> PagedDecodeKernel:
    if platform.system() == "Windows":
        raise KernelUnavailable("the kernel is built with a Unix C compiler (not on Windows)")
    compiler = os.environ.get("CC", "cc")
    try:
        version = subprocess.run(
            [compiler, "--version"], capture_output=True, text=True, timeout=30, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise KernelUnavailable(f"no working C compiler {compiler!r} ({exc})") from exc
    target = _cache_dir() / f"paged_decode-{_build_key(compiler, version)}.so"
    if not target.exists():
        _build(compiler, target)
    try:
        return PagedDecodeKernel(ctypes.CDLL(str(target)))
    except OSError as exc:
        raise KernelUnavailable(f"could not load {target} ({exc})") from exc


def _cache_dir() -> Path:
    root = os.environ.get(CACHE_ENV_VAR) or "~/.cache/cb-playground/kernels"
    return Path(root).expanduser()


def _build_key(compiler: str, version: str) -> str:
    """One build per source, compiler, flags and CPU: -march=native code may not run on
    another CPU, and a cache directory can move between machines."""
    digest = hashlib.sha256(SOURCE.read_bytes())
    for part in (compiler, version, *FLAGS, platform.machine(), _cpu_flags()):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()[:16]


def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((line for line in f if line.startswith(("flags", "Features"))), "")
    except OSError:  # not Linux
        return platform.processor()


def _build(compiler: str, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, scratch = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    os.close(fd)
    try:
        result = subprocess.run(
            [compiler, *FLAGS, str(SOURCE), "-o", scratch, *LIBS],
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
        )
        if result.returncode != 0:
            tail = result.stderr.strip().splitlines()[-3:]
            raise KernelUnavailable(f"{compiler} could not build {SOURCE.name}: {' / '.join(tail)}")
        os.replace(scratch, target)  # atomic: a reader never sees half a library
    except (OSError, subprocess.SubprocessError) as exc:
        raise KernelUnavailable(f"{compiler} could not build {SOURCE.name} ({exc})") from exc
    finally:
        if os.path.exists(scratch):
            os.unlink(scratch)
