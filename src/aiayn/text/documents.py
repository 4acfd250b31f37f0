"""Documents through a `Translator`: a text or an HTML page in one call (`translate_text`),
and the lines of `aiayn translate`, also with `--split sentences` or `--alignment`
(`translate_files`, `translate_lines`).

    translate_text(translator, "The man reads. A dog sleeps.\n\nThe end.")
    translate_text(translator, "<p>The <b>old</b> man reads.</p>", html=True)

With `split="sentences"` each input line is cut into sentences (`text.sentences`), all
sentences of a chunk of lines are translated as one batch, and each line is put back
together with the spacing it had; a line is a paragraph, and lines map one to one, as
without the option (a sentence broken across two lines is translated as two pieces: join
such lines first). The default, `split="lines"`, translates each line as one segment, so
that test sets score as they are.

`alignment=True` appends ` ||| ` and the line's word alignment, Moses / fast_align's
"i-j" pairs (`aiayn.alignment`), to each output line, as Marian's `--alignment` and
OpenNMT-py's `report_align` print them; the words are the input and output lines split
at whitespace, over all sentences of a line. With n-best lists the alignment is a fourth
field: `index ||| translation ||| score ||| alignment`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import TextIO

from aiayn.alignment import format_alignment, word_alignments
from aiayn.decode.strategy import Hypothesis
from aiayn.data.corpus import decode_utf8
from aiayn.errors import ConfigError, DataError
from aiayn.outfile import AtomicOutput, refuse_output_among_inputs
from aiayn.text.html_document import parse_html
from aiayn.text.sentences import split_document
from aiayn.translate import Translator, one_line, translate_stream

SPLITS = ("lines", "sentences")


def translate_lines(
    translator: Translator, lines: Iterable[str], out: TextIO, chunk_lines: int = 256, *,
    split: str = "lines", alignment: bool = False, nbest: bool = False, lang: str = "en",
) -> int:  # fmt: skip
    """Translate `lines` to `out` chunk by chunk (flushed each); -> lines read. `lang`: the
    input's language, for the sentence rules."""
    if split not in SPLITS:
        raise ConfigError(f"--split must be one of {', '.join(SPLITS)}, got {split!r}")
    if split == "sentences" and nbest:
        raise ConfigError("--nbest lists translations of one segment: use it with --split lines")
    if split == "lines" and not alignment:
        return translate_stream(translator, lines, out, chunk_lines, nbest=nbest)
    count = 0
    for chunk in _chunks(lines, chunk_lines):
        if split == "sentences":
            rows = _sentences_chunk(translator, chunk, lang, alignment)
        else:
            rows = _lines_chunk(translator, chunk, count, nbest)
        out.writelines(row + "\n" for row in rows)
        out.flush()
        count += len(chunk)
    return count


def translate_files(
    translator: Translator, input: str | None, output: str | None,
    chunk_lines: int | None = None, **options,
) -> int:  # fmt: skip
    """`aiayn translate`: lines of `input` (None: stdin) translated into `output` (None:
    stdout; a file is replaced only once every line is done, `outfile.AtomicOutput`), in
    chunks of `chunk_lines` (None: 256, or 1 when stdin is a terminal), with
    `translate_lines`' `options`; -> lines read.

    The input is read as bytes and decoded line by line, so that invalid UTF-8 is named by
    its line (and under a C or POSIX locale never reaches the model as surrogates, as
    Python's stdin would pass it). A stdin that is already text (a notebook's) is read as is."""
    if chunk_lines is not None and chunk_lines < 1:
        raise ConfigError(f"--chunk-lines must be at least 1, got {chunk_lines}")
    refuse_output_among_inputs(output, input)
    stdin = getattr(sys.stdin, "buffer", sys.stdin)
    try:
        source = open(input, "rb") if input else stdin
    except OSError as err:
        raise DataError(f"{input}: cannot read ({err.strerror})") from None
    lines = (
        raw if isinstance(raw, str) else decode_utf8(raw, input or "stdin", n)
        for n, raw in enumerate(source, start=1)
    )  # fmt: skip
    chunk = chunk_lines or (1 if source.isatty() else 256)
    try:
        with AtomicOutput(output) as out:
            return translate_lines(translator, lines, out.handle, chunk, **options)
    finally:
        if source is not stdin:
            source.close()


