"""`row_topk` and `block_topk` (`fast/search.py`) against `torch.topk`, the core search's
top-k: the same values and indices, alone and inside whole searches."""

from __future__ import annotations

import math

import pytest
import torch

from aiayn.config import DecodeConfig
from aiayn.decode.search import make_strategy, run_search
from aiayn.fast.search import TOPK_CHUNK, block_topk, row_topk
from aiayn.model.transformer import Transformer
from conftest import tiny_model_config
from tiny_run import one_thread  # noqa: F401 (autouse fixture)


@pytest.mark.parametrize("k", [1, 4])
@pytest.mark.parametrize("shape", [(3, 4, 1000), (5, 8000), (2, 7 * TOPK_CHUNK), (2, 100)])
def test_row_topk_is_torch_topk(shape, k):
    """Values and indices of torch.topk (distinct values), forbidden (-inf) tokens included;
    (2, 100) has fewer chunks than k + 1 and takes torch.topk itself."""
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(k))
    x[..., ::7] = -math.inf
    expected = x.topk(k, dim=-1)
    values, index = row_topk(x, k)
    assert torch.equal(values, expected.values) and torch.equal(index, expected.indices)


@pytest.mark.parametrize("k", [4, 8, 20])
@pytest.mark.parametrize("shape", [(3, 4, 1000), (2, 5, 40 * TOPK_CHUNK), (1, 2, 100), (4, 1, 500)])
def test_block_topk_is_torch_topk_over_the_blocks_rows(shape, k):
    """The k best of each block of rows (a sentence's beam), as torch.topk over the block
    flattened: values and indices into rows x width, with each row's partial chunk; (1, 2,
    100) has too few chunks and takes torch.topk itself."""
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(k))
    x[..., ::7] = -math.inf
    expected = x.flatten(-2).topk(k, dim=-1)
    values, index = block_topk(x, k)
    assert torch.equal(values, expected.values) and torch.equal(index, expected.indices)
    x[:, -1, -3:] = 50.0  # the best in the last row's partial chunk
    x[:, 0, 0] = 40.0
    values, index = block_topk(x, k)
    assert values[:, :3].eq(50.0).all() and values[:, 3].eq(40.0).all()
    assert torch.equal(x.flatten(-2).gather(-1, index), values)


def test_row_topk_finds_the_best_wherever_they_lie():
    """All k best in one chunk while every other chunk's maximum beats the runner-up
    chunks' entries; the best in the last, partial chunk; the best split between both."""
    width, c = 1000, TOPK_CHUNK  # 15 whole chunks and a partial one of 40
    x = torch.rand(3, width, generator=torch.Generator().manual_seed(0)) - 5.0
    x[:, ::c] = 5.0 + torch.arange(0, width, c) / width  # each chunk's first entry: ~5
    x[0, 2 * c + 3 : 2 * c + 7] = torch.tensor([9.0, 8.0, 7.0, 6.0])  # one chunk holds all
    x[1, -4:] = torch.tensor([9.0, 8.0, 7.0, 6.0])  # the partial chunk holds all
    x[2, [5, width - 1, 3 * c + 1, width - 2]] = torch.tensor([9.0, 8.0, 7.0, 6.0])
    expected = x.topk(4, dim=-1)
    values, index = row_topk(x, 4)
    assert torch.equal(values, expected.values) and torch.equal(index, expected.indices)
    assert values[:, 0].eq(9.0).all() and values[:, 3].eq(6.0).all()


def test_row_topk_with_ties_gives_topks_values_at_distinct_indices():
    x = torch.randint(0, 3, (6, 1000), generator=torch.Generator().manual_seed(0)).float()
    x[:, 500] = 3.0  # one winner, then ties among the 2s
    values, index = row_topk(x, 4)
    assert torch.equal(values, x.topk(4, dim=-1).values)
    assert torch.equal(x.gather(1, index), values)
    assert all(len(set(row)) == 4 for row in index.tolist())


def test_row_topk_off_the_cpu_is_torch_topk(monkeypatch):
    """The chunked path was measured on CPUs only: elsewhere (here the meta device, as a
    stand-in for a GPU) row_topk is torch.topk and takes no chunk maxima."""

    def no_chunks(*args, **kwargs):
        raise AssertionError("row_topk took chunk maxima")

    monkeypatch.setattr(torch.Tensor, "amax", no_chunks)
    values, index = row_topk(torch.empty(3, 4, 8000, device="meta"), 8)
    assert values.shape == index.shape == (3, 4, 8)
    with pytest.raises(AssertionError, match="chunk maxima"):  # the CPU path does take them
        row_topk(torch.randn(3, 4, 8000), 8)


@torch.no_grad()
@pytest.mark.parametrize("greedy", [False, True], ids=["beam", "greedy"])
def test_search_over_a_wide_vocabulary_equals_the_one_with_torch_topk(greedy):
    """A model whose vocabulary spans many chunks: row_topk and torch.topk give the same
    translations, scores and log-probabilities, in beam and in greedy search."""
    model = Transformer(tiny_model_config(vocab_size=700)).eval()
    src = torch.tensor([[5, 6, 7, 8, 3], [9, 10, 3, 0, 0], [11, 3, 0, 0, 0]])
    config = DecodeConfig(max_len_offset=8)
    ours = make_strategy(model, src, config, greedy=greedy, topk=row_topk)
    theirs = make_strategy(model, src, config, greedy=greedy)
    assert run_search(model, src, ours) == run_search(model, src, theirs)
