"""`aiayn.text.html_document`: a page's text translated, its tag tree kept."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiayn.text.html_document import parse_html, tokenize

PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>A small page.</title>
<style>p > b { color: red; }</style>
<script>if (a < b && c) { document.write("<p>Not text.</p>"); }</script></head>
<body>
<!-- a comment -->
<h1 class="title">The <em>old</em> man reads.</h1>
<p id="x">The children <b>open <i>the</i> door</b>. A dog &amp; a cat <a href="/a?b=1&amp;c=2" title="Go">sleep
  in the garden</a>, then <code>run(x)</code> plays. (<a href=#>Click</a>) now!</p>
<pre>  Keep   this.  </pre>
<ul><li>One <img src="a.png" alt="x"> item.</li><li translate="no">Not translated.</li></ul>
<p>Line one.<br>Line two.</p>
</body></html>
"""


def identity(doc) -> list[list[tuple[int, int]]]:
    return [[(i, i) for i in range(len(s.split()))] for s in doc.sentences]


class Tags(HTMLParser):
    """Every tag, comment and declaration of a page with its attributes, and its text."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.tags, self.text = [], []
        self.feed(page)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append(("start", tag, attrs))

    def handle_endtag(self, tag):
        self.tags.append(("end", tag))

    def handle_comment(self, data):
        self.tags.append(("comment", data))

    def handle_decl(self, decl):
        self.tags.append(("decl", decl))

    def handle_data(self, data):
        self.text.append(data)


def test_tokens_spell_the_page_and_sentences_are_its_text():
    assert "".join(t.raw for t in tokenize(PAGE)) == PAGE
    doc = parse_html(PAGE, "en")
    assert doc.sentences == [
        "A small page.", "The old man reads.", "The children open the door.",
        "A dog & a cat sleep in the garden, then plays.", "(Click) now!", "One item.",
        "Line one.", "Line two.",
    ]


def test_identity_translation_and_alignment_give_the_page_back():
    doc = parse_html(PAGE, "en")
    unwrapped = PAGE.replace("sleep\n  in", "sleep in")  # a translation is one line
    assert doc.join(doc.sentences, identity(doc)) == unwrapped
    assert doc.join(doc.sentences) == unwrapped  # no alignment: placed by relative position


def test_a_translation_keeps_the_tag_tree_and_translates_each_text_node():
    doc = parse_html(PAGE, "en")
    out = doc.join([s.upper() for s in doc.sentences], identity(doc))
    before, after = Tags(PAGE), Tags(out)
    assert after.tags == before.tags
    untouched = ("if (a < b", "Keep this.", "Not translated.", "p > b { color", "run(x)")
    nodes = [(" ".join(old.split()), " ".join(new.split())) for old, new in zip(before.text, after.text)]
    assert len(before.text) == len(after.text)
    for old, new in nodes:
        assert new == (old if old.startswith(untouched) else old.upper()), (old, new)
    assert "PLAYS." in out and "  Keep   this.  " in out


def test_inline_tags_go_around_the_aligned_target_words():
    doc = parse_html("<p>Today <b>the man</b> sees <i>the big dog</i>.</p>", "en")
    assert doc.sentences == ["Today the man sees the big dog."]
    # Heute(0) sieht(1) der(2) Mann(3) den(4) großen(5) Hund.(6)
    links = [(0, 0), (1, 2), (2, 3), (3, 1), (4, 4), (5, 5), (6, 6)]
    out = doc.join(["Heute sieht der Mann den großen Hund."], [links])
    assert out == "<p>Heute sieht <b>der Mann</b> <i>den großen Hund</i>.</p>"


def test_nested_inline_tags_and_punctuation_inside_a_word():
    doc = parse_html("<p>The <b>big <i>red</i></b> ball, (<a href='x'>see</a>) it.</p>", "en")
    # Der(0) rote(1) große(2) Ball,(3) (siehe)(4) ihn.(5)
    links = [(0, 0), (1, 2), (2, 1), (3, 3), (4, 4), (5, 5)]
    out = doc.join(["Der rote große Ball, (siehe) ihn."], [links])
    assert out == "<p>Der <b><i>rote</i> große</b> Ball, (<a href='x'>siehe</a>) ihn.</p>"


def test_swapped_siblings_keep_their_order_and_the_tree():
    doc = parse_html("<p><b>Today</b> <i>I</i> read.</p>", "en")
    out = doc.join(["Heute lese ich."], [[(0, 0), (1, 2), (2, 1)]])
    assert Tags(out).tags == Tags(doc.join(doc.sentences)).tags
    assert out == "<p><b>Heute</b> lese <i>ich.</i></p>"
    out = doc.join(["ich lese heute."], [[(0, 2), (1, 0), (2, 1)]])  # <i> would come first
    assert Tags(out).tags == Tags("<p><b></b><i></i></p>").tags


def test_an_inline_element_across_two_sentences():
    doc = parse_html("<p>Hello <b>there. How</b> are you?</p>", "en")
    assert doc.sentences == ["Hello there.", "How are you?"]
    out = doc.join(["Hallo du.", "Wie geht es dir?"], [[(0, 0), (1, 1)], [(0, 0), (1, 1), (2, 3)]])
    assert out == "<p>Hallo <b>du. Wie</b> geht es dir?</p>"


def test_translated_text_is_escaped_and_entities_outside_sentences_are_kept():
    doc = parse_html("<p>&lt;b&gt; is a tag.</p>&nbsp;<p>&copy; 2024 ACME.</p>", "en")
    assert doc.sentences == ["<b> is a tag.", "© 2024 ACME."]
    out = doc.join(["<script>x</script> & so.", "© ACME."])
    assert out == "<p>&lt;script&gt;x&lt;/script&gt; &amp; so.</p>&nbsp;<p>© ACME.</p>"


def test_blocks_and_line_breaks_end_sentences():
    doc = parse_html("<div>One<p>Two</p>Three<br>Four</div>", "en")
    assert doc.sentences == ["One", "Two", "Three", "Four"]


def test_broken_html_still_round_trips():
    for page in ["<p>Open <b>bold <i>both</b> closed</i> text. More", "</b>Stray close. <b>Never closed.",
                 "<x-widget>Custom</x-widget>"]:
        doc = parse_html(page, "en")
        assert doc.join(doc.sentences, identity(doc)) == page
    doc = parse_html("a < b and c > d.", "en")  # bare < and > in text come back escaped
    assert doc.join(doc.sentences, identity(doc)) == "a &lt; b and c &gt; d."


def test_join_checks_its_counts():
    doc = parse_html("<p>One. Two.</p>", "en")
    with pytest.raises(ValueError, match="1 translations for 2 sentences"):
        doc.join(["x"])
    with pytest.raises(ValueError, match="1 alignments for 2 sentences"):
        doc.join(["x", "y"], [[]])


WORDS = st.sampled_from(["the", "dog", "sleeps.", "A", "cat,", "(big)", "runs!", "&amp;"])


@st.composite
def fragments(draw, depth: int = 0) -> str:
    parts = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["words", "words", "inline", "point", "block"][: 5 if depth < 2 else 2]))
        if kind == "words":
            parts.append(" ".join(draw(st.lists(WORDS, min_size=1, max_size=4))))
        elif kind == "inline":
            tag = draw(st.sampled_from(["b", "i", "a href='#'", "span"]))
            parts.append(f"<{tag}>{draw(fragments(depth + 1))}</{tag.split()[0]}>")
        elif kind == "point":
            parts.append(draw(st.sampled_from(["<img src=x>", "<!-- c -->", "<code>x()</code>"])))
        else:
            parts.append(f"<p>{draw(fragments(depth + 1))}</p>")
    return draw(st.sampled_from(["", " "])).join(parts)


@settings(max_examples=150, deadline=None)
@given(fragments(), st.randoms(use_true_random=False))
def test_any_translation_and_alignment_keeps_every_tag_in_order(page, rng):
    doc = parse_html(page, "en")
    translations, alignments = [], []
    for sentence in doc.sentences:
        n, m = len(sentence.split()), rng.randint(0, 6)
        translations.append(" ".join(rng.choice(["der", "Hund", "schläft.", "(x)", "<&>"]) for _ in range(m)))
        alignments.append([(rng.randrange(n), rng.randrange(m)) for _ in range(rng.randint(0, 5))] if m else [])
    out = doc.join(translations, alignments)
    assert Tags(out).tags == Tags(page).tags
    assert [t.raw for t in tokenize(out) if t.kind not in ("data", "ref")] == [
        t.raw for t in tokenize(page) if t.kind not in ("data", "ref")]
