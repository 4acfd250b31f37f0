"""`benchmarks/heads_doc.py` on a tiny model: docs/heads.md with the grid, the most
important heads, the longest-range encoder head and the two sentences' pictures, each
statement about a head computed from its weights."""

import sys
from pathlib import Path

import torch

from multi30k_raw import fake_multi30k
from tiny_checkpoint import save_tiny_checkpoint
from tiny_run import one_thread  # noqa: F401 (autouse fixture)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import heads_doc  # noqa: E402


def test_words_and_word_weights_join_the_pieces_of_a_word():
    pieces = ["\u2581A", "\u2581wo", "man", "\u2581walks", ".", "</s>"]
    assert heads_doc.words(pieces) == ["A", "woman", "walks", ".", "</s>"]
    weights = torch.zeros(6, 6)
    weights[3, 1], weights[3, 2] = 0.25, 0.75  # "walks" on the two pieces of "woman"
    weights[1, 0] = weights[2, 0] = 1.0  # both pieces of "woman" on "A"
    words = heads_doc.word_weights(weights, pieces)
    assert words[2, 1] == 1.0 and words[1, 0] == 1.0 and words.shape == (5, 5)


def test_the_doc_is_generated_from_a_trained_checkpoint(tmp_path):
    ckpt = save_tiny_checkpoint(tmp_path / "ckpt")
    raw = fake_multi30k(tmp_path / "raw", n_valid=3)
    out = tmp_path / "docs"
    heads_doc.main(["--checkpoint", str(ckpt), "--raw", str(raw), "--out", str(out),
                    "--no-save", "--device", "cpu"])  # fmt: skip
    text = (out / "heads.md").read_text()
    assert "## The 3 most important heads" in text and "## The longest-range encoder head" in text
    for what, sentence, word, partner in heads_doc.SENTENCES:
        assert f"> {sentence}" in text and f"*{word}* gives" in text
    pictures = [line[line.index("(") + 1 : -1] for line in text.splitlines() if line.startswith("![")]
    assert "heads/grid.png" in pictures and len(pictures) >= 3
    for picture in pictures:
        assert (out / picture).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert text.count("this head follows the link") + text.count("does not follow") >= 2
