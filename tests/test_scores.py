"""`aiayn.scores` and `aiayn score`: the log-probabilities the training loss and the search use."""

from __future__ import annotations

import json

import pytest
import torch

from aiayn.cli import main
from aiayn.decode.strategy import length_penalty
from aiayn.scores import PairScore, score_pairs, token_log_probs
from aiayn.train.loss import label_smoothed_loss
from aiayn.translate import Translator
from tiny_checkpoint import save_tiny_checkpoint
from tiny_run import one_thread  # noqa: F401 (autouse fixture)

SOURCES = ["the cat sat on a mat", "der Hund", "die Katze sitzt auf einer Matte the cat", "a"]
TARGETS = ["der Hund sitzt", "the cat sat on a mat der Hund", "", "Matte Matte"]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return save_tiny_checkpoint(tmp_path_factory.mktemp("scores") / "ckpt", max_len_offset=8, max_len=64)


def test_log_probs_are_the_training_losss_nll_pair_by_pair(ckpt):
    """One padded batch against each pair alone through `label_smoothed_loss` with eps 0."""
    translator = Translator.from_checkpoint(ckpt, reference=True)
    model, src_vocab, tgt_vocab = translator.model, translator.src_vocab, translator.tgt_vocab
    pairs = [(src_vocab.encode(s) + [src_vocab.eos_id], tgt_vocab.encode(t)) for s, t in zip(SOURCES, TARGETS)]
    found = token_log_probs(model, pairs)
    with torch.no_grad():
        for (src, tgt), log_probs in zip(pairs, found):
            logits = model(torch.tensor([src]), torch.tensor([[tgt_vocab.bos_id, *tgt]]))  # (1, len, V)
            target = torch.tensor([[*tgt, tgt_vocab.eos_id]])
            smoothed, nll = label_smoothed_loss(logits, target, eps=0.0)
            assert len(log_probs) == len(tgt) + 1
            assert sum(log_probs) == pytest.approx(-float(nll), abs=1e-5)
            assert float(smoothed) == pytest.approx(float(nll), abs=1e-6)
            for t, log_p in enumerate(log_probs):  # token by token too
                _, nll_t = label_smoothed_loss(logits[:, t], target[:, t], eps=0.0)
                assert log_p == pytest.approx(-float(nll_t), abs=1e-5)


@pytest.mark.parametrize("reference", [True, False])
def test_the_searchs_own_hypotheses_score_what_the_search_said(ckpt, reference):
    translator = Translator.from_checkpoint(ckpt, reference=reference, nbest=3, alpha=0.6)
    hyps = translator.hypotheses(SOURCES)
    texts = [(s, h) for s, hs in zip(SOURCES, hyps) for h in hs]
    src_vocab = translator.src_vocab
    pairs = [(src_vocab.encode(s) + [src_vocab.eos_id], h.tokens) for s, h in texts]
    for (_, h), log_probs in zip(texts, token_log_probs(translator.model, pairs)):
        score = PairScore(log_probs, 0.6)
        assert score.log_prob == pytest.approx(h.log_prob, abs=1e-4)
        assert score.normalized == pytest.approx(h.score, abs=1e-4)
        assert score.per_token == pytest.approx(h.log_prob / (len(h.tokens) + 1), abs=1e-4)


def test_pair_score_figures():
    score = PairScore([-1.0, -2.0, -0.5], alpha=0.6)
    assert (score.log_prob, score.per_token) == (-3.5, -3.5 / 3)
    assert score.normalized == pytest.approx(-3.5 / length_penalty(3, 0.6))
    assert score.line() == f"-3.5000\t-1.1667\t{-3.5 / length_penalty(3, 0.6):.4f}"


def test_score_command_prints_a_line_per_pair(ckpt, tmp_path, capsys):
    src, hyp = tmp_path / "src.en", tmp_path / "hyp.de"
    src.write_text("\n".join(SOURCES) + "\n", encoding="utf-8")
    hyp.write_text("\n".join(TARGETS) + "\n", encoding="utf-8")
    args = ["score", "--checkpoint", str(ckpt), "--src", str(src), "--hyp", str(hyp)]
    assert main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    expected = score_pairs(Translator.from_checkpoint(ckpt), SOURCES, TARGETS)
    assert lines == [x.line() for x in expected]
    assert main([*args, "--json", "--alpha", "1.0"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["alpha"] for r in records] == [1.0] * 4
    assert [r["tokens"] for r in records] == [len(r["token_log_probs"]) for r in records]
    assert records[0]["log_prob"] == pytest.approx(expected[0].log_prob, abs=1e-4)


def test_score_command_errors_are_one_line(ckpt, tmp_path, capsys):
    src, hyp = tmp_path / "src.en", tmp_path / "hyp.de"
    src.write_text("a\nb\n", encoding="utf-8")
    hyp.write_text("a\n", encoding="utf-8")
    args = ["score", "--checkpoint", str(ckpt), "--src", str(src), "--hyp", str(hyp)]
    assert main(args) == 2
    assert "has 2 lines but" in capsys.readouterr().err
    hyp.write_text("a\n" + "der Hund " * 40 + "\n", encoding="utf-8")
    assert main(args) == 2
    assert "line 2: " in capsys.readouterr().err
