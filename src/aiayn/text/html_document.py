"""HTML in, the same page out with its text translated: tags, attributes, comments, the
doctype and entities kept, and inline tags placed around the words they covered.

    page = parse_html('<p>The <b>old</b> man reads. A dog sleeps.</p>', "en")
    page.sentences                    # ["The old man reads.", "A dog sleeps."]
    page.join(translations, alignments)   # '<p>Der <b>alte</b> Mann liest. Ein Hund schläft.</p>'

Parsed with Python's `html.parser` (a real HTML tokenizer, in the standard library), not
lxml: a tokenizer reports every piece of the page in order, and each piece that is not
translated is copied here byte for byte (its offsets are taken from the parser's
positions), where lxml rebuilds a tree and writes it out again in its own spelling
(quotes, entities, a `<html><body>` around a fragment). Regular expressions parse nothing.

How text becomes sentences. A run of text and inline elements (`INLINE`: `<b>`, `<a>`,
`<i>`, `<span>`, ...) between two other tags (a block such as `<p>` or `<li>`, a `<br>`)
is one stretch of running text; its plain text (entities decoded, tags removed) is cut
into sentences by `aiayn.text.sentences`. A sentence that spans inline tags is translated
as one sentence, and each inline element is put back around the target words aligned to
the source words it covered (`join`'s alignments: source word i to target word j, words
being the sentence split at whitespace, as `aiayn.alignment` gives them), keeping the
order and nesting of the tags (`aiayn.text.inline_markup`).
Untranslated (`UNTOUCHED`, or any element with `translate="no"`, HTML's own attribute):
`<script>`, `<style>`, `<pre>`, `<textarea>`, ... are copied as they are; an inline one
(`<code>`, `<kbd>`, `<samp>`) stays in its sentence as one object, as images and comments
do, its text not sent to the model. Translated text is written with `&`, `<` and
`>` escaped; everything between sentences is copied verbatim, entities included.
"""

from __future__ import annotations

import html
from bisect import bisect_right
from dataclasses import dataclass
from html.parser import HTMLParser

from aiayn.text.inline_markup import Item, Slot, match_tags, render, sentence_tree
from aiayn.text.sentences import sentence_spans

# Phrasing elements that live inside a sentence (the HTML standard's "phrasing content"
# that marks up words); any other tag ends the running text.
INLINE = frozenset(
    "a abbr b bdi bdo big cite data del dfn em font i ins mark nobr q s small span strike "
    "strong sub sup time tt u var".split()
)
# Left as they are; the inline ones stay in their sentence as one object.
UNTOUCHED = frozenset("script style pre textarea code kbd samp svg math template".split())
UNTOUCHED_INLINE = frozenset({"code", "kbd", "samp"})
OBJECTS = frozenset({"img", "wbr"})  # void and inline: a point in the running text
VOID = frozenset(
    "area base br col embed hr img input link meta param source track wbr".split()
)


@dataclass
class _Token:
    kind: str  # start, end, startend, data, ref, other (comment, doctype, PI)
    raw: str  # the page's own text of the token
    name: str = ""  # tag name, lower case
    untranslated: bool = False  # a start tag with translate="no"


class _Tokenizer(HTMLParser):
    """Every token of a page with its exact source text: a token runs from its parser
    position to the next token's."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=False)  # entities come as tokens, kept verbatim
        self.found: list[tuple[tuple[int, int], str, str, bool]] = []

    def _add(self, kind: str, name: str = "", untranslated: bool = False) -> None:
        self.found.append((self.getpos(), kind, name, untranslated))

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._add("start", tag, ("translate", "no") in [(k, (v or "").lower()) for k, v in attrs])

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._add("startend", tag)

    def handle_endtag(self, tag: str) -> None:
        self._add("end", tag)

    def handle_data(self, data: str) -> None:
        self._add("data")

    def _ref(self, name: str) -> None:
        self._add("ref")

    def _other(self, data: str) -> None:
        self._add("other")

    handle_entityref = handle_charref = _ref
    handle_comment = handle_decl = handle_pi = unknown_decl = _other


def tokenize(page: str) -> list[_Token]:
    """The page's tokens; their `raw` texts concatenate to the page."""
    parser = _Tokenizer()
    parser.feed(page)
    parser.close()
    line_starts = [0] + [i + 1 for i, c in enumerate(page) if c == "\n"]
    offsets = [line_starts[line - 1] + column for (line, column), *_ in parser.found]
    ends = offsets[1:] + [len(page)]
    tokens = [
        _Token(kind, page[a:b], name, untranslated)
        for (_, kind, name, untranslated), a, b in zip(parser.found, offsets, ends)
    ]
    if offsets and offsets[0] > 0:  # nothing the parser reports precedes its first token
        tokens.insert(0, _Token("data", page[: offsets[0]]))
    return tokens


