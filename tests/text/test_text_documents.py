"""`aiayn translate --split sentences` and `--alignment` (`aiayn.text.documents`)."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from aiayn.alignment import format_alignment, word_alignment
from aiayn.cli import main
from aiayn.errors import ConfigError
from aiayn.text.sentences import split_document
from aiayn.text.documents import aligned_translations, text_alignment, translate_lines, translate_text
from aiayn.text.html_document import parse_html
from aiayn.translate import Translator, one_line
from tiny_checkpoint import save_tiny_checkpoint
from tiny_run import one_thread  # noqa: F401 (autouse fixture)

# Three paragraphs of nine sentences, one paragraph a line, blank lines between.
TEXT = ("The cat sat on a mat. Der Hund sitzt!  A mat.\n\n"
        "Die Katze sitzt auf einer Matte. The cat? Der Hund sitzt auf einer Matte.\n\n\n"
        "A cat sat. Eine Matte. The mat sat on a cat.\n")


@pytest.fixture(scope="module")
def translator(tmp_path_factory):
    return Translator.from_checkpoint(save_tiny_checkpoint(tmp_path_factory.mktemp("stream") / "ckpt"))


def run(translator, text: str, **options) -> str:
    out = io.StringIO()
    translate_lines(translator, io.StringIO(text), out, 2, **options)
    return out.getvalue()


def test_each_sentence_is_translated_as_alone_and_paragraphs_come_back(translator):
    out = run(translator, TEXT, split="sentences")
    expected = []
    for line in TEXT.splitlines():
        doc = split_document(line, "en")
        expected.append(doc.join([translator.translate([s])[0] for s in doc.sentences]))
    assert sum(len(split_document(line, "en").sentences) for line in TEXT.splitlines()) == 9
    assert out.splitlines() == expected
    assert out.count("\n") == TEXT.count("\n") and out.split("\n")[1] == ""
    assert "  " in out.splitlines()[0]  # the two spaces before the third sentence stay


def test_lines_stay_one_segment_by_default(translator):
    assert run(translator, TEXT) == run(translator, TEXT, split="lines")
    assert run(translator, TEXT).splitlines() == [one_line(t) for t in translator.translate(TEXT.splitlines())]


def test_alignment_field_is_the_word_alignment_of_each_line(translator):
    lines = ["the cat sat on a mat", "", "der Hund"]
    out = run(translator, "\n".join(lines) + "\n", alignment=True).splitlines()
    hyps = translator.hypotheses(lines)
    src_vocab = translator.src_vocab
    for line, row, found in zip(lines, out, hyps):
        text, links = row.split(" ||| ")
        if not line:
            assert (text, links) == ("", "")
            continue
        ids = src_vocab.encode(line) + [src_vocab.eos_id]
        expected = word_alignment(translator.model, src_vocab, translator.tgt_vocab, ids, found[0].tokens)
        assert text == one_line(translator.tgt_vocab.decode(found[0].tokens))
        assert links == format_alignment(expected)


def test_sentence_alignments_count_words_across_the_line(translator):
    line = "The cat sat on a mat. Der Hund sitzt!"
    row = run(translator, line + "\n", split="sentences", alignment=True).rstrip("\n")
    text, links = row.split(" ||| ")
    doc = split_document(line, "en")
    parts, offset_src, offset_tgt, expected = [], 0, 0, []
    for sentence in doc.sentences:
        ids = translator.src_vocab.encode(sentence) + [translator.src_vocab.eos_id]
        tokens = translator.hypotheses([sentence])[0][0].tokens
        translation = translator.tgt_vocab.decode(tokens)
        pairs = word_alignment(translator.model, translator.src_vocab, translator.tgt_vocab, ids, tokens)
        expected += [(i + offset_src, j + offset_tgt) for i, j in pairs]
        offset_src, offset_tgt = offset_src + len(sentence.split()), offset_tgt + len(translation.split())
        parts.append(translation)
    assert text == doc.join(parts) and links == format_alignment(expected)
    assert all(i < len(line.split()) and j < len(text.split()) for i, j in expected)


def test_nbest_lists_with_alignments_and_what_is_refused(translator, tmp_path, capsys):
    nbest = Translator.from_checkpoint(save_tiny_checkpoint(tmp_path / "c"), nbest=2)
    rows = run(nbest, "the cat\n\n", alignment=True, nbest=True).splitlines()
    assert [r.split(" ||| ")[0] for r in rows] == ["0", "0", "1", "1"]
    assert all(len(r.split(" ||| ")) == 4 for r in rows)
    with pytest.raises(ConfigError, match="--nbest"):
        run(nbest, "a\n", split="sentences", nbest=True)
    with pytest.raises(ConfigError, match="--split must be one of"):
        run(nbest, "a\n", split="words")


def test_cli_flags(tmp_path, capsys, monkeypatch):
    ckpt = save_tiny_checkpoint(tmp_path / "ckpt")
    monkeypatch.setattr("sys.stdin", io.StringIO(TEXT))
    assert main(["translate", "--checkpoint", str(ckpt), "--split", "sentences", "--alignment"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert len(rows) == len(TEXT.splitlines()) and all(" ||| " in r for r in rows)


def test_translate_text_puts_each_sentences_own_translation_in_place(translator):
    text = "The cat sat on a mat. Der Hund sitzt!\r\n\r\n\r\nA mat.  "
    doc = split_document(text, "en")
    assert translate_text(translator, text) == doc.join([translator.translate([s])[0] for s in doc.sentences])


def test_translate_text_of_a_page_places_tags_by_the_word_alignment(translator):
    page = "<p>The <b>cat</b> sat. <i>Der Hund</i> sitzt.</p><pre>a mat</pre>"
    doc = parse_html(page, "en")
    hyps = [translator.hypotheses([s])[0][:1] for s in doc.sentences]
    found = [f[0] for f in aligned_translations(translator, doc.sentences, hyps)]
    assert translate_text(translator, page, html=True) == doc.join([t for t, _ in found], [a for _, a in found])


def test_the_translate_pages_python_runs(tmp_path, capsys):
    """docs/translate.md's Python, with a tiny checkpoint for runs/mine/avg5."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "translate.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", page, re.S).group(1)
    ckpt = save_tiny_checkpoint(tmp_path / "ckpt")
    exec(compile(code.replace("runs/mine/avg5", str(ckpt)), "docs/translate.md", "exec"), {})
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 4 and out[1] == ""  # the paragraph break, then the page
    assert out[3].startswith("<p>") and out[3].endswith("</p>") and "<b>" in out[3]


def test_a_texts_alignment_shifts_each_sentences_links_by_the_words_before_it():
    sentences = ["The cat sleeps .", "A dog barks ."]
    translations = ["Die Katze schläft .", "Ein Hund bellt laut ."]
    links = text_alignment(sentences, translations, [[(0, 0), (3, 3)], [(0, 0), (2, 3)]])
    assert links == [(0, 0), (3, 3), (4, 4), (6, 7)]
