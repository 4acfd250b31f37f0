"""The shared decoding cache (`fast/kv_cache.py`) and its grouped attention
(`fast/attention.py: GroupedAttention`) against the core's plain cache, in float64: every
step of a search's life (the beam widening, reorders within a sentence's rows, several
positions at once, more rows per sentence, sentences leaving) gives the same hidden states."""

from __future__ import annotations

import copy

import pytest
import torch

from aiayn import fast
from aiayn.data.vocab import BOS_ID, EOS_ID, PAD_ID
from aiayn.decode.search import beam_search, run_search
from aiayn.decode.strategy import BeamStrategy
from aiayn.fast.attention import GroupedAttention
from aiayn.fast.kv_cache import SharedKVCache, SharedLayerCache
from aiayn.model.transformer import Transformer
from conftest import own_histories, tiny_model_config

# (tokens fed per row, the reorder before them): the script both caches follow.
SCRIPT = [
    ([[2], [2]], None),
    ([[4], [5]], None),
    ([[6], [7], [8], [9]], [0, 0, 1, 1]),  # the beam widens to 2 rows per sentence
    ([[10, 11], [12, 13], [14, 15], [16, 17]], [1, 0, 3, 3]),  # two positions at once
    ([[18], [19], [20], [21], [22], [4]], [1, 0, 1, 3, 2, 3]),  # 3 rows per sentence
    ([[5], [6]], [4, 3]),  # sentence 0 is done, sentence 1 keeps 2 of its rows
    ([[7], [8]], [1, 1]),
]


@pytest.mark.parametrize("window", [0, 2], ids=["full attention", "window 2"])
@torch.no_grad()
def test_the_shared_cache_decodes_as_the_core_cache_in_float64(window, store_buffers):
    core = Transformer(tiny_model_config(attention_window=window)).double().eval()
    model = fast.apply(copy.deepcopy(core))
    src = torch.tensor([[5, 6, 7, 3], [9, 10, 3, 0]])
    pad = core.pad_mask(src)
    plain = core.new_cache(pad)
    shared = SharedKVCache(len(model.decoder), pad, window, store_buffers)
    memory = (core.encode(src, pad), model.encode(src, pad))
    for step, (tokens, rows) in enumerate(SCRIPT):
        if rows is not None:
            plain.reorder(torch.tensor(rows))
            shared.reorder(torch.tensor(rows))
        tokens = torch.tensor(tokens)
        first = step == 0
        expected = core.decode(tokens, memory[0] if first else None, plain.src_pad_mask, plain)
        got = model.decode(tokens, memory[1] if first else None, shared.src_pad_mask, shared)
        torch.testing.assert_close(got, expected, atol=1e-12, rtol=1e-12)
    assert shared.length == plain.length == 8
    layer = shared.layers[0]
    assert layer.cross_k.size(0) == shared.src_pad_mask.size(0) == 1  # one row per sentence
    assert layer.cross_k.is_contiguous() and layer.cross_v.is_contiguous()


def test_reorders_compose_and_move_no_stored_entry():
    """Two reorders before a step act as one; they rewrite the ancestry, not the store."""
    one_sentence = torch.zeros(1, 1, dtype=torch.bool)
    cache = SharedKVCache(1, one_sentence)
    layer = cache.layers[0]
    first = torch.arange(4.0).view(4, 1, 1, 1)  # (rows, 1, heads, d): row i holds i
    layer.extend(first, first)
    cache.length += 1
    cache.reorder(torch.tensor([3, 3, 1, 0]))
    cache.reorder(torch.tensor([2, 0, 1, 1]))  # -> original rows [1, 3, 3, 3]
    k, v, mask = layer.extend(torch.full((4, 1, 1, 1), 9.0), torch.full((4, 1, 1, 1), 9.0))
    assert own_histories(k, mask).tolist() == [[1, 9], [3, 9], [3, 9], [3, 9]]
    assert k[0, 0, :4, 0].tolist() == [0, 1, 2, 3] and torch.equal(k, v)  # entries stay put
    assert cache.pending is None and cache.slots.tolist() == [[1, 0], [3, 1], [3, 2], [3, 3]]


def test_a_step_is_set_up_once_for_all_its_layers(monkeypatch):
    """`prepare` runs at the first layer of a step; the others find it done."""
    model = fast.apply(Transformer(tiny_model_config()).eval())
    src = torch.tensor([[5, 6, 7, 3]])
    pad = model.pad_mask(src)
    cache = SharedKVCache(len(model.decoder), pad)
    calls = []
    prepare = SharedKVCache._mask
    monkeypatch.setattr(SharedKVCache, "_mask", lambda self, *a: calls.append(a) or prepare(self, *a))
    model.decode(torch.tensor([[BOS_ID]]), model.encode(src, pad), pad, cache)
    model.decode(torch.tensor([[4]]), None, pad, cache)
    assert len(calls) == 2 and len(model.decoder) == 2


@torch.no_grad()
def test_a_search_over_the_shared_cache_finds_the_core_searchs_hypotheses():
    """Beam 3, sentences forced to their own output lengths so that they leave at different
    steps: the same hypotheses, in float64 the same scores."""
    core = Transformer(tiny_model_config()).double().eval()
    model = fast.apply(copy.deepcopy(core))
    src = torch.tensor([[5, 6, 7, 8, 3], [9, 10, 3, 0, 0], [11, 12, 13, 3, 0]])

    def strategy():
        return BeamStrategy(torch.tensor([4, 9, 6]), 3, 2, 0.6, 1000, EOS_ID, PAD_ID)

    expected = run_search(core, src, strategy())
    got = run_search(model, src, strategy(), BOS_ID, SharedKVCache(2, model.pad_mask(src)))
    summary = lambda found: [[(h.tokens, round(h.score, 9)) for h in s] for s in found]  # noqa: E731
    assert summary(got) == summary(expected)
    assert summary(beam_search(model, src)) == summary(beam_search(core, src))


def test_the_fast_attention_reads_the_core_cache_as_the_core_does():
    """The grouped path is for the shared cache only: with the core's cache (or none) the
    swapped module computes the core's attention."""
    core = Transformer(tiny_model_config()).eval()
    model = fast.apply(copy.deepcopy(core))
    assert isinstance(model.decoder[0].self_attn, GroupedAttention)
    src, tgt = torch.tensor([[5, 6, 7, 3]]), torch.tensor([[2, 4, 5]])
    pad = core.pad_mask(src)
    caches = core.new_cache(pad), model.new_cache(pad)
    for t in range(3):
        a = core.decode(tgt[:, t : t + 1], core.encode(src, pad), pad, caches[0])
        b = model.decode(tgt[:, t : t + 1], model.encode(src, pad), pad, caches[1])
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-5)
    assert not isinstance(caches[1].layers[0], SharedLayerCache)
