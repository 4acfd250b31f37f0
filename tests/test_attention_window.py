"""Restricted self-attention (sec. 4, Table 1; `model.attention_window`): the windowed
computation equals eq. 1 over the full matrix with the window masked, the model equals full
attention when the window covers the sequence, weights outside the window are exactly 0,
and cached decoding (core and fast path) equals recomputing the prefix."""

from __future__ import annotations

import copy
import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from aiayn import fast
from aiayn.attention_view import capture_weights
from aiayn.config import ConfigError, DecodeConfig, ModelConfig
from aiayn.decode.search import beam_search, greedy_search
from aiayn.decode.strategy import length_penalty
from aiayn.model.attention import attend_mask
from aiayn.model.transformer import Transformer
from aiayn.model.window import windowed_attention
from conftest import tiny_model_config
from tiny_run import one_thread  # noqa: F401  (autouse: one torch thread)

PAD, BOS, EOS = 0, 2, 3
SRC = torch.tensor([[5, 6, 7, 8, 9, 10, 11, 3], [12, 13, 14, 3, 0, 0, 0, 0]])  # padded


def oracle(q, k, v, window, pad, causal):
    """Eq. 1 over the whole (n, n) matrix, the window and padding masked."""
    n = q.size(2)
    return F.scaled_dot_product_attention(q, k, v, attend_mask(pad, causal, n, n, q.device, window))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n, window", [(1, 1), (5, 1), (7, 2), (16, 3), (13, 5), (9, 8), (6, 20)])
def test_windowed_attention_and_its_gradients_equal_the_masked_full_matrix(n, window, causal):
    q, k, v = (torch.randn(3, 2, n, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    pad = torch.zeros(3, n, dtype=torch.bool)
    pad[1, max(1, n - 2) :] = True  # a little padding
    pad[2, 1:] = True  # much: queries far from the word see no key at all
    out = windowed_attention(q, k, v, window, pad, causal)
    expected = oracle(q, k, v, window, pad, causal)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)
    grad = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), grad)
    for got, want in zip(grads, torch.autograd.grad(expected, (q, k, v), grad)):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


def models(window: int, **overrides) -> tuple[Transformer, Transformer]:
    """(full attention, the same weights with `window`), float64, eval mode."""
    full = Transformer(tiny_model_config(**overrides)).double().eval()
    restricted = Transformer(tiny_model_config(attention_window=window, **overrides))
    restricted.load_state_dict(full.state_dict())
    return full, restricted.double().eval()


@pytest.mark.parametrize("window", [7, 8, 50])  # 7 = len - 1: windowed, seeing everything
def test_a_window_that_covers_the_sequence_is_full_attention(window):
    full, restricted = models(window)
    tgt_in = torch.tensor([[BOS, 5, 6, 7, 8, 9, 10, 11], [BOS, 12, 13, 0, 0, 0, 0, 0]])
    pad = full.pad_mask(SRC)
    memory = full.encode(SRC, pad)
    real = ~pad[:, :, None]  # encoder outputs at padded positions are never read
    torch.testing.assert_close(restricted.encode(SRC, pad) * real, memory * real)
    torch.testing.assert_close(restricted(SRC, tgt_in), full(SRC, tgt_in))


def test_a_narrow_window_changes_the_model_and_only_self_attention_is_restricted():
    full, restricted = models(2)
    tgt_in = torch.tensor([[BOS, 5, 6, 7, 8, 9, 10, 11]])
    assert not torch.allclose(restricted(SRC[:1], tgt_in), full(SRC[:1], tgt_in))
    weights = capture_weights(restricted, SRC[:1], tgt_in)  # {kind: (layers, 1, heads, q, k)}
    i, j = torch.arange(8)[:, None], torch.arange(8)
    assert (weights["encoder"][..., (i - j).abs() > 2] == 0).all()
    assert (weights["encoder"][..., (i - j).abs() <= 2] > 0).all()
    assert (weights["decoder"][..., (j > i) | (j < i - 2)] == 0).all()
    assert (weights["decoder"][..., (j <= i) & (j >= i - 2)] > 0).all()
    assert (weights["cross"] > 0).all()  # encoder-decoder attention sees the whole source


def _log_prob(model, src, content):
    tgt = torch.tensor([[BOS, *content, EOS]])
    logp = model(src, tgt[:, :-1]).log_softmax(-1)[0]  # (len, vocab), no cache
    return logp.gather(1, tgt[0, 1:, None]).sum().item()


