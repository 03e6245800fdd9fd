"""The KV pool's memory on a CPU: made for free, its pages mapped in bulk ahead of use.

`zeroed` puts each pool tensor in an anonymous private memory mapping: the kernel hands out a
zero page when a page is first written, so making the pool costs nothing and the pool takes
memory only as blocks are used. But each first write is then a page fault inside a step, in
the middle of the KV writes (in a VM a fault also goes to the host; docs/performance.md says
what they cost). `ResidentBlocks` maps the pages of the blocks a
step is about to write in bulk, one madvise (MADV_POPULATE_WRITE, Linux 5.14+) per tensor for
a run of blocks ahead of the highest one in use, which allocates the pages without touching
what is in them. Where that madvise is missing the pool keeps its lazy pages.
"""

import ctypes
import logging
import math
import mmap
import sys
from concurrent.futures import ThreadPoolExecutor

import torch

logger = logging.getLogger(__name__)

MADV_POPULATE_WRITE = 23  # <linux/mman.h>; Python's mmap module has no name for it before 3.13
MIN_AHEAD_BLOCKS = 64  # mapped beyond the highest block in use, at least (or a quarter more)


def zeroed(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A tensor of zeros for the KV pool. On a CPU it lies in an anonymous private memory
    mapping, which the kernel fills with zero pages as they are first written: so the pool
    costs nothing to make. torch.zeros would write every page at once, which on a small CPU
    is most of the server's time to ready. Elsewhere torch.zeros."""
    if device.type != "cpu":
        return torch.zeros(shape, dtype=dtype, device=device)
    buffer = mmap.mmap(-1, math.prod(shape) * dtype.itemsize, flags=mmap.MAP_PRIVATE)
    return torch.frombuffer(buffer, dtype=dtype).view(shape)  # the tensor keeps the mapping


class ResidentBlocks:
    """Blocks 0 .. `count` of every pool tensor (each (num_blocks, ...), `zeroed`) have their
    pages mapped; `cover(top)` maps more before a step writes blocks below `top`. The block
    manager hands out fresh blocks from the lowest id up, so the mapped run grows with use."""

    def __init__(self, tensors: list[torch.Tensor]):
        self.tensors = tensors
        self.num_blocks = tensors[0].shape[0] if tensors else 0
        self._madvise = _madvise() if tensors and not tensors[0].is_cuda else None
        self.count = 0 if self._madvise else self.num_blocks  # CUDA or no madvise: nothing to do

    @property
    def complete(self) -> bool:
        return self.count == self.num_blocks

    def cover(self, top: int) -> None:
        if top <= self.count:
            return
        end = min(self.num_blocks, top + max(MIN_AHEAD_BLOCKS, top // 4))
        # (address, bytes) of each tensor's blocks count .. end. madvise takes a page's start
        # only (EINVAL otherwise), and a block need not fill whole pages (6 KiB in bfloat16
        # with 3 KV heads): a run starts on the page that holds its first byte.
        runs = []
        for t in self.tensors:
            block_bytes = t[0].numel() * t.element_size()
            start = t.data_ptr() + self.count * block_bytes
            start -= start % mmap.PAGESIZE
            runs.append((start, t.data_ptr() + end * block_bytes - start))
        # The step waits for this with the other cores idle, and mapping pages scales with
        # cores (the kernel zeroes them): the runs are split over torch's threads.
        num_threads = min(torch.get_num_threads(), len(runs))
        with ThreadPoolExecutor(num_threads) as pool:
            parts = [runs[i::num_threads] for i in range(num_threads)]
            failed = [errno for errno in pool.map(self._map, parts) if errno is not None]
        if failed:
            logger.info("the KV pool stays lazily mapped (madvise: errno %d)", failed[0])
            end = self.num_blocks  # never again
        self.count = end

    def _map(self, runs: list[tuple[int, int]]) -> int | None:
        """madvise each run; the errno of the first that fails, or None."""
        for address, size in runs:
            if self._madvise(address, size):
                return ctypes.get_errno()
        return None


def _madvise():
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int], ctypes.c_int
    return lambda address, size: fn(address, size, MADV_POPULATE_WRITE)
