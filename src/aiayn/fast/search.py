"""The search's fast path: `row_topk` for the strategies, and the buffered cache.

    search = FastSearch(device)                       # one per Translator
    with search.options(model) as options:            # one search at a time holds the buffers
        hyps = beam_search(model, src, config, **options)
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

import torch
from torch import Tensor

from aiayn.fast.cache import StoreBuffers, buffered_cache
from aiayn.fast.int8 import cross_store_dtype


class FastSearch:
    """What `beam_search` / `greedy_search` take from the fast path: `row_topk`, and caches
    whose memory is kept from one search to the next on a CPU (`StoreBuffers`) and whose
    encoder-decoder stores are in `cross_dtype`: the int8 model's (`int8`), else None (the
    model's own)."""

    def __init__(self, device: str | torch.device, int8: bool = False) -> None:
        self.buffers = StoreBuffers.for_device(device)
        self.cross_dtype = cross_store_dtype() if int8 else None

    @contextmanager
    def options(self, model) -> Iterator[dict]:
        """-> the keyword arguments of one search: `topk` and `new_cache`."""
        claim = self.buffers.claim() if self.buffers is not None else nullcontext(None)
        with claim as kept:
            yield {
                "topk": row_topk,
                "new_cache": lambda pad: buffered_cache(model, pad, kept, self.cross_dtype),
            }


def search_options(search: FastSearch | None, model):
    """A context giving one search's keyword arguments: the fast path's (`search`), or none
    (None: the core's `torch.topk` and `model.new_cache`)."""
    return search.options(model) if search is not None else nullcontext({})


TOPK_CHUNK = 64  # entries per chunk in `row_topk` (the best of 32, 64, 128 and 256)


def row_topk(x: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """The k largest entries along the last dimension and their indices, largest first:
    the values of `x.topk(k, dim=-1)`, faster over a vocabulary. (..., width) -> (..., k) x 2.

    PyTorch's CPU topk walks each row element by element, about as long as the log-softmax
    of a beam step itself. Here each chunk of TOPK_CHUNK entries gives its maximum in one
    vectorised pass, and topk runs only over the k chunks with the largest maxima (and the
    row's last, partial chunk).

    Why the values are exact: take a row's i largest entries (i <= k), the least of them
    v_i. If one of them lies in a whole chunk c that was not picked, each of the k picked
    chunks has a maximum >= max(c) >= v_i: the candidates hold k >= i entries >= v_i.
    Otherwise they hold all i. Either way the candidates' i-th largest is v_i (they are
    entries of the row, so it is no larger). Among equal entries the index picked may
    differ from torch.topk's, which does not specify it either.
    """
    *lead, width = x.shape
    chunks = width // TOPK_CHUNK
    if chunks <= k or x.device.type != "cpu":  # a CPU speed-up: GPUs keep torch.topk
        return x.topk(k, dim=-1)
    x = x.reshape(-1, width)  # (rows, width)
    rows, end = x.size(0), chunks * TOPK_CHUNK
    body = x[:, :end].view(rows, chunks, TOPK_CHUNK)
    picked = body.amax(dim=-1).topk(k, dim=-1).indices  # (rows, k) chunks
    cand = body.gather(1, picked[:, :, None].expand(rows, k, TOPK_CHUNK))  # (rows, k, chunk)
    index = picked[:, :, None] * TOPK_CHUNK + torch.arange(TOPK_CHUNK, device=x.device)
    cand, index = cand.view(rows, -1), index.view(rows, -1)  # (rows, k * chunk)
    if end < width:  # the partial chunk is always a candidate
        cand = torch.cat([cand, x[:, end:]], dim=1)
        index = torch.cat([index, torch.arange(end, width, device=x.device).expand(rows, -1)], 1)
    top, pos = cand.topk(k, dim=-1)  # (rows, k)
    return top.view(*lead, k), index.gather(1, pos).view(*lead, k)
