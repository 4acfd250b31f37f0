"""Inline markup inside one sentence: which source words each inline element covers, and
where its tags go in the sentence's translation (`aiayn.text.html_document` uses it).

An element goes around the target words aligned to the source words it covered (their
span, from the first to the last), inside its parent's words and after its elder
sibling's: so the tags keep their order and nesting, and the tag tree is the same, even
where the translation reorders the words (a sibling then gets only the words after the
one before it, possibly none). A tag just inside a word's punctuation stays there
("<b>bold</b>," and "(<a>link</a>)"). A point (an image, a comment, an untranslated inline
element) goes after the target word aligned to the source word before it, with the
spaces it had. Without alignment links an element takes the same share of the
translation as of the source.
"""

from __future__ import annotations

import html
import unicodedata
from dataclasses import dataclass, field


@dataclass
class Item:
    """A piece of running text: text, an inline element's open or close tag, or a point
    (an object, a comment, an untranslated inline element)."""

    kind: str  # text, open, close, point
    raw: str
    plain: str = ""  # text items: the text (entities decoded)
    name: str = ""


@dataclass
class Node:
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
    children: list[Node] = field(default_factory=list)


@dataclass
class Slot:
    """Where sentence `index` goes, and the inline markup inside it."""

    index: int
    n_words: int
    roots: list[Node] = field(default_factory=list)



def match_tags(items: list[Item]) -> dict[int, int | None]:
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


def sentence_tree(
    items: list[Item], positions: list[int], match: dict[int, int | None], inside: list[int],
    text: str, span: tuple[int, int],
) -> list[Node]:  # fmt: skip
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
    roots: list[Node] = []
    stack: list[Node] = []
    for kind, index, other in events:
        if kind == "close":
            if stack:
                stack.pop()
            continue
        if kind == "point":
            k = sum(1 for _, end in words if end <= positions[index])
            node = Node(items[index].raw, "", (k, k), point=True)
            node.space = _spaces(text, positions[index], positions[index])
        else:  # an element, its open tag here (index) or before the sentence (None)
            node = _element(items, positions, words, text, index, other, within, span)
        (stack[-1].children if stack else roots).append(node)
        if kind == "open":
            stack.append(node)
    return roots


def _element(
    items: list[Item], positions: list[int], words: list[tuple[int, int]], text: str,
    open_index: int | None, close_index: int | None, within: set[int], span: tuple[int, int],
) -> Node:  # fmt: skip
    open_inside = open_index is not None
    close_inside = close_index is not None and close_index in within
    start = positions[open_index] if open_inside else span[0]
    end = positions[close_index] if close_inside else span[1]
    covered = [i for i, (ws, we) in enumerate(words) if ws < end and we > start]
    k = sum(1 for _, we in words if we <= start)
    node = Node(
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


def render(slot: Slot, translation: str, links: list[tuple[int, int]]) -> str:
    """One sentence's translation (escaped) with its inline markup."""
    target = translation.split()
    aligned: dict[int, list[int]] = {}
    for i, j in links:
        if 0 <= i < slot.n_words and 0 <= j < len(target):
            aligned.setdefault(i, []).append(j)
    placement = _Placement(aligned, slot.n_words, len(target))
    cursor = 0
    for root in slot.roots:
        cursor = placement.place(root, 0, len(target), cursor)
    # Text between positions: word j is lead (4j), core (4j + 1), trail (4j + 2), and the
    # space after it (4j + 3); a tag at position p goes before piece p.
    pieces = []
    for j, word in enumerate(target):
        pieces += [html.escape(x, quote=False) for x in _split_word(word)]
        pieces.append(" " if j < len(target) - 1 else "")
    out, done = [], 0
    for at, raw in placement.events:  # in tree order, which is the order of the positions
        if at > done:
            out.append("".join(pieces[done:at]))
            done = at
        out.append(raw)
    out.append("".join(pieces[done:]))
    return "".join(out)


@dataclass
class _Placement:
    """Target words for each node, and its tags at their positions (see `render`)."""

    aligned: dict[int, list[int]]  # source word -> its target words
    n: int  # source words
    m: int  # target words
    events: list[tuple[int, str]] = field(default_factory=list)

    def span(self, node: Node) -> tuple[int, int]:
        """The target words [lo, hi) the node's source words give, before any clamping."""
        start, end = node.words
        m, n = self.m, self.n
        if start == end:  # a point, or an element without words: after the word before it
            before = next((self.aligned[i] for i in range(start - 1, -1, -1) if i in self.aligned), None)
            lo = max(before) + 1 if before else round(start * m / n) if n else 0
            return lo, lo
        found = [j for i in range(start, end) for j in self.aligned.get(i, [])]
        if found:
            return min(found), max(found) + 1
        lo = round(start * m / n)  # no alignment: the same share of the translation
        return lo, max(lo + 1, round(end * m / n))

    def place(self, node: Node, low: int, high: int, cursor: int) -> int:
        """Give `node` target words within [low, high), not before `cursor`; record its
        tags and its children's; return where its words end."""
        lo, hi = self.span(node)
        lo = low if node.open_outside else lo
        hi = high if node.close_outside else hi
        lo = min(max(lo, cursor, low), high)
        hi = max(min(hi, high), lo)
        space = ""
        if lo == hi:  # after the word before, or after the space that follows it
            at = 4 * lo if node.space == (True, False) or lo == 0 else 4 * lo - 1
            space = " " if node.space == (True, True) and lo > 0 else ""
            opened = closed = at
        else:
            opened = 4 * lo + (1 if node.after_lead else 0)
            closed = 4 * (hi - 1) + (2 if node.before_trail else 3)
        if node.open_raw:
            self.events.append((opened, space + node.open_raw))
        inner = lo
        for child in node.children:
            inner = self.place(child, lo, hi, inner)
        if node.close_raw:
            self.events.append((closed, node.close_raw))
        return hi
