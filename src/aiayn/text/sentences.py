"""Paragraphs in, sentences out, translations back in place.

    doc = split_document("The children open the door. A dog sleeps.\n\nThe man reads.", "en")
    doc.sentences                  # ["The children open the door.", "A dog sleeps.", "The man reads."]
    doc.join(translator.translate(doc.sentences))   # "Die Kinder ... auf. Ein Hund schläft.\n\n..."

A model trained on single sentences (every corpus of the paper, sec. 5.1) translates one
sentence per input and stops: a paragraph given whole loses all but its first sentence.
So text is cut into sentences, translated as one batch, and put back: everything between
two sentences (the spaces, line breaks, any run of blank lines, `\r\n`) is kept as it was.
The split is two-phase on purpose, so that a server can send `sentences` through its own
batching queue and `join` when they come back.

The segmenter is sentencex (Wikimedia's, MIT): maintained, written in Rust, about 300
languages through fallback chains (an unknown code gets English rules), each with its
abbreviations ("Dr.", "p.m.", "z.B.", "u.a."), and it reports each sentence's character
offsets, which is what putting translations back needs. pysbd, the other candidate, splits
the English and German cases we tried ("Dr. Smith ... at 5 p.m. on Jan. 3.", "3.5%",
"z.B.") the same way and French "M. Dupont" better, but covers 23 languages, is pure Python
(slower by far on long texts) and has had no release since 2021.
Paragraphs are cut here first (a blank line always ends a sentence); within a paragraph
sentencex decides, so a single line break ends a sentence only where it thinks so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import sentencex

# A paragraph break: a line break, then at least one blank (or whitespace-only) line.
_PARAGRAPH_BREAK = re.compile(r"\r?\n(?:[ \t\f\v]*\r?\n)+")


@dataclass(frozen=True)
class Document:
    """A text cut into sentences: `gaps[k]` is the text before `sentences[k]` (the last gap
    follows the last sentence), kept verbatim; `spans[k]` is where sentence k was."""

    sentences: list[str]  # each with its inner whitespace runs made one space
    gaps: list[str]  # len(sentences) + 1 pieces of whitespace
    spans: list[tuple[int, int]]  # [start, end) of each sentence in the text

    def join(self, translations: list[str]) -> str:
        """The text with sentence k replaced by `translations[k]`."""
        if len(translations) != len(self.sentences):
            raise ValueError(
                f"{len(translations)} translations for {len(self.sentences)} sentences"
            )
        parts = [self.gaps[0]]
        for translation, gap in zip(translations, self.gaps[1:]):
            parts += [translation, gap]
        return "".join(parts)


def sentence_spans(text: str, lang: str) -> list[tuple[int, int]]:
    """[start, end) of each sentence of `text`, without surrounding whitespace, in order."""
    spans = []
    start = 0
    for cut in [*_PARAGRAPH_BREAK.finditer(text), None]:
        end = cut.start() if cut else len(text)
        if text[start:end].strip():
            spans += _paragraph_spans(text, start, end, lang)
        start = cut.end() if cut else end
    return spans


def _paragraph_spans(text: str, start: int, end: int, lang: str) -> list[tuple[int, int]]:
    spans = []
    for segment in sentencex.get_sentence_boundaries(lang, text[start:end]):
        a, b = start + segment["start_index"], start + segment["end_index"]
        while a < b and text[a].isspace():
            a += 1
        while b > a and text[b - 1].isspace():
            b -= 1
        if a < b:
            spans.append((a, b))
    return spans


def split_document(text: str, lang: str) -> Document:
    """Cut `text` into sentences with `lang`'s rules (an ISO 639 code: "en", "de", ...).

    Blank text gives no sentence. `join` of the sentences themselves gives `text` back,
    but for whitespace inside a sentence (a line break inside one becomes a space: a
    translation is one line).
    """
    spans = sentence_spans(text, lang)
    ends = [0] + [b for _, b in spans]
    starts = [a for a, _ in spans] + [len(text)]
    gaps = [text[e:s] for e, s in zip(ends, starts)]
    sentences = [" ".join(text[a:b].split()) for a, b in spans]
    return Document(sentences, gaps, spans)
