"""Freed memory kept for reuse by a decoding process (a CPU speed-up, not in the paper).

    keep_freed_memory()   # fast.for_inference calls it; True where the C library took it

A decoding step allocates the same buffers at every call and frees them at its end: the
compiled step's intermediate tensors (a batch's logits are rows x vocab floats), the
stores of each batch, the encoder's activations. glibc's malloc serves a block above its
mmap threshold (128 KiB at first, raised as such blocks are freed) with fresh pages of its
own, unmapped again when freed, and hands the free top of its heap back to the system once
it passes the trim threshold. Either way the next step's buffer lands on pages the system
has to fault in and zero again, at every step.

Here both thresholds are raised once for the process: blocks below `MMAP_THRESHOLD` come
from the heap and are reused there, and up to `TRIM_THRESHOLD` of free heap is kept. A
long-lived process (a server) then holds its busiest moment's memory instead of giving it
back between requests: its resident size stays flat at that peak. Blocks above the mmap
threshold (a large model's weights as they load) are still mapped and unmapped alone.

glibc only (`mallopt`); elsewhere nothing changes. PyTorch's CPU tuning guide advises a
caching allocator (jemalloc, tcmalloc) preloaded for the same reason; this needs none.
"""

from __future__ import annotations

import ctypes

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's <malloc.h> parameter numbers
# A step's buffers stay below this: a base-sized model's logits over 512 rows of an
# 8000-token vocabulary are 16 MiB, its feed-forward activations 4 MiB.
MMAP_THRESHOLD = 64 * 1024 * 1024
TRIM_THRESHOLD = 4 * MMAP_THRESHOLD  # free heap kept before any goes back to the system


def keep_freed_memory() -> bool:
    """Raise glibc malloc's mmap and trim thresholds for this process (module docstring);
    -> whether they were set (False without glibc). Calling it again changes nothing."""
    libc = _glibc()
    if libc is None:
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
                and libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))  # fmt: skip


def _glibc() -> ctypes.CDLL | None:
    """The process's own symbols where its C library is glibc (they hold
    `gnu_get_libc_version`), else None. Read from the running process, not looked up on
    disk (`ctypes.util.find_library` runs a program to find it)."""
    libc = ctypes.CDLL(None)
    if not (hasattr(libc, "gnu_get_libc_version") and hasattr(libc, "mallopt")):
        return None
    libc.mallopt.argtypes, libc.mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return libc
