"""Search (sec. 6.1): exact where it can be checked, cached, batch-independent, and the
length rules (penalty, early termination, min / max length) on hand-set probabilities."""

from __future__ import annotations

import itertools
import math
from types import SimpleNamespace

import pytest
import torch

from aiayn.config import DecodeConfig
from aiayn.decode.search import beam_search, greedy_search
from aiayn.decode.strategy import BeamStrategy, length_penalty
from aiayn.model.cache import KVCache, LayerCache
from aiayn.model.transformer import Transformer
from conftest import tiny_model_config

PAD, UNK, BOS, EOS, A, B = range(6)


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny matmuls on 2 shared cores: one thread is ~100x faster than two fighting."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_length_penalty_is_gnmt_with_eos_counted():
    assert length_penalty(1, 0.6) == 1.0  # "<eos>" alone: |Y| = 1, lp = (6/6)^alpha
    assert length_penalty(3, 0.6) == pytest.approx((8 / 6) ** 0.6)  # "a b <eos>"
    assert length_penalty(7, 0.0) == 1.0


def _log_prob(model, src, content):
    """log P(content + eos | src) by one full teacher-forced pass: no cache."""
    tgt = torch.tensor([[BOS, *content, EOS]])
    logp = model(src, tgt[:, :-1]).log_softmax(-1)[0]  # (len, vocab)
    return logp.gather(1, tgt[0, 1:, None]).sum().item()


@pytest.mark.parametrize("alpha", [0.0, 0.6])
@torch.no_grad()
def test_wide_beam_search_equals_exhaustive_enumeration(alpha):
    # vocab: pad, unk, bos, eos, a, b; pad and bos are never generated, so each step has
    # 3 non-eos choices. src_len 3 + offset 1 -> |Y| <= 4: 1 + 3 + 9 + 27 = 40 sequences.
    model = Transformer(tiny_model_config(vocab_size=6)).eval()
    src = torch.tensor([[A, B, EOS]])
    ranked = sorted(
        (
            (_log_prob(model, src, seq) / length_penalty(len(seq) + 1, alpha), list(seq))
            for n in range(4)
            for seq in itertools.product([UNK, A, B], repeat=n)
        ),
        reverse=True,
    )
    assert len(ranked) == 40
    for nbest in (1, 40):
        config = DecodeConfig(beam=40, nbest=nbest, alpha=alpha, max_len_offset=1, min_len=0)
        hyps = beam_search(model, src, config)[0]
        assert [h.tokens for h in hyps] == [seq for _, seq in ranked[:nbest]]
        for hyp, (score, _) in zip(hyps, ranked):
            assert hyp.score == pytest.approx(score, abs=1e-5)


@pytest.mark.parametrize("vocab", [50, 1000])
def test_a_beam_step_picks_the_best_extensions_over_the_whole_vocabulary(vocab):
    """The step scores only each row's `beam` best tokens; the picks must be those of the
    full (batch, k * vocab) sum, including when one row holds all of a sentence's best."""
    gen = torch.Generator().manual_seed(0)
    batch, k, beam = 3, 4, 4
    logp = torch.randn(batch, k, vocab, generator=gen).log_softmax(-1)
    logp[:, :, EOS] = -30.0  # nothing ends: every pick continues
    scores = torch.randn(batch, k, generator=gen)
    scores[0] = torch.tensor([0.0, -40.0, -41.0, -42.0])  # sentence 0: row 0 takes all four
    strategy = BeamStrategy(torch.full((batch,), 9), beam, 1, 0.6, 0, EOS, PAD)
    strategy.scores, strategy.tokens = scores.clone(), torch.zeros(batch, k, 2, dtype=torch.long)
    strategy.length = 2
    rows, tokens, _ = strategy.step(logp.clone())
    top, index = (scores[:, :, None] + logp).view(batch, k * vocab).topk(beam, dim=1)
    parents = index // vocab + torch.arange(batch)[:, None] * k  # (batch, beam) input rows
    assert torch.equal(rows, parents.flatten()) and torch.equal(tokens, (index % vocab).flatten())
    assert torch.allclose(strategy.scores, top)
    assert torch.equal(rows[:beam], torch.zeros(beam, dtype=torch.long))  # all from row 0


@torch.no_grad()
def test_greedy_with_cache_equals_recomputing_the_prefix():
    model = Transformer(tiny_model_config()).eval()
    src = torch.tensor([[5, 6, 7, 8, 3], [9, 10, 3, 0, 0]])
    config = DecodeConfig(max_len_offset=6)
    for i, hyp in enumerate(greedy_search(model, src, config)):
        row = src[i : i + 1, : int(src[i].ne(PAD).sum())]
        max_len, tgt = row.size(1) + 6, [BOS]  # |Y| <= src_len + offset
        while tgt[-1] != EOS:
            logp = model(row, torch.tensor([tgt]))[0, -1].log_softmax(-1)  # whole prefix
            logp[[PAD, BOS]] = -math.inf
            tgt.append(EOS if len(tgt) >= max_len else int(logp.argmax()))
        assert hyp.tokens == tgt[1:-1]
        assert hyp.log_prob == pytest.approx(_log_prob(model, row, tgt[1:-1]), abs=1e-5)


