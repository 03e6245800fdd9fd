"""The KV pool's memory on a CPU: made for free, then faulted in on a thread of its own.

`zeroed` puts each pool tensor in an anonymous private memory mapping: the kernel hands out a
zero page when a page is first written, so making the pool costs nothing. But every first
write is then a page fault inside an engine step, in the middle of the KV writes; on the bench
machine (a VM, where a fault also goes to the host) those faults were 4.8 s of a 34 s fp32
run. `fault_in_background` takes them out of the steps: one daemon thread asks the kernel to
map every page writable (madvise MADV_POPULATE_WRITE, Linux 5.14+), which allocates the pages
without touching what is in them, so it may run while the engine writes its first blocks. The
thread runs no torch and holds no lock of the engine; ctypes lets go of the GIL for each call.
Elsewhere (no such madvise) the pool keeps its lazy pages.
"""

import ctypes
import logging
import math
import mmap
import sys
import threading

import torch

logger = logging.getLogger(__name__)

MADV_POPULATE_WRITE = 23  # <linux/mman.h>; Python's mmap module has no name for it before 3.13
CHUNK_BYTES = 8 * 2**20  # faulted in per call, every tensor's first chunk before any second one


def zeroed(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A tensor of zeros for the KV pool. On a CPU it lies in an anonymous private memory
    mapping, which the kernel fills with zero pages as they are first written: so the pool
    costs nothing to make. torch.zeros writes every page at once: 2.3 s for a 2 GiB bfloat16
    pool on 2 cores (its bf16 fill is 3x its fp32 one), most of the server's time to ready.
    Elsewhere torch.zeros."""
    if device.type != "cpu":
        return torch.zeros(shape, dtype=dtype, device=device)
    buffer = mmap.mmap(-1, math.prod(shape) * dtype.itemsize, flags=mmap.MAP_PRIVATE)
    return torch.frombuffer(buffer, dtype=dtype).view(shape)  # the tensor keeps the mapping


def fault_in(tensors: list[torch.Tensor]) -> bool:
    """Map every page of these `zeroed` CPU tensors writable, contents unchanged, lowest
    addresses first in each (the block manager hands out low block ids first). False where
    the kernel cannot (not Linux, older than 5.14): the pages stay lazy."""
    madvise = _madvise()
    if madvise is None:
        return False
    spans = [(t.data_ptr(), t.numel() * t.element_size()) for t in tensors if not t.is_cuda]
    for offset in range(0, max((size for _, size in spans), default=0), CHUNK_BYTES):
        for address, size in spans:
            if offset < size and madvise(address + offset, min(CHUNK_BYTES, size - offset)):
                errno = ctypes.get_errno()
                logger.info("the KV pool stays lazily faulted in (madvise: errno %d)", errno)
                return False
    return True


def fault_in_background(tensors: list[torch.Tensor]) -> threading.Thread | None:
    """`fault_in` on a daemon thread, which holds the tensors (so their mappings) until it
    ends; None where there is nothing to do."""
    if _madvise() is None or all(t.is_cuda for t in tensors):
        return None
    thread = threading.Thread(target=fault_in, args=(tensors,), name="kv-fault-in", daemon=True)
    thread.start()
    return thread


def _madvise():
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int], ctypes.c_int
    return lambda address, size: fn(address, size, MADV_POPULATE_WRITE)
