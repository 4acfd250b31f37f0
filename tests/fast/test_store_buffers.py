"""The cache's kept memory (`fast/buffers.py: StoreBuffers`): searches that take their
stores from it decode exactly as with fresh memory, and a later search reuses it."""

from __future__ import annotations

import mmap

import pytest
import torch

from aiayn import fast
from aiayn.config import DecodeConfig
from aiayn.data.vocab import BOS_ID, EOS_ID, PAD_ID
from aiayn.decode.search import beam_search, run_search
from aiayn.decode.strategy import BeamStrategy
from aiayn.fast.buffers import StoreBuffers
from aiayn.fast.kv_cache import GROW, SharedKVCache, SharedLayerCache
from aiayn.fast.search import FastSearch
from aiayn.model.transformer import Transformer
from conftest import tiny_model_config


@pytest.fixture
def model() -> Transformer:
    """A model with the fast path's pieces, which read the shared cache."""
    return fast.apply(Transformer(tiny_model_config()).eval())


def kept(buffers: StoreBuffers) -> list[torch.Tensor]:
    """The buffers kept, read from the object's insides (a test's view)."""
    return [b for pair in buffers._buffers.values() for b in pair]


def holds(buffers: StoreBuffers, tensor: torch.Tensor) -> bool:
    """Whether `tensor` lies in one of the kept buffers."""
    return any(b.untyped_storage().data_ptr() == tensor.untyped_storage().data_ptr()
               for b in kept(buffers))  # fmt: skip


def nbytes(buffers: StoreBuffers) -> int:
    return sum(b.untyped_storage().nbytes() for b in kept(buffers))


def new_cache(model, pad: torch.Tensor, buffers: StoreBuffers | None) -> SharedKVCache:
    return SharedKVCache(len(model.decoder), pad, buffers=buffers)


def batch(lengths: list[int]) -> torch.Tensor:
    """(sentences, longest) random sources + eos, right-padded."""
    src = torch.full((len(lengths), max(lengths) + 1), PAD_ID)
    for row, n in enumerate(lengths):
        src[row, :n] = torch.randint(4, 23, (n,))
        src[row, n] = EOS_ID
    return src


def beam(model, src: torch.Tensor, buffers: StoreBuffers) -> list:
    """The fast path's beam search, its cache's memory from `buffers`."""
    searcher = FastSearch(model)
    searcher.buffers = buffers
    return searcher(src, DecodeConfig())


def search(model, src: torch.Tensor, out_lengths: list[int], buffers: StoreBuffers | None):
    """Beam 3, each sentence forced to its own output length (min_len beyond every max_len:
    eos comes only where max_len forces it), so sentences leave the batch at different steps
    and the longest outlives the stores' first capacity. buffers None: fresh memory."""
    max_len = torch.tensor(out_lengths)
    strategy = BeamStrategy(max_len, 3, 2, 0.6, 1000, EOS_ID, PAD_ID)
    if buffers is None:
        return run_search(model, src, strategy, BOS_ID, new_cache(model, model.pad_mask(src), None))
    with buffers.claim() as claimed:
        return run_search(model, src, strategy, BOS_ID, new_cache(model, model.pad_mask(src), claimed))


def summary(hyps) -> list:
    return [[(h.tokens, round(h.score, 5)) for h in sentence] for sentence in hyps]


def test_searches_with_kept_buffers_decode_as_with_fresh_memory(model):
    """Batches of other sizes one after the other, each twice: the stores grow (from one
    kept buffer into the other), shrink when sentences leave, and are reused. (That the
    cache itself decodes as the core's does is test_kv_cache's to check.)"""
    small, large = batch([5, 3]), batch([7, 6, 4, 2])
    small_out, large_out = [4, GROW + 8], [2, 9, GROW + 12, 5]
    expected = {
        "small": summary(search(model, small, small_out, None)),
        "large": summary(search(model, large, large_out, None)),
    }
    buffers = StoreBuffers()
    for name in ["small", "large", "small", "large"]:
        src, out = (small, small_out) if name == "small" else (large, large_out)
        assert summary(search(model, src, out, buffers)) == expected[name]


def test_the_stores_live_in_the_buffers_and_a_second_search_adds_no_memory(model, monkeypatch):
    buffers = StoreBuffers()
    held = []
    extend = SharedLayerCache.extend

    def recording(self, k, v):
        out = extend(self, k, v)
        held.append(holds(buffers, self.self_k) and holds(buffers, self.self_v))
        return out

    monkeypatch.setattr(SharedLayerCache, "extend", recording)
    src, out = batch([6, 4, 3]), [GROW + 5, 3, 8]
    search(model, src, out, buffers)
    first = nbytes(buffers)
    assert first > 0 and all(held)
    held.clear()
    search(model, src, out, buffers)
    assert nbytes(buffers) == first and held and all(held)


@pytest.fixture
def claimed() -> StoreBuffers:
    buffers = StoreBuffers()
    with buffers.claim():
        yield buffers


