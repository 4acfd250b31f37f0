"""`aiayn.alignment`: word links from the encoder-decoder attention."""

from __future__ import annotations

import pytest
import torch

from aiayn.alignment import (AlignmentConfig, alignment_error, format_alignment,
                             links_from_weights, piece_words, word_alignment, word_alignments)
from aiayn.attention_view import attention_maps
from aiayn.translate import Translator
from tiny_checkpoint import save_tiny_checkpoint, tiny_vocab


@pytest.mark.parametrize("text", ["the cat sat.", "  der  Hund ü€ x y ", "Übermatte", "a-b c"])
def test_pieces_map_to_the_words_of_the_text(text):
    vocab = tiny_vocab()
    ids = vocab.encode(text)
    surfaces = vocab.surfaces(ids)
    assert "".join(surfaces) == text
    words = piece_words(surfaces)
    assert sorted({w for w in words if w is not None}) == list(range(len(text.split())))
    spelled = {}
    for surface, w in zip(surfaces, words):
        if w is not None:
            spelled[w] = spelled.get(w, "") + surface
    assert [spelled[w].strip() for w in sorted(spelled)] == text.split()


def test_links_follow_the_largest_weight_of_each_target_word():
    # source words: w0 = piece 0, w1 = pieces 1-2, then eos; target: v0 = piece 0, v1 = pieces 1-2
    weights = torch.tensor([
        [0.1, 0.2, 0.1, 0.6],  # <s>, predicts piece 0
        [0.7, 0.1, 0.1, 0.1],  # reads piece 0, predicts piece 1
        [0.1, 0.4, 0.4, 0.1],  # reads piece 1, predicts piece 2
        [0.9, 0.0, 0.0, 0.1],  # reads piece 2, predicts eos
    ])  # (tgt_len + 1, src_len)
    src_words, tgt_words = [0, 1, 1, None], [0, 1, 1]
    # prediction rows: v0 <- row 0 (w1 0.3 > w0 0.1; eos is no word); v1 <- rows 1-2 (w0 0.4, w1 0.5)
    assert links_from_weights(weights, src_words, tgt_words, "prediction", "target") == [(1, 0), (1, 1)]
    # input rows: v0 <- row 1 (w0); v1 <- rows 2-3 (w0 0.5, w1 0.4)
    assert links_from_weights(weights, src_words, tgt_words, "input", "target") == [(0, 0), (0, 1)]
    # union: each source word's best target word too; w1's column is (0.2, 0.4) over v0, v1
    assert links_from_weights(weights, src_words, tgt_words, "input", "union") == [(0, 0), (0, 1), (1, 1)]


def test_alignment_error_as_och_and_ney_define_it():
    predicted = [{(0, 0), (1, 1), (2, 1)}, {(0, 0)}]
    gold = [{(0, 0), (1, 1), (2, 2)}, {(0, 0), (1, 0)}]
    scores = alignment_error(predicted, gold)
    assert scores["precision"] == pytest.approx(3 / 4)
    assert scores["recall"] == pytest.approx(3 / 5)
    assert scores["aer"] == pytest.approx(1 - 6 / 9)
    assert alignment_error([{(0, 1)}], [{(0, 0)}], [{(0, 0), (0, 1)}])["aer"] == pytest.approx(1 - 1 / 2)
    assert format_alignment([(0, 0), (2, 1)]) == "0-0 2-1"


def test_batched_alignments_are_each_pairs_own_from_its_attention_maps(tmp_path):
    translator = Translator.from_checkpoint(save_tiny_checkpoint(tmp_path / "ckpt"), reference=True)
    src_vocab, tgt_vocab, model = translator.src_vocab, translator.tgt_vocab, translator.model
    texts = [("the cat sat on a mat", "der Hund sitzt auf einer Matte"), ("die Katze", "the cat"),
             ("a mat on the cat sat the cat", "Matte")]
    pairs = [(src_vocab.encode(s) + [src_vocab.eos_id], tgt_vocab.encode(t)) for s, t in texts]
    config = AlignmentConfig(layer=0, heads=(1, 3), row="input")
    batched = word_alignments(model, src_vocab, tgt_vocab, pairs + [(pairs[0][0], [])], config)
    assert batched[-1] == []
    for (src, tgt), (s, t), links in zip(pairs, texts, batched):
        assert links == word_alignment(model, src_vocab, tgt_vocab, src, tgt, config)
        cross = attention_maps(model, src_vocab, tgt_vocab, src, tgt).cross[0, [1, 3]].mean(0)
        src_words = piece_words(src_vocab.surfaces(src[:-1])) + [None]
        assert links == links_from_weights(cross, src_words, piece_words(tgt_vocab.surfaces(tgt)), "input")
        assert {j for _, j in links} == set(range(len(t.split())))  # every word has a link
        assert {i for i, _ in links} == set(range(len(s.split())))
        assert all(0 <= i < len(s.split()) for i, _ in links)


def test_unknown_row_is_refused():
    with pytest.raises(ValueError, match="row must be one of"):
        AlignmentConfig(row="output")
    with pytest.raises(ValueError, match="links must be one of"):
        AlignmentConfig(links="intersection")