@torch.no_grad()
def test_a_sentence_translates_the_same_alone_and_in_a_batch():
    model = Transformer(tiny_model_config()).eval()
    sents = [[5, 6, 7, 8, 9, 10, 3], [11, 3], [12, 13, 14, 3]]
    batch = torch.zeros(3, 7, dtype=torch.long)
    for i, s in enumerate(sents):
        batch[i, : len(s)] = torch.tensor(s)
    config = DecodeConfig(nbest=2, max_len_offset=10)
    together = beam_search(model, batch, config)
    for s, hyps in zip(sents, together):
        alone = beam_search(model, torch.tensor([s]), config)[0]
        assert [h.tokens for h in alone] == [h.tokens for h in hyps]
        for a, b in zip(alone, hyps):
            assert a.score == pytest.approx(b.score, abs=1e-5)


# --- a fake decoder with hand-set probabilities (fairseq's test style) -------------------


class FakeModel:
    """Next-token probabilities from a table keyed by the generated prefix (no bos).

    The prefix lives in the cache (as keys, through `extend`), so beam reordering and batch
    shrinking move it as they move real keys; `rows` records the batch rows run at each step.
    """

    config = SimpleNamespace(pad_id=PAD, bos_id=BOS, eos_id=EOS, positional="sinusoidal")

    def __init__(self, table, default):
        self.table, self.default, self.rows = table, default, []

    def pad_mask(self, src):
        return src.eq(PAD)

    def encode(self, src, src_pad_mask):
        return src.float()[:, :, None]

    def new_cache(self, src_pad_mask):
        return KVCache([LayerCache()], src_pad_mask)

    def decode(self, tgt_in, memory, src_pad_mask, cache):
        step = tgt_in[:, None, :, None]  # (rows, 1, 1, 1): the token as a one-head "key"
        store, _ = cache.layers[0].extend(step, step)  # (rows, 1, 1 + prefix, 1)
        history = store[:, 0, :, 0].long()  # (rows, 1 + prefix)
        cache.length += 1
        self.rows.append(tgt_in.size(0))
        probs = [self.table.get(tuple(h[1:]), self.default) for h in history.tolist()]
        logp = [[math.log(p) if p > 0 else -math.inf for p in row] for row in probs]
        return torch.tensor(logp)[:, None, :]  # (rows, 1, vocab) as "hidden"

    def project(self, hidden):
        return hidden


#        pad unk bos   eos     a     b
TABLE = {
    (): [0, 0, 0, 0.52, 0.48, 0],  # "<eos>" is the most probable single sentence
    (A,): [0, 0, 0, 0.02, 0.98, 0],
    (A, A): [0, 0, 0, 0.99, 0.01, 0],
}
DEFAULT = [0, 0, 0, 0.5, 0.25, 0.25]
SRC = torch.tensor([[A, B, A, B, EOS]])  # src_len 5: |Y| <= 5 + offset


def test_alpha_zero_stops_as_soon_as_no_live_hypothesis_can_win():
    fake = FakeModel(TABLE, DEFAULT)
    hyps = beam_search(fake, SRC, DecodeConfig(beam=2, alpha=0.0, max_len_offset=5, min_len=0))[0]
    # step 1: "<eos>" finishes with log .52 = -0.654; live "a" has -0.734 and can only fall
    assert hyps[0].tokens == [] and hyps[0].score == pytest.approx(math.log(0.52))
    assert fake.rows == [1]


def test_with_alpha_the_bound_uses_lp_at_max_length():
    fake = FakeModel(TABLE, DEFAULT)
    hyps = beam_search(fake, SRC, DecodeConfig(beam=2, alpha=0.6, max_len_offset=5))[0]
    # "a a <eos>": log(.48 * .98 * .99) / (8/6)^0.6 = -0.643 beats "<eos>": -0.654 / 1.
    # Stopping at step 1 would need -0.734 / lp(2) = -0.669 < -0.654: the wrong bound.
    # The right one is -0.734 / lp(10) = -0.42, so the search goes on; after step 3 the live
    # "a a a" (-5.36 / lp(10) = -3.1) cannot beat -0.643 and the search stops (not at 10).
    expected = math.log(0.48 * 0.98 * 0.99) / length_penalty(3, 0.6)
    assert hyps[0].tokens == [A, A] and hyps[0].score == pytest.approx(expected)
    assert fake.rows == [1, 2, 2]