def test_a_replacement_store_never_overlaps_the_store_it_replaces(claimed):
    """Two buffers per store, taken in turn: a grown or compacted store is copied from the
    current one, so it must not be written into the current one's memory."""
    buffers, like, key = claimed, torch.zeros(1), (0, "self_k")
    first = buffers.empty(key, (2, 3), like, None)
    second = buffers.empty(key, (2, 4), like, first)
    assert second.untyped_storage().data_ptr() != first.untyped_storage().data_ptr()
    third = buffers.empty(key, (2, 3), like, second)  # fits the first buffer again
    assert third.untyped_storage().data_ptr() == first.untyped_storage().data_ptr()
    bigger = buffers.empty(key, (4, 8), like, third)  # too big for the second: replaced
    assert bigger.untyped_storage().data_ptr() not in {
        third.untyped_storage().data_ptr(), second.untyped_storage().data_ptr()
    }
    assert nbytes(buffers) == (6 + 32) * 4  # two buffers, no more
    small = buffers.empty(key, (1, 7), like, bigger)  # the first is too small: replaced
    assert small.untyped_storage().nbytes() == 32 * 4  # by one as large as the pair's largest
    assert nbytes(buffers) == (32 + 32) * 4
    half = buffers.empty(key, (2, 3), like.bfloat16(), small)  # another dtype: replaced
    assert half.dtype == torch.bfloat16 and not holds(buffers, bigger)
    assert nbytes(buffers) == 32 * 4 + 6 * 2


def test_misuse_that_would_share_a_live_stores_memory_is_refused(model):
    buffers, src = StoreBuffers(), batch([4, 2])
    pad = model.pad_mask(src)
    with pytest.raises(RuntimeError, match="outside claim"):
        buffers.empty((0, "self_k"), (1,), torch.zeros(1), None)
    with buffers.claim() as claimed:
        first, second = new_cache(model, pad, claimed), new_cache(model, pad, claimed)
        tokens = torch.full((2, 1), BOS_ID)
        model.decode(tokens, model.encode(src, pad), pad, first)
        with pytest.raises(RuntimeError, match="made twice"):  # a second cache on one claim
            model.decode(tokens, model.encode(src, pad), pad, second)


def test_a_search_that_fails_gives_its_claim_back(model, monkeypatch):
    buffers, src = StoreBuffers(), batch([4, 2])
    steps = []

    def failing(hidden):
        steps.append(1)
        if len(steps) == 3:
            raise ValueError("stop")
        return Transformer.project(model, hidden)

    monkeypatch.setattr(model, "project", failing)
    with pytest.raises(ValueError, match="stop"):
        beam(model, src, buffers)
    with buffers.claim() as claimed:
        assert claimed is buffers


def test_buffers_made_in_inference_mode_serve_later_searches_outside_it(model):
    buffers, src = StoreBuffers(), batch([5, 3])
    expected = summary(beam_search(model, src))
    with torch.inference_mode():
        assert summary(beam(model, src, buffers)) == expected
    assert summary(beam(model, src, buffers)) == expected
    with torch.inference_mode():
        assert summary(beam(model, src, buffers)) == expected


def test_a_search_finding_the_buffers_in_use_allocates_its_own(model):
    buffers, src = StoreBuffers(), batch([4, 2])
    expected = summary(beam_search(model, src))
    with buffers.claim() as mine:
        assert mine is buffers
        with buffers.claim() as other:
            assert other is None
        assert summary(beam(model, src, buffers)) == expected
        assert nbytes(buffers) == 0  # the search above did not touch them
    assert summary(beam(model, src, buffers)) == expected
    assert nbytes(buffers) > 0


def test_buffers_are_kept_for_cpu_searches_only():
    """On a GPU, PyTorch's caching allocator already reuses freed memory."""
    assert isinstance(StoreBuffers.for_device("cpu"), StoreBuffers)
    assert StoreBuffers.for_device(torch.device("cuda", 0)) is None


def test_a_search_records_no_graph_into_the_buffers(model):
    """Kept across searches, a buffer written under autograd would chain every search's
    graph to the next and never free it: the search runs without gradients for any caller."""
    buffers = StoreBuffers()
    with torch.enable_grad():
        search(model, batch([4, 3]), [5, 6], buffers)
    with buffers.claim():
        store = buffers.empty((0, "self_k"), (1,), model.tgt_embed.weight, None)
    assert holds(buffers, store) and not store.requires_grad and store.grad_fn is None


def test_kept_buffers_are_memory_maps_of_their_own(model):
    """A buffer grows in the largest batch so far. From the C library's heap it would land at
    the heap's top while that batch's tensors fill it, and the heap, which gives memory back
    only from its top, would keep everything below it resident: a server's memory rose with
    each new largest batch. Each kept buffer is a memory map of its own, so it starts on a
    page, where blocks of the heap start 16 or more bytes into theirs."""
    buffers = StoreBuffers()
    beam(model, batch([5, 2, 7]), buffers)
    assert len(kept(buffers)) >= 4
    assert all(b.untyped_storage().data_ptr() % mmap.PAGESIZE == 0 for b in kept(buffers))
