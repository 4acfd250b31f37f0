"""`aiayn.analysis.heads`: the statistics say what hand-set heads do (one looking a word back
reports the previous word, one looking at itself its own), masking a head is zeroing its
columns of W^O, and the masked copies searched side by side in one batch give what each
gives alone."""

import json
import math

import pytest
import torch

from aiayn.analysis.heads import (
    Head, HeadMasks, analyse_heads, attention_statistics, is_punctuation, masked_translations,
    sentence_sums, word_numbers,
)  # fmt: skip
from aiayn.analysis.heads_output import behaviour, run_heads
from aiayn.cli import main
from aiayn.config import ModelConfig
from aiayn.model.transformer import Transformer
from aiayn.translate import Translator
from tiny_checkpoint import save_tiny_checkpoint
from tiny_run import one_thread  # noqa: F401 (autouse fixture)


class Pieces:
    """A vocabulary stand-in: id i is piece `pieces[i]`; one word a piece."""

    bos_id = 2

    def __init__(self, n: int) -> None:
        self.pieces = ["<pad>", "<unk>", "<s>", "</s>", *(f"\u2581w{i}" for i in range(n))]

    def piece(self, i: int) -> str:
        return self.pieces[i]


def test_words_start_at_a_space_mark_and_punctuation_and_control_tokens_stand_alone():
    pieces = ["<s>", "\u2581A", "\u2581man", ",", "\u2581pick", "s", ".", "</s>"]
    assert word_numbers(pieces) == [0, 1, 2, 3, 4, 4, 5, 6]
    assert [is_punctuation(p) for p in ("\u2581.", ",", "<0x2E>", "\u2581a", "s", "\u2581")] == [
        True, True, True, False, False, False]  # fmt: skip


def one_hot(rows: list[int], k_len: int) -> torch.Tensor:
    """(1, 1, q_len, k_len) weights: query i all on key rows[i]."""
    w = torch.zeros(1, 1, len(rows), k_len)
    w[0, 0, torch.arange(len(rows)), torch.tensor(rows)] = 1.0
    return w


def test_hand_set_weights_give_their_statistics():
    keys = ["\u2581a", "\u2581b", ",", "\u2581c", "</s>"]  # five words
    back = sentence_sums(one_hot([0, 0, 1, 2, 3], 5), keys, keys, diagonal=False)
    assert back["previous"].item() == 4 and back["same"].item() == 1  # the first has none before
    assert back["distance"].item() == 4 and back["entropy"].item() == 0
    assert back["punctuation"].item() == 1  # the query "\u2581c" looks at ","
    eos = sentence_sums(one_hot([4] * 5, 5), keys, keys, diagonal=False)
    assert eos["eos"].item() == 5 and eos["distance"].item() == 4 + 3 + 2 + 1 + 0
    uniform = sentence_sums(torch.full((1, 1, 5, 5), 0.2), keys, keys, diagonal=False)
    assert uniform["entropy"].item() == pytest.approx(5 * math.log(5))


def test_encoder_decoder_attention_is_measured_from_the_diagonal():
    source = ["\u2581a", "\u2581b", "\u2581c", "\u2581d", "</s>"]  # 5 words
    target = ["<s>", "\u2581x", "\u2581y", "\u2581z", "\u2581w"]  # 5 words: the diagonal
    diag = sentence_sums(one_hot([0, 1, 2, 3, 4], 5), target, source, diagonal=True)
    assert diag["same"].item() == 5 and diag["distance"].item() == 0
    shorter = ["<s>", "\u2581x"]  # 2 target words over 5 source words: places 0 and 2.5
    ahead = sentence_sums(one_hot([1, 3], 5), shorter, source, diagonal=True)
    assert ahead["next"].item() == 1 and ahead["previous"].item() == 0  # 3 - 2.5 rounds to 0
    assert ahead["distance"].item() == pytest.approx(1.0 + 0.5)