def _chunks(lines: Iterable[str], size: int) -> Iterator[list[str]]:
    """Lines without their line ends (and without a leading byte-order mark), `size` at a
    time, as `translate_stream` reads them."""
    chunk: list[str] = []
    for i, line in enumerate(lines):
        line = line.rstrip("\r\n")
        chunk.append(line.removeprefix("\ufeff") if i == 0 else line)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def aligned_translations(
    translator: Translator, texts: list[str], hyps: list[list[Hypothesis]]
) -> list[list[tuple[str, list[tuple[int, int]]]]]:
    """Each text's hypotheses as (translation, word alignment) pairs."""
    sources = translator.encode(texts)  # as the Translator read them
    pairs = [(source, h.tokens) for source, hs in zip(sources, hyps) for h in hs]
    model, src_vocab, tgt_vocab = translator.model, translator.src_vocab, translator.tgt_vocab
    links = iter(word_alignments(model, src_vocab, tgt_vocab, pairs))
    return [[(tgt_vocab.decode(h.tokens), next(links)) for h in hs] for hs in hyps]


def translate_text(translator: Translator, text: str, lang: str = "en", html: bool = False) -> str:
    """`text` (a whole document, HTML with `html`) with each sentence translated, the best
    translation each, paragraphs, spacing and (HTML) the page's markup kept."""
    doc = parse_html(text, lang) if html else split_document(text, lang)
    hyps = [h[:1] for h in translator.hypotheses(doc.sentences)]
    if not html:
        return doc.join([one_line(translator.tgt_vocab.decode(h[0].tokens if h else [])) for h in hyps])
    found = [f[0] if f else ("", []) for f in aligned_translations(translator, doc.sentences, hyps)]
    return doc.join([one_line(t) for t, _ in found], [links for _, links in found])


def _lines_chunk(translator: Translator, chunk: list[str], first: int, nbest: bool) -> list[str]:
    hyps = translator.hypotheses(chunk)
    hyps = hyps if nbest else [h[:1] for h in hyps]
    rows = []
    for i, (found, line_hyps) in enumerate(zip(aligned_translations(translator, chunk, hyps), hyps)):
        if not nbest:
            text, links = found[0] if found else ("", [])
            rows.append(f"{one_line(text)} ||| {format_alignment(links)}")
            continue
        k = translator.decode.nbest
        scored = [(t, h.score, a) for (t, a), h in zip(found, line_hyps)] or [("", 0.0, [])]
        for text, score, links in (scored + scored[-1:] * k)[:k]:
            rows.append(f"{first + i} ||| {one_line(text)} ||| {score:.4f} ||| {format_alignment(links)}")
    return rows


def _sentences_chunk(
    translator: Translator, chunk: list[str], lang: str, alignment: bool
) -> list[str]:
    docs = [split_document(line, lang) for line in chunk]
    sentences = [s for doc in docs for s in doc.sentences]
    hyps = translator.hypotheses(sentences)
    if alignment:
        found = aligned_translations(translator, sentences, [h[:1] for h in hyps])
    else:
        found = [[(translator.tgt_vocab.decode(h[0].tokens), [])] if h else [] for h in hyps]
    best = iter(f[0] if f else ("", []) for f in found)
    rows = []
    for doc in docs:
        mine = [next(best) for _ in doc.sentences]  # (translation, links) per sentence
        texts = [one_line(text) for text, _ in mine]
        line = doc.join(texts)
        links = text_alignment(doc.sentences, texts, [pairs for _, pairs in mine])
        rows.append(f"{line} ||| {format_alignment(links)}" if alignment else line)
    return rows


def text_alignment(
    sentences: Sequence[str], translations: Sequence[str],
    alignments: Iterable[Sequence[tuple[int, int]]],
) -> list[tuple[int, int]]:  # fmt: skip
    """A text's word alignment from its sentences': each sentence's (source word, target
    word) links shifted by the words of the sentences before it. The text's words are its
    sentences' words in order: what lies between two sentences is whitespace."""
    links, n_src, n_tgt = [], 0, 0
    for source, target, pairs in zip(sentences, translations, alignments):
        links += [(i + n_src, j + n_tgt) for i, j in pairs]
        n_src, n_tgt = n_src + len(source.split()), n_tgt + len(target.split())
    return links
