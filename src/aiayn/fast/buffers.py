"""Memory for the decoding cache's stores, kept from one search to the next (a CPU
speed-up, not in the paper), for `kv_cache.SharedKVCache`.

    buffers = StoreBuffers()                       # one per Translator
    with buffers.claim() as kept:                  # kept: `buffers`, or None while in use
        cache = SharedKVCache(n_layers, src_pad_mask, buffers=kept)  # one cache per claim
"""

from __future__ import annotations

import math
import mmap
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor


class StoreBuffers:
    """Memory for the cache's stores, kept from one search to the next (a CPU speed-up, not
    in the paper).

    A store's pages are first touched when a step's keys and values are written into it,
    and on a CPU each fresh 4 KiB page costs a fault. PyTorch returns large blocks to the
    system when they are freed, so every batch of a translation faulted its stores in
    again. With buffers, a self-attention store
    that is made or grown, and any store compacted when sentences leave, is written into a
    buffer kept for it instead of fresh memory. (The encoder-decoder stores are made once a
    search, from the encoder's output; the beam's widening rewrites a one-position store.)

    Each store (layer, name) has at most two flat buffers, each as large as the largest that
    store has needed. A replacement goes into the one the current store does not occupy,
    since it is copied from the current store. One search uses them at a time (`claim`), with
    one cache, inside the claim; a search that finds them claimed allocates its own memory.
    The memory stays for the object's life.
    """

    def __init__(self) -> None:
        self._buffers: dict[tuple[int, str], list[Tensor]] = {}
        self._made: set[tuple[int, str]] = set()  # stores made under the current claim
        self._lock = threading.Lock()

    @classmethod
    def for_device(cls, device: str | torch.device) -> StoreBuffers | None:
        """Buffers for searches on `device`: on a CPU; None on a GPU, where PyTorch's caching
        allocator already reuses freed memory."""
        return cls() if torch.device(device).type == "cpu" else None

    @contextmanager
    def claim(self) -> Iterator[StoreBuffers | None]:
        """-> these buffers for one search, or None if another search holds them."""
        if not self._lock.acquire(blocking=False):
            yield None
            return
        self._made.clear()
        try:
            yield self
        finally:
            self._lock.release()

    def empty(self, key: tuple[int, str], shape: tuple[int, ...], like: Tensor,
              current: Tensor | None) -> Tensor:  # fmt: skip
        """An uninitialised `shape` tensor (dtype and device of `like`) for store `key`, in
        its kept buffer that `current`, the store it replaces (None: a new store), does not
        occupy."""
        if not self._lock.locked():
            raise RuntimeError("StoreBuffers used outside claim(): one search, inside it")
        if current is None:
            # A second new store under one key would share memory with the live first one.
            if key in self._made:
                raise RuntimeError(f"store {key} made twice under one claim: one cache per "
                                   "claim, each layer with its own index")  # fmt: skip
            self._made.add(key)
        n = math.prod(shape)
        pair = self._buffers.setdefault(key, [])
        held = None if current is None else current.untyped_storage().data_ptr()
        free = [i for i, b in enumerate(pair) if b.untyped_storage().data_ptr() != held]
        for i in free:
            buffer = pair[i]
            if buffer.numel() >= n and (buffer.dtype, buffer.device) == (like.dtype, like.device):
                return buffer[:n].view(shape)
        # As large as the pair's largest, so that both soon fit any store the search asks
        # for. Allocated outside inference mode: a buffer made under torch.inference_mode()
        # could not be written by a later search outside it.
        size = max([n] + [b.numel() for b in pair if b.dtype == like.dtype])
        with torch.inference_mode(False):
            fresh = own_pages(size, like)
        if len(pair) < 2:
            pair.append(fresh)
        else:  # a buffer too small or of another dtype: replace it
            pair[free[0]] = fresh
        return fresh[:n].view(shape)


def own_pages(numel: int, like: Tensor) -> Tensor:
    """An uninitialised flat tensor of `numel` elements (dtype and device of `like`): on a
    CPU in an anonymous memory map of its own, given back to the system when the tensor is
    freed; elsewhere from the device's allocator.

    Why not PyTorch's allocator: on a CPU that is the C library's malloc, whose heap returns
    memory to the system only from its top. A buffer grows when a search needs more than any
    before it, that is in the largest batch so far, while that batch's other tensors fill the
    heap: the buffer lands at the top, and everything freed below it when the batch ends
    stays resident. Each new largest batch raised the server's memory for good; a mapping of
    its own leaves the heap free to shrink.
    """
    if like.device.type != "cpu":
        return like.new_empty(numel)
    nbytes = max(numel * like.element_size(), 1)
    return torch.frombuffer(mmap.mmap(-1, nbytes), dtype=like.dtype, count=numel)
