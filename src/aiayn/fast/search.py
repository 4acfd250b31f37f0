"""The search's fast path: the core's search driver with the shared cache
(`kv_cache.SharedKVCache`, its memory kept between searches on a CPU) and `row_topk`.

    search = FastSearch(model)                        # one per Translator
    hyps = search(src, config)                        # as `decode.search.search(model, ...)`
"""

from __future__ import annotations

from contextlib import nullcontext

import torch
from torch import Tensor

from aiayn.config import DecodeConfig
from aiayn.decode.search import Strategy, make_strategy, run_search
from aiayn.decode.strategy import Hypothesis
from aiayn.fast.attention import GroupedAttention
from aiayn.fast.buffers import StoreBuffers
from aiayn.fast.int8 import cross_store_dtype
from aiayn.fast.kv_cache import SharedKVCache


class Searcher:
    """A search for one model (`self.model`), called as `search(src, config)`: its
    strategy with `row_topk`, driven by the subclass's `run`."""

    model: object
    kind = "fast path"  # what runs a step, as `aiayn serve`'s /info names it

    def __call__(
        self, src: Tensor, config: DecodeConfig, bos_id: int | None = None,
        eos_id: int | None = None,
    ) -> list[list[Hypothesis]]:  # fmt: skip
        """Greedy search at beam 1, else beam search: per sentence its hypotheses."""
        strategy = make_strategy(self.model, src, config, eos_id, config.beam == 1, topk=row_topk)
        return self.run(src, strategy, bos_id)

    def run(self, src: Tensor, strategy: Strategy, bos_id: int | None = None) -> list[list[Hypothesis]]:
        raise NotImplementedError


class FastSearch(Searcher):
    """`decode.search.search` for one model, with the fast path's pieces: `row_topk`, and a
    shared cache whose memory is kept from one search to the next on a CPU (`StoreBuffers`:
    for the life of this object) and whose encoder-decoder stores are in the int8 model's
    dtype (`int8`). One search holds the kept memory at a time; a search that finds it held
    (another thread's) allocates its own."""

    def __init__(self, model, int8: bool = False) -> None:
        if not all(isinstance(layer.self_attn, GroupedAttention) for layer in model.decoder):
            raise TypeError("FastSearch reads the shared cache through the fast path's "
                            "attention: give it a model from fast.for_inference")  # fmt: skip
        self.model = model
        self.buffers = StoreBuffers.for_device(next(model.parameters()).device)
        self.cross_dtype = cross_store_dtype() if int8 else None

    def run(self, src: Tensor, strategy: Strategy, bos_id: int | None = None) -> list[list[Hypothesis]]:
        """`decode.search.run_search` of a given strategy (e.g. a benchmark's, which forces
        the output lengths; give it `row_topk`) over the shared cache."""
        model = self.model
        claim = self.buffers.claim() if self.buffers is not None else nullcontext(None)
        with claim as kept:
            cache = SharedKVCache(len(model.decoder), model.pad_mask(src),
                                  model.config.attention_window, kept, self.cross_dtype)  # fmt: skip
            return run_search(model, src, strategy, bos_id, cache)


TOPK_CHUNK = 64  # entries per chunk in `row_topk` (the best of 32, 64, 128 and 256)


def row_topk(x: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """The k largest entries along the last dimension and their indices, largest first:
    the values of `x.topk(k, dim=-1)`, faster over a vocabulary. (..., width) -> (..., k) x 2.
    (`block_topk` of one row.)"""
    return block_topk(x.unsqueeze(-2), k)


def block_topk(x: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """The k largest entries of each block of rows and their indices into the block's
    entries, largest first: the values of `x.flatten(-2).topk(k, dim=-1)`, faster over a
    vocabulary. (..., rows, width) -> (..., k) x 2; an index i is row i // width, column
    i % width. (A beam's rows are a block: a sentence's best extensions over all of them.)

    PyTorch's CPU topk walks each row element by element, about as long as the log-softmax
    of a beam step itself. Here each chunk of TOPK_CHUNK entries of a row gives its maximum
    in one vectorised pass, and topk runs only over the k chunks of the block with the
    largest maxima (and each row's last, partial chunk).

    Why the values are exact: take a block's i largest entries (i <= k), the least of them
    v_i. If one of them lies in a whole chunk c that was not picked, each of the k picked
    chunks has a maximum >= max(c) >= v_i: the candidates hold k >= i entries >= v_i.
    Otherwise they hold all i. Either way the candidates' i-th largest is v_i (they are
    entries of the block, so it is no larger). Among equal entries the index picked may
    differ from torch.topk's, which does not specify it either.
    """
    *lead, rows, width = x.shape
    chunks = width // TOPK_CHUNK
    # (an exported k, `static_beam.BeamStep`'s 2 * beam plus the rows' set-aside tokens,
    # 5 * beam, is no int: the beam's rows hold 16 * beam chunks or more wherever it
    # searches by chunks, `CHUNKED_FROM`)
    if x.device.type != "cpu" or (isinstance(k, int) and rows * chunks <= k):  # GPUs keep torch.topk
        return x.flatten(-2).topk(k, dim=-1)
    x = x.reshape(-1, rows, width)  # (blocks, rows, width)
    blocks, end = x.size(0), chunks * TOPK_CHUNK
    body = x[:, :, :end].unflatten(2, (chunks, TOPK_CHUNK))  # (blocks, rows, chunks, chunk)
    picked = body.amax(dim=-1).view(blocks, rows * chunks).topk(k, dim=-1).indices  # (blocks, k)
    row, chunk = picked // chunks, picked % chunks
    block = torch.arange(blocks, device=x.device)[:, None]
    cand = body[block, row, chunk].view(blocks, -1)  # (blocks, k * chunk)
    index = (row * width + chunk * TOPK_CHUNK)[:, :, None] + torch.arange(TOPK_CHUNK, device=x.device)
    index = index.view(blocks, -1)
    if end < width:  # the partial chunks are always candidates
        cand = torch.cat([cand, x[:, :, end:].reshape(blocks, -1)], dim=1)
        columns = torch.arange(end, width, device=x.device)
        tail = (torch.arange(rows, device=x.device)[:, None] * width + columns).flatten()
        index = torch.cat([index, tail.expand(blocks, -1)], 1)
    top, pos = cand.topk(k, dim=-1)  # (blocks, k)
    return top.view(*lead, k), index.gather(1, pos).view(*lead, k)