def positional_head_model(offset: int) -> Transformer:
    """A tiny model whose first layers' head 1 (encoder and decoder self-attention) looks
    `offset` positions back (0: at itself): embeddings are zero, so the first layer reads
    the sinusoids alone, and the head's queries are the sinusoids of `offset` positions
    earlier (a rotation of PE(i), sec. 3.5), its keys the sinusoids, scaled so that the
    softmax is all but one-hot."""
    config = ModelConfig(vocab_size=12, d_model=16, n_heads=4, d_ff=32, n_layers=2, p_drop=0.0)
    model = Transformer(config).eval()
    d_k = config.key_dim
    with torch.no_grad():
        model.tgt_embed.weight.zero_()
        for attention in (model.encoder[0].self_attn, model.decoder[0].self_attn):
            w = attention.w_qkv.weight  # (heads * (2 d_k + d_v), d_model): Q, K, V stacked
            keys = config.n_heads * d_k  # the first key row
            w[:d_k].zero_()
            w[keys : keys + d_k].zero_()
            for pair in range(d_k // 2):  # dims (2m, 2m+1) = (sin, cos) of pos * omega_m
                omega = 10000.0 ** (-2 * pair / config.d_model)
                c, s = math.cos(omega * offset), math.sin(omega * offset)
                rows = slice(2 * pair, 2 * pair + 2)
                w[rows, rows] = 60.0 * torch.tensor([[c, -s], [s, c]])  # PE(i) -> PE(i - offset)
                w[keys + 2 * pair : keys + 2 * pair + 2, rows] = torch.eye(2)
    return model


@pytest.mark.parametrize("offset, share", [(1, "previous"), (0, "same")])
def test_a_head_set_to_look_back_is_reported_so(offset, share):
    model, vocab = positional_head_model(offset), Pieces(8)
    pairs = [([4, 5, 6, 7, 8, 9, 3], [4, 5, 6, 7, 8]), ([6, 7, 3], [9, 10, 11])]
    stats = attention_statistics(model, vocab, vocab, pairs)
    for kind in ("encoder", "decoder"):
        head = stats[Head(kind, 0, 0)]
        # 10 queries of each kind (sources of 7 and 3, targets of 5 and 3 after <s>); the
        # first of each sentence has nothing before it and looks at itself
        expected = 8 / 10 if offset else 1.0
        assert head[share] == pytest.approx(expected, abs=1e-3), (kind, head)
        assert head["distance"] == pytest.approx(expected if offset else 0.0, abs=1e-3)
        assert head["entropy"] < 0.01
        assert behaviour(head) == ("prev" if offset else "same")
    other = stats[Head("encoder", 1, 2)]  # untouched: spread out
    assert other[share] < 0.9 and other["entropy"] > 0.1


def test_masking_a_head_is_zeroing_its_columns_of_w_o():
    model = positional_head_model(1)
    src, tgt = torch.tensor([[4, 5, 6, 3]]), torch.tensor([[2, 7, 8]])

    def hidden(m: Transformer) -> torch.Tensor:  # the logits are 0: the embeddings are
        return m.decode(tgt, m.encode(src), m.pad_mask(src))  # (1, tgt_len, d_model)

    for head in (Head("encoder", 1, 2), Head("decoder", 0, 1), Head("cross", 1, 3)):
        masks = HeadMasks(model, [head])
        masks.set_rows(torch.zeros(1, dtype=torch.long))
        with torch.no_grad(), masks.applied():
            masked = hidden(model)
        plain = hidden(model)
        zeroed = positional_head_model(1)
        zeroed.load_state_dict(model.state_dict())
        module = {"encoder": zeroed.encoder[head.layer].self_attn,
                  "decoder": zeroed.decoder[head.layer].self_attn,
                  "cross": zeroed.decoder[head.layer].cross_attn}[head.kind]  # fmt: skip
        with torch.no_grad():
            module.w_o.weight[:, head.head * module.d_v : (head.head + 1) * module.d_v] = 0.0
            expected = hidden(zeroed)
        assert torch.allclose(masked, expected, atol=1e-5)
        assert not torch.allclose(masked, plain, atol=1e-3)
    assert torch.equal(hidden(model), plain)  # the hooks are gone


@pytest.mark.parametrize("beam, reference", [(4, False), (4, True), (1, False)])
def test_copies_searched_side_by_side_give_what_each_gives_alone(tmp_path, beam, reference):
    ckpt = save_tiny_checkpoint(tmp_path / "ckpt", max_len_offset=6)
    translator = Translator.from_checkpoint(ckpt, beam=beam, reference=reference)
    sources = ["the cat sat on a mat", "der Hund", "a mat", "die Katze sitzt auf einer Matte"]
    ids = translator.encode(sources)  # lengths differ: sentences leave the batch apart
    variants = [None, Head("encoder", 0, 1), Head("decoder", 1, 0), Head("cross", 0, 3)]
    together = masked_translations(translator, ids, variants)
    alone = [masked_translations(translator, ids, [v])[0] for v in variants]
    assert together == alone
    assert together[0] == [h[0].tokens for h in translator.hypotheses(sources)]
    assert any(together[g] != together[0] for g in range(1, len(variants)))


def test_analysis_of_every_head_with_its_importance(tmp_path):
    ckpt = save_tiny_checkpoint(tmp_path / "ckpt")
    translator = Translator.from_checkpoint(ckpt)
    sources = ["the cat sat on a mat", "der Hund"]
    report = analyse_heads(translator, sources, ["the cat sat", "der Hund"], group=9)
    rows = report.to_json()["rows"]
    assert len(rows) == 3 * 2 * 4  # kinds x layers x heads of the tiny model
    assert all(r["importance"] is not None for r in rows)
    masked = masked_translations(translator, translator.encode(sources), [Head("cross", 1, 2)])
    assert report.translations == translator.translate(sources)
    one = next(r for r in rows if (r["kind"], r["layer"], r["head"]) == ("cross", 2, 3))
    from sacrebleu.metrics import BLEU

    texts = [translator.tgt_vocab.decode(t) for t in masked[0]]
    lost = report.bleu - BLEU().corpus_score(texts, [["the cat sat", "der Hund"]]).score
    assert one["importance"] == pytest.approx(lost, abs=0.01)
    assert analyse_heads(translator, sources).importance is None  # no references: no BLEU


def test_aiayn_heads_prints_and_writes_json_and_png(tmp_path, capsys):
    ckpt = save_tiny_checkpoint(tmp_path / "ckpt")
    (tmp_path / "src.txt").write_text("the cat sat\nder Hund\n", encoding="utf-8")
    (tmp_path / "ref.txt").write_text("the cat\nder Hund\n", encoding="utf-8")
    args = ["heads", "--checkpoint", str(ckpt), "--src", str(tmp_path / "src.txt"),
            "--ref", str(tmp_path / "ref.txt"), "--json", str(tmp_path / "h.json"),
            "--png", str(tmp_path / "h.png")]  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:3] == ["kind", "layer", "head"]
    assert "unmasked sacreBLEU" in out and len(out.splitlines()) == 1 + 24 + 1
    data = json.loads((tmp_path / "h.json").read_text())
    assert data["sentences"] == 2 and len(data["rows"]) == 24
    assert (tmp_path / "h.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (tmp_path / "short.txt").write_text("the cat\n", encoding="utf-8")
    bad = ["heads", "--checkpoint", str(ckpt), "--src", str(tmp_path / "src.txt"), "--ref",
           str(tmp_path / "short.txt")]  # fmt: skip
    assert main(bad) == 2
    assert "has 2 lines" in capsys.readouterr().err


def test_run_heads_without_references_colours_by_distance(tmp_path):
    ckpt = save_tiny_checkpoint(tmp_path / "ckpt")
    (tmp_path / "src.txt").write_text("the cat sat\n", encoding="utf-8")
    report = run_heads(Translator.from_checkpoint(ckpt), tmp_path / "src.txt",
                       png_out=tmp_path / "g.png")  # fmt: skip
    assert report.importance is None and (tmp_path / "g.png").stat().st_size > 0