@dataclass
class HtmlDocument:
    """A page cut into sentences: `sentences` to translate, `join` to put them back."""

    sentences: list[str]
    parts: list[str | Slot]

    def join(
        self, translations: list[str], alignments: list[list[tuple[int, int]]] | None = None
    ) -> str:
        """The page with each sentence translated. `alignments[k]`: (source word, target
        word) pairs of sentence k, 0-based; None, or a sentence without any, places inline
        tags by relative position instead."""
        if len(translations) != len(self.sentences):
            raise ValueError(
                f"{len(translations)} translations for {len(self.sentences)} sentences"
            )
        if alignments is not None and len(alignments) != len(translations):
            raise ValueError(f"{len(alignments)} alignments for {len(translations)} sentences")
        out = []
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
            else:
                links = alignments[part.index] if alignments is not None else []
                out.append(render(part, translations[part.index], links))
        return "".join(out)


def parse_html(page: str, lang: str) -> HtmlDocument:
    """Cut `page` (a whole document or a fragment) into the sentences of its text, with
    `lang`'s sentence rules (an ISO 639 code)."""
    builder = _Builder(lang)
    skip: list = []  # [name, depth, raw pieces, inline] of an untouched element being copied
    for token in tokenize(page):
        if skip:
            skip[2].append(token.raw)
            if token.name == skip[0] and token.kind in ("start", "end") and skip[0] not in VOID:
                skip[1] += 1 if token.kind == "start" else -1
            if skip[1] == 0:
                builder.untouched("".join(skip[2]), skip[3])
                skip = []
        elif token.kind == "start" and (token.name in UNTOUCHED or token.untranslated):
            inline = token.name in UNTOUCHED_INLINE or token.name in INLINE
            if token.name in VOID:
                builder.untouched(token.raw, inline)
            else:
                skip = [token.name, 1, [token.raw], inline]
        else:
            builder.add(token)
    if skip:  # never closed: copied to the end
        builder.untouched("".join(skip[2]), skip[3])
    builder.flush()
    return HtmlDocument(builder.sentences, builder.parts)


class _Builder:
    """Collects running text until a tag ends it, then cuts it into sentences."""

    def __init__(self, lang: str) -> None:
        self.lang = lang
        self.sentences: list[str] = []
        self.parts: list[str | Slot] = []
        self.items: list[Item] = []

    def add(self, token: _Token) -> None:
        if token.kind == "data":
            self.items.append(Item("text", token.raw, token.raw))
        elif token.kind == "ref":
            self.items.append(Item("text", token.raw, html.unescape(token.raw)))
        elif token.kind == "other" or (token.kind != "end" and token.name in OBJECTS):
            self.items.append(Item("point", token.raw))
        elif token.name in INLINE and token.kind in ("start", "end"):
            self.items.append(Item("open" if token.kind == "start" else "close", token.raw,
                                    name=token.name))  # fmt: skip
        else:  # any other tag (a block, <br>) ends the running text
            self.flush()
            self.parts.append(token.raw)

    def untouched(self, raw: str, inline: bool) -> None:
        if inline:
            self.items.append(Item("point", raw))
        else:
            self.flush()
            self.parts.append(raw)

    def flush(self) -> None:
        items, self.items = self.items, []
        positions, plain = [], []
        length = 0
        for item in items:
            positions.append(length)
            plain.append(item.plain)
            length += len(item.plain)
        text = "".join(plain)
        spans = sentence_spans(text, self.lang) if text.strip() else []
        if not spans:
            self.parts.extend(item.raw for item in items)
            return
        match = match_tags(items)
        first = len(self.sentences)
        self.sentences += [" ".join(text[a:b].split()) for a, b in spans]
        slots = [Slot(first + k, len(text[a:b].split())) for k, (a, b) in enumerate(spans)]
        inside: list[list[int]] = [[] for _ in spans]  # tag items within each sentence
        starts = [a for a, _ in spans]

        def sentence_of(c: int, strict: bool) -> int | None:
            k = bisect_right(starts, c) - 1
            if k < 0 or c >= spans[k][1] or (strict and c == spans[k][0]):
                return None
            return k

        placed = set()
        for index, (item, p) in enumerate(zip(items, positions)):
            if item.kind != "text":
                k = sentence_of(p, strict=True)
                if k is None:
                    self.parts.append(item.raw)
                else:
                    inside[k].append(index)
                continue
            cuts = sorted({p, p + len(item.plain), *(x for s in spans for x in s
                                                     if p < x < p + len(item.plain))})
            if item.raw != item.plain:  # an entity: one piece, where it starts
                cuts = [p, p + len(item.plain)]
            for a, b in zip(cuts, cuts[1:]):
                k = sentence_of(a, strict=False)
                if k is None:
                    self.parts.append(item.raw[a - p : b - p] if item.raw == item.plain else item.raw)
                elif k not in placed:
                    placed.add(k)
                    self.parts.append(slots[k])
        for k, (a, b) in enumerate(spans):
            slots[k].roots = sentence_tree(items, positions, match, inside[k], text, (a, b))
