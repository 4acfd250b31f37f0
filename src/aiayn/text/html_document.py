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
being the sentence split at whitespace, as `aiayn.alignment` gives them). Elements keep
their order and nesting, so the tag tree is the same: where the translation reorders two
sibling elements, the second gets only the words after the first (possibly none). A tag
just inside a word's punctuation stays there ("<b>bold</b>," and "(<a>link</a>)").
Untranslated (`UNTOUCHED`, or any element with `translate="no"`, HTML's own attribute):
`<script>`, `<style>`, `<pre>`, `<textarea>`, ... are copied as they are; an inline one
(`<code>`, `<kbd>`, `<samp>`) stays in its sentence as an object after the target word
aligned to the source word before it, its text not sent to the model. Images and comments
inside a sentence are placed the same way. Translated text is written with `&`, `<` and
`>` escaped; everything between sentences is copied verbatim, entities included.
"""

from __future__ import annotations

import html
import unicodedata
from bisect import bisect_right
from dataclasses import dataclass, field
from html.parser import HTMLParser

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
class _Item:
    """A piece of running text: text, an inline element's open or close tag, or a point
    (an object, a comment, an untranslated inline element)."""

    kind: str  # text, open, close, point
    raw: str
    plain: str = ""  # text items: the text (entities decoded)
    name: str = ""


@dataclass
class _Node:
    """An element (or point) inside one sentence: the source words it covers, [start,
    end), and where its tags go within a word's punctuation."""

    open_raw: str  # "" when the open tag is before the sentence
    close_raw: str  # "" when the close tag is after it, or for a point
    words: tuple[int, int]
    point: bool = False
    open_outside: bool = False
    close_outside: bool = False
    after_lead: bool = False  # "(<a>": the open tag follows the word's leading punctuation
    before_trail: bool = False  # "</b>,": the close tag precedes its trailing punctuation
    # A point (or an element without words): whether a space precedes / follows it, so
    # that "a <img>b", "a<img> b" and "a <img> b" stay as they are.
    space: tuple[bool, bool] = (False, False)
    children: list[_Node] = field(default_factory=list)


@dataclass
class _Slot:
    """Where sentence `index` goes, and the inline markup inside it."""

    index: int
    n_words: int
    roots: list[_Node] = field(default_factory=list)


@dataclass
class HtmlDocument:
    """A page cut into sentences: `sentences` to translate, `join` to put them back."""

    sentences: list[str]
    parts: list[str | _Slot]

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
                out.append(_render(part, translations[part.index], links))
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
        self.parts: list[str | _Slot] = []
        self.items: list[_Item] = []

    def add(self, token: _Token) -> None:
        if token.kind == "data":
            self.items.append(_Item("text", token.raw, token.raw))
        elif token.kind == "ref":
            self.items.append(_Item("text", token.raw, html.unescape(token.raw)))
        elif token.kind == "other" or (token.kind != "end" and token.name in OBJECTS):
            self.items.append(_Item("point", token.raw))
        elif token.name in INLINE and token.kind in ("start", "end"):
            self.items.append(_Item("open" if token.kind == "start" else "close", token.raw,
                                    name=token.name))  # fmt: skip
        else:  # any other tag (a block, <br>) ends the running text
            self.flush()
            self.parts.append(token.raw)

    def untouched(self, raw: str, inline: bool) -> None:
        if inline:
            self.items.append(_Item("point", raw))
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
        match = _match(items)
        first = len(self.sentences)
        self.sentences += [" ".join(text[a:b].split()) for a, b in spans]
        slots = [_Slot(first + k, len(text[a:b].split())) for k, (a, b) in enumerate(spans)]
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
            slots[k].roots = _tree(items, positions, match, inside[k], text, (a, b))


def _match(items: list[_Item]) -> dict[int, int | None]:
    """Each inline open tag's close tag and each close tag's open tag (indices into
    `items`), None where the other is outside this running text. A close tag that does not
    close the innermost open element (misnested: `<b><i>x</b>`) becomes a point."""
    match: dict[int, int | None] = {}
    stack: list[int] = []
    for index, item in enumerate(items):
        if item.kind == "open":
            stack.append(index)
            match[index] = None
        elif item.kind == "close":
            if stack and items[stack[-1]].name == item.name:
                match[index] = stack.pop()
                match[match[index]] = index
            elif stack:
                item.kind = "point"
            else:
                match[index] = None  # opened before the running text
    return match


def _word_spans(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """[start, end) of each whitespace-separated word of text[start:end] (as `str.split`)."""
    spans, begin = [], None
    for i in range(start, end):
        if text[i].isspace():
            if begin is not None:
                spans.append((begin, i))
                begin = None
        elif begin is None:
            begin = i
    if begin is not None:
        spans.append((begin, end))
    return spans


def _punctuation(text: str) -> bool:
    return all(unicodedata.category(c).startswith("P") for c in text)


def _tree(
    items: list[_Item], positions: list[int], match: dict[int, int | None], inside: list[int],
    text: str, span: tuple[int, int],
) -> list[_Node]:  # fmt: skip
    """The inline elements and points of one sentence as a forest, with the source words
    each covers. An element opened before the sentence (closed inside it) or closed after
    it (opened inside) covers the words up to the sentence's edge."""
    a, b = span
    words = _word_spans(text, a, b)
    within = set(inside)
    open_before = [c for c in inside if items[c].kind == "close" and match[c] not in within]
    close_after = [o for o in inside if items[o].kind == "open" and match[o] not in within]
    events = [("open", None, c) for c in sorted(open_before, reverse=True)]  # outermost first
    events += [(items[i].kind, i, match.get(i)) for i in inside]
    events += [("close", o, None) for o in sorted(close_after, reverse=True)]  # innermost first
    roots: list[_Node] = []
    stack: list[_Node] = []
    for kind, index, other in events:
        if kind == "close":
            if stack:
                stack.pop()
            continue
        if kind == "point":
            k = sum(1 for _, end in words if end <= positions[index])
            node = _Node(items[index].raw, "", (k, k), point=True)
            node.space = _spaces(text, positions[index], positions[index])
        else:  # an element, its open tag here (index) or before the sentence (None)
            node = _element(items, positions, words, text, index, other, within, span)
        (stack[-1].children if stack else roots).append(node)
        if kind == "open":
            stack.append(node)
    return roots


def _element(
    items: list[_Item], positions: list[int], words: list[tuple[int, int]], text: str,
    open_index: int | None, close_index: int | None, within: set[int], span: tuple[int, int],
) -> _Node:  # fmt: skip
    open_inside = open_index is not None
    close_inside = close_index is not None and close_index in within
    start = positions[open_index] if open_inside else span[0]
    end = positions[close_index] if close_inside else span[1]
    covered = [i for i, (ws, we) in enumerate(words) if ws < end and we > start]
    k = sum(1 for _, we in words if we <= start)
    node = _Node(
        items[open_index].raw if open_inside else "",
        items[close_index].raw if close_inside else "",
        (covered[0], covered[-1] + 1) if covered else (k, k),
        open_outside=not open_inside,
        close_outside=not close_inside,
    )
    if not covered:
        node.space = _spaces(text, start, end)
    else:
        ws, we = words[covered[0]]
        node.after_lead = ws < start < we and _punctuation(text[ws:start])
        ws, we = words[covered[-1]]
        node.before_trail = ws < end < we and _punctuation(text[end:we])
    return node


def _spaces(text: str, start: int, end: int) -> tuple[bool, bool]:
    """Whether whitespace is just before `start` and just after `end` (within `text`)."""
    return (start > 0 and text[start - 1].isspace(), end < len(text) and text[end].isspace())


def _split_word(word: str) -> tuple[str, str, str]:
    """(leading punctuation, core, trailing punctuation); a word of punctuation is all core."""
    i, j = 0, len(word)
    while i < j and unicodedata.category(word[i]).startswith("P"):
        i += 1
    while j > i and unicodedata.category(word[j - 1]).startswith("P"):
        j -= 1
    return ("", word, "") if i == j else (word[:i], word[i:j], word[j:])


def _render(slot: _Slot, translation: str, links: list[tuple[int, int]]) -> str:
    """One sentence's translation with its inline markup: each element around the target
    words aligned to its source words, inside its parent and after its elder sibling."""
    target = translation.split()
    m, n = len(target), slot.n_words
    aligned: dict[int, list[int]] = {}
    for i, j in links:
        if 0 <= i < n and 0 <= j < m:
            aligned.setdefault(i, []).append(j)
    # Text between positions: word j is lead (4j), core (4j + 1), trail (4j + 2), and the
    # space after it (4j + 3); a tag at position p goes before piece p.
    pieces = []
    for j, word in enumerate(target):
        pieces += [html.escape(x, quote=False) for x in _split_word(word)]
        pieces.append(" " if j < m - 1 else "")
    events: list[tuple[int, str]] = []

    def place(node: _Node, low: int, high: int, cursor: int) -> int:
        """Give `node` the target words [lo, hi) within [low, high), not before `cursor`;
        record its tags; return hi."""
        start, end = node.words
        if start == end:  # a point, or an element without words: after the word before it
            before = next((aligned[i] for i in range(start - 1, -1, -1) if i in aligned), None)
            lo = max(before) + 1 if before else round(start * m / n) if n else 0
            hi = lo
        else:
            found = [j for i in range(start, end) for j in aligned.get(i, [])]
            if found:
                lo, hi = min(found), max(found) + 1
            else:  # no alignment: the same share of the translation
                lo = round(start * m / n)
                hi = max(lo + 1, round(end * m / n))
        lo = low if node.open_outside else lo
        hi = high if node.close_outside else hi
        lo = min(max(lo, cursor, low), high)
        hi = max(min(hi, high), lo)
        space = ""
        if lo == hi:  # after the word before, or after the space that follows it
            at = 4 * lo if node.space == (True, False) or lo == 0 else 4 * lo - 1
            space = " " if node.space == (True, True) and lo > 0 else ""
            opened, closed = at, at
        else:
            opened = 4 * lo + (1 if node.after_lead else 0)
            closed = 4 * (hi - 1) + (2 if node.before_trail else 3)
        if node.open_raw:
            events.append((opened, space + node.open_raw))
        inner = lo
        for child in node.children:
            inner = place(child, lo, hi, inner)
        if node.close_raw:
            events.append((closed, node.close_raw))
        return hi

    cursor = 0
    for root in slot.roots:
        cursor = place(root, 0, m, cursor)
    out, done = [], 0
    for at, raw in events:
        if at > done:
            out.append("".join(pieces[done:at]))
            done = at
        out.append(raw)
    out.append("".join(pieces[done:]))
    return "".join(out)
