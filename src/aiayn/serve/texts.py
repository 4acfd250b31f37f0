"""A request's texts as the sentences the model translates, and back again (`aiayn.text`).

A model trained on single sentences translates one sentence per input (sec. 5.1's corpora
are sentence pairs), so by default each text is cut into sentences
(`text.sentences.split_document`), every sentence of a request goes through the queue in
one job, and each text is put back together with its own spacing and paragraphs. An HTML
text is cut at its tags and sentences (`text.html_document.parse_html`) and its inline
tags are put back around the words aligned to those they covered. `split=False` keeps
each plain text one segment (a blank one translates to "").

A text's k-th hypothesis joins its sentences' k-th (a sentence with fewer repeats its
last), with the sum of their scores; its alignment, plain text only, links the words of
the whole text to those of the whole translation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aiayn.serve.runner import Result
from aiayn.text.documents import text_alignment
from aiayn.text.html_document import HtmlDocument, parse_html
from aiayn.text.sentences import Document, split_document


@dataclass(frozen=True)
class Whole:
    """A text kept as one segment (`split=False`)."""

    text: str

    @property
    def sentences(self) -> list[str]:
        return [self.text] if self.text.strip() else []

    def join(self, translations: list[str]) -> str:
        return translations[0] if translations else ""


@dataclass
class TextResult:
    """One text translated: the whole, its n best, and each sentence's own result."""

    text: str
    score: float  # the sum of its sentences' scores (0 for a text without any)
    nbest: list[tuple[str, float]]
    sentences: list[str]  # the source sentences, as the model read them
    results: list[Result]  # one per sentence
    alignment: list[tuple[int, int]] | None  # over the whole text; asked for, and not HTML
    models: list[str] = field(default_factory=list)  # the models that translated it, in order


def segment(texts: list[str], lang: str, split: bool = True, html: bool = False) -> list:
    """Each text as a Document (HtmlDocument with `html`, Whole without `split`)."""
    if html:
        return [parse_html(text, lang) for text in texts]
    return [split_document(text, lang) if split else Whole(text) for text in texts]


def _join(doc: Document | HtmlDocument | Whole, translations: list[str], links: list | None) -> str:
    if isinstance(doc, HtmlDocument):
        return doc.join(translations, links)
    return doc.join(translations)


def _alignment(sentences: list[str], results: list[Result]) -> list[tuple[int, int]]:
    """The sentences' links shifted by the words before them: the text's words are its
    sentences' words in order (what lies between sentences is whitespace)."""
    links, n_src, n_tgt = [], 0, 0
    for sentence, result in zip(sentences, results):
        links += [(i + n_src, j + n_tgt) for i, j in result.alignment or []]
        n_src, n_tgt = n_src + len(sentence.split()), n_tgt + len(result.nbest[0][0].split())
    return links


def join(docs: list, results: list[Result], aligned: bool) -> list[TextResult]:
    """`results` (one per sentence of `docs`, in order) put back into each text."""
    out, start = [], 0
    for doc in docs:
        mine = results[start : start + len(doc.sentences)]
        start += len(doc.sentences)
        alternatives = []
        for k in range(max((len(r.nbest) for r in mine), default=1)):
            picked = [r.nbest[min(k, len(r.nbest) - 1)] for r in mine]
            links = [r.alignment or [] for r in mine] if k == 0 and aligned else None
            text = _join(doc, [t for t, _ in picked], links)
            alternatives.append((text, float(sum(s for _, s in picked))))
        plain = aligned and not isinstance(doc, HtmlDocument)
        out.append(TextResult(
            alternatives[0][0], alternatives[0][1], alternatives, list(doc.sentences), mine,
            text_alignment(doc.sentences, [r.nbest[0][0] for r in mine],
                           [r.alignment or [] for r in mine]) if plain else None,
        ))  # fmt: skip
    return out