@pytest.mark.parametrize("search", ["beam", "greedy"])
def test_min_len_forbids_eos_before_it(search):
    fake = FakeModel(TABLE, DEFAULT)
    config = DecodeConfig(beam=2, nbest=2, alpha=0.0, min_len=2, max_len_offset=5)
    if search == "beam":
        hyps = beam_search(fake, SRC, config)[0]
    else:
        hyps = [greedy_search(fake, SRC, config)[0]]
    assert hyps[0].tokens == [A, A]  # "<eos>" and "a <eos>" are ruled out
    assert all(len(h.tokens) >= 2 for h in hyps)
    assert hyps[0].log_prob == pytest.approx(math.log(0.48 * 0.98 * 0.99))


@pytest.mark.parametrize("beam", [1, 2])
def test_max_len_forces_eos_and_done_sentences_leave_the_batch(beam):
    always_a = [0, 0, 0, 0.1, 0.9, 0]
    fake = FakeModel({}, always_a)
    src = torch.tensor([[A, EOS, PAD, PAD, PAD], [A, A, A, A, EOS]])  # |Y| <= 3 and <= 6
    # min_len 10 forbids eos everywhere, but at max_len eos is forced: max_len wins
    config = DecodeConfig(beam=beam, nbest=1, alpha=0.0, min_len=10, max_len_offset=1)
    first, second = beam_search(fake, src, config)
    assert first[0].tokens == [A, A] and second[0].tokens == [A] * 5
    assert first[0].log_prob == pytest.approx(2 * math.log(0.9) + math.log(0.1))
    # beam rows per step: 1 per sentence at first, then `beam`; sentence 1 leaves after step 3
    assert fake.rows == [2, 2 * beam, 2 * beam, beam, beam, beam]


def test_an_ending_hypothesis_leaves_the_beam_full():
    """tensor2tensor's rule: of the 2 * beam best extensions, those ending in eos finish and
    the beam best others stay live. With beam 1, "<eos>" (log .52) finishes at step 1 and
    "a" stays live, to give "a a <eos>", which scores better under alpha 0.6 (see the test
    above); keeping only the best extension, eos included, ended the search at step 1 with
    "<eos>", as greedy search does."""
    fake = FakeModel(TABLE, DEFAULT)
    hyps = beam_search(fake, SRC, DecodeConfig(beam=1, alpha=0.6, max_len_offset=5, min_len=0))[0]
    expected = math.log(0.48 * 0.98 * 0.99) / length_penalty(3, 0.6)
    assert hyps[0].tokens == [A, A] and hyps[0].score == pytest.approx(expected)
    assert fake.rows == [1, 1, 1]
    greedy = greedy_search(FakeModel(TABLE, DEFAULT), SRC, DecodeConfig(alpha=0.6, min_len=0))
    assert greedy[0].tokens == []
    # one step: eos is the best extension of both rows, yet `beam` hypotheses stay live
    logp = torch.tensor([[[-9, -9, -9, -0.5, -0.6, -3.0], [-9, -9, -9, -0.55, -0.7, -4.0]]])
    strategy = BeamStrategy(torch.full((1,), 9), 2, 2, 0.6, 0, EOS, PAD)
    strategy.scores, strategy.tokens = torch.zeros(1, 2), torch.zeros(1, 2, 1, dtype=torch.long)
    strategy.length = 1
    rows, tokens, done = strategy.step(logp)
    assert rows.tolist() == [0, 1] and tokens.tolist() == [A, A] and not done.item()
    torch.testing.assert_close(strategy.scores, torch.tensor([[-0.6, -0.7]]))
    torch.testing.assert_close(strategy.fin_logp, torch.tensor([[-0.5, -0.55]]))


@pytest.mark.parametrize("search", [beam_search, greedy_search])
def test_by_default_no_translation_is_empty(search):
    # "<eos>" is the most probable single sentence here; min_len 1 (the default, fairseq's)
    # forbids it, as a non-empty source deserves a translation. With tensor2tensor's rule a
    # weakly trained model otherwise finished 4 of 1,000 Multi30k test sentences empty.
    assert DecodeConfig().min_len == 1
    hyps = search(FakeModel(TABLE, DEFAULT), SRC, DecodeConfig(alpha=0.6))[0]
    tokens = hyps[0].tokens if search is beam_search else hyps.tokens
    assert tokens == [A, A]


@pytest.mark.parametrize("search", [beam_search, greedy_search])
def test_a_batch_of_no_sentences_gives_no_results(search):
    model = Transformer(tiny_model_config()).eval()
    assert search(model, torch.zeros(0, 5, dtype=torch.long)) == []
