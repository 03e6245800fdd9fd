"""The engine's C library (csrc/*.c), built with the system C compiler, loaded by ctypes.

The paged decode kernel (paged_kernel.py) and the fused elementwise ops (fused_ops.py) are
one shared library, built once per source, compiler and CPU (about a second) into
$CB_PLAYGROUND_KERNEL_CACHE (else ~/.cache/cb-playground/kernels) and loaded from there
afterwards; ctypes lets go of the GIL while a call runs. Its threads are OpenMP regions on
the libgomp that torch has loaded (the same SONAME), so they run on torch's own team of
workers.

`library()` returns it, or raises KernelUnavailable with the reason (no compiler, not GCC >= 12
with OpenMP, ...); it is tried once per process.
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

CSRC = Path(__file__).parent / "csrc"
LIBRARY_NAME = "cb_kernels"
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
BUILD_TIMEOUT_S = 120
DTYPES = (torch.float32, torch.bfloat16)  # what the library's functions compute in


class KernelUnavailable(RuntimeError):
    """The library could not be built or loaded here; the message says why."""


def unsupported_reason(device: torch.device, dtype: torch.dtype) -> str | None:
    """Why the library's functions cannot take tensors on `device` of `dtype`, or None."""
    if device.type != "cpu":
        return f"it runs on the CPU only, not {device.type}"
    if dtype not in DTYPES:
        return f"dtype {dtype} is not float32 or bfloat16"
    return None


def library() -> ctypes.CDLL:
    """The built library; KernelUnavailable if it cannot be built or loaded."""
    lib = _library()
    if isinstance(lib, KernelUnavailable):
        raise lib
    return lib


@functools.cache
def _library() -> ctypes.CDLL | KernelUnavailable:
    try:
        return build_and_load()
    except KernelUnavailable as exc:
        return exc


def build_and_load() -> ctypes.CDLL:
    if platform.system() == "Windows":
        raise KernelUnavailable("the kernels are built with a Unix C compiler (not on Windows)")
    compiler = os.environ.get("CC", "cc")
    try:
        version = subprocess.run(
            [compiler, "--version"], capture_output=True, text=True, timeout=30, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise KernelUnavailable(f"no working C compiler {compiler!r} ({exc})") from exc
    target = _cache_dir() / f"{LIBRARY_NAME}-{_build_key(compiler, version)}.so"
    if not target.exists():
        _build(compiler, target)
    try:
        return ctypes.CDLL(str(target))
    except OSError as exc:
        raise KernelUnavailable(f"could not load {target} ({exc})") from exc


def _cache_dir() -> Path:
    root = os.environ.get(CACHE_ENV_VAR) or "~/.cache/cb-playground/kernels"
    return Path(root).expanduser()


def _build_key(compiler: str, version: str) -> str:
    """One build per set of sources, compiler, flags and CPU: -march=native code may not run
    on another CPU, and a cache directory can move between machines."""
    digest = hashlib.sha256()
    for path in sorted(CSRC.glob("*.[ch]")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
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
    sources = [str(path) for path in sorted(CSRC.glob("*.c"))]
    try:
        result = subprocess.run(
            [compiler, *FLAGS, *sources, "-o", scratch, *LIBS],
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
        )
        if result.returncode != 0:
            tail = result.stderr.strip().splitlines()[-3:]
            raise KernelUnavailable(f"{compiler} could not build {CSRC.name}/: {' / '.join(tail)}")
        os.replace(scratch, target)  # atomic: a reader never sees half a library
    except (OSError, subprocess.SubprocessError) as exc:
        raise KernelUnavailable(f"{compiler} could not build {CSRC.name}/ ({exc})") from exc
    finally:
        if os.path.exists(scratch):
            os.unlink(scratch)
