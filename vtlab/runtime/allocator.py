"""glibc's allocator told to keep freed memory for the next batch (vtlab's own processes: `python -m vtlab`, the
bench's vtlab workers).

Out of the box glibc gives freed memory back to the kernel as soon as more than twice its (sliding) mmap threshold
lies free at the top of the heap, and serves every allocation above that threshold (at most 32 MiB) with fresh pages,
so a forward pass that allocates and frees the same tens of MiB per batch has them faulted in and zeroed by the kernel
again for every batch: hundreds of thousands of page faults for SPLADE-tiny encoding 2,800 passages, 3-6% of its
time (docs/kernels.md). keep_freed_memory raises the threshold to that 32 MiB ceiling and keeps up to TRIM_BYTES
free at the top of the heap; the encoder runs its body in chunks below the threshold (vtlab.runtime.body.BODY_BYTES).
The cost: up to TRIM_BYTES of freed memory stays in the process instead of going back to the system.

Torch-free; a no-op (False) where the C library is not glibc, or where the user set glibc's malloc tunables.
"""

from __future__ import annotations

import ctypes
import logging
import os
import platform

log = logging.getLogger("vtlab")

# mallopt(3) parameters (glibc's malloc.h)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_BYTES = 32 * 2**20  # glibc's largest mmap threshold on 64-bit (HEAP_MAX_SIZE / 2)
# twice the threshold: at 32 MiB the body's own churn is trimmed and refaulted again (~220k faults per 1,400
# passages); 256 MiB keeps no more (and holds ~150 MB more at the fp32 worker's peak)
TRIM_BYTES = 64 * 2**20
# the user's own settings of what keep_freed_memory would set (glibc reads them at start-up): left alone
USER_SETTINGS = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")


def keep_freed_memory(trim_bytes: int = TRIM_BYTES, mmap_bytes: int = MMAP_BYTES) -> bool:
    """Set glibc's trim and mmap thresholds for this process; True when both were set."""
    if platform.libc_ver()[0] != "glibc":
        return False
    if any(k in os.environ for k in USER_SETTINGS) or "glibc.malloc." in os.environ.get("GLIBC_TUNABLES", ""):
        log.debug("allocator: glibc malloc settings from the environment kept")
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # mallopt returns 1 on success, 0 for a value glibc refuses (a threshold above its ceiling on 32-bit)
    return mallopt(M_MMAP_THRESHOLD, mmap_bytes) == 1 and mallopt(M_TRIM_THRESHOLD, trim_bytes) == 1