@pytest.mark.parametrize("use_fast", [False, True])
@torch.no_grad()
def test_cached_greedy_decoding_equals_recomputing_the_prefix(use_fast, onednn):
    model = Transformer(tiny_model_config(attention_window=2)).eval()
    config = DecodeConfig(beam=1, max_len_offset=6)
    if use_fast:
        core = copy.deepcopy(model)
        model, search = fast.for_inference(model)
        tgt_in = torch.tensor([[BOS, 5, 6, 7, 8, 9, 10, 11]] * 2)
        torch.testing.assert_close(model(SRC, tgt_in), core(SRC, tgt_in))  # training's path
        hyps = [found[0] for found in search(SRC, config)]  # greedy at beam 1
    else:
        hyps = greedy_search(model, SRC, config)
    for i, hyp in enumerate(hyps):
        row = SRC[i : i + 1, : int(SRC[i].ne(PAD).sum())]
        max_len, tgt = row.size(1) + 6, [BOS]
        while tgt[-1] != EOS:
            logp = model(row, torch.tensor([tgt]))[0, -1].log_softmax(-1)  # the whole prefix
            logp[[PAD, BOS]] = -math.inf
            tgt.append(EOS if len(tgt) >= max_len else int(logp.argmax()))
        assert len(tgt) > 4 and hyp.tokens == tgt[1:-1]  # long enough for the window to act
        assert hyp.log_prob == pytest.approx(_log_prob(model, row, tgt[1:-1]), abs=1e-5)


@torch.no_grad()
def test_cached_decoding_of_several_positions_at_once_equals_recomputation():
    model = Transformer(tiny_model_config(attention_window=2)).double().eval()
    tgt_in = torch.tensor([[BOS, 5, 6, 7, 8, 9, 10, 11], [BOS, 12, 13, 14, 15, 16, 17, 18]])
    pad = model.pad_mask(SRC)
    memory = model.encode(SRC, pad)
    cache = model.new_cache(pad)
    steps = [model.decode(tgt_in[:, a:b], memory, pad, cache) for a, b in [(0, 3), (3, 4), (4, 8)]]
    torch.testing.assert_close(torch.cat(steps, dim=1), model.decode(tgt_in, memory, pad))


@torch.no_grad()
def test_wide_beam_search_with_a_window_equals_exhaustive_enumeration():
    # vocab pad, unk, bos, eos, a, b: |Y| <= 4 (src_len 3 + 1), window 1 restricts its
    # last positions; all 40 sequences fit in the beam, so it must rank them exactly.
    model = Transformer(tiny_model_config(vocab_size=6, attention_window=1)).eval()
    src = torch.tensor([[4, 5, EOS]])
    ranked = sorted(
        ((_log_prob(model, src, seq) / length_penalty(len(seq) + 1, 0.6), list(seq))
         for n in range(4) for seq in itertools.product([1, 4, 5], repeat=n)),
        reverse=True,
    )  # fmt: skip
    config = DecodeConfig(beam=40, nbest=40, alpha=0.6, max_len_offset=1, min_len=0)
    hyps = beam_search(model, src, config)[0]
    assert [h.tokens for h in hyps] == [seq for _, seq in ranked]
    for hyp, (score, _) in zip(hyps, ranked):
        assert hyp.score == pytest.approx(score, abs=1e-5)


@torch.no_grad()
def test_beam_search_with_a_window_is_the_same_on_the_fast_path(onednn):
    model = Transformer(tiny_model_config(attention_window=2)).eval()
    config = DecodeConfig(beam=3, nbest=3, max_len_offset=8)
    core = beam_search(model, SRC, config)
    _, search = fast.for_inference(copy.deepcopy(model))
    found = search(SRC, config)
    tokens = [[h.tokens for h in hyps] for hyps in core]
    assert [[h.tokens for h in hyps] for hyps in found] == tokens
    for a, b in zip(itertools.chain(*found), itertools.chain(*core)):
        assert a.score == pytest.approx(b.score, abs=1e-5)


def test_the_window_is_validated_and_zero_by_default():
    assert ModelConfig().attention_window == 0
    with pytest.raises(ConfigError, match=r"model\.attention_window must be >= 0, got -1"):
        ModelConfig(attention_window=-1)
