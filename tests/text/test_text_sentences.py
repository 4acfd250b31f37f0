"""`aiayn.text.sentences`: paragraphs cut into sentences and put back with their spacing."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiayn.text.sentences import split_document

POOL = ["The children open the door.", "A dog sleeps.", "The man reads a book!",
        "Does the cat sleep?", "Dr. Smith arrives at 5 p.m. today.", "I know that it rains."]
GAPS = [" ", "  ", "\n", "\n\n", "\r\n\r\n", "\n \n\n", "\t"]


def test_the_issues_example_is_three_sentences():
    doc = split_document("The children open the door. A dog sleeps. The man reads a book.", "en")
    assert doc.sentences == ["The children open the door.", "A dog sleeps.", "The man reads a book."]
    assert doc.join(["Die Kinder machen die Tür auf.", "Ein Hund schläft.", "Der Mann liest ein Buch."]) == (
        "Die Kinder machen die Tür auf. Ein Hund schläft. Der Mann liest ein Buch.")


def test_paragraph_breaks_and_spacing_between_sentences_are_kept():
    text = "  One dog sleeps.  Two cats play.\r\n\r\n\r\nA man reads.\n \nA woman sings. \n"
    doc = split_document(text, "en")
    assert doc.sentences == ["One dog sleeps.", "Two cats play.", "A man reads.", "A woman sings."]
    assert doc.join(["A", "B", "C", "D"]) == "  A  B\r\n\r\n\r\nC\n \nD \n"
    assert [text[a:b] for a, b in doc.spans] == doc.sentences


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(POOL), st.sampled_from(GAPS)), min_size=1, max_size=8),
       st.sampled_from(["", " ", "\n\n"]))
def test_sentences_come_back_in_place(parts, lead):
    text = lead + "".join(s + gap for s, gap in parts)
    doc = split_document(text, "en")
    assert doc.sentences == [s for s, _ in parts]
    assert doc.join(doc.sentences) == text
    marked = doc.join([f"<{k}>" for k in range(len(parts))])
    assert marked == lead + "".join(f"<{k}>{gap}" for k, (_, gap) in enumerate(parts))


def test_abbreviations_do_not_end_sentences():
    doc = split_document("Dr. Smith arrived at 5 p.m. on Jan. 3. He left.", "en")
    assert doc.sentences == ["Dr. Smith arrived at 5 p.m. on Jan. 3.", "He left."]
    doc = split_document("Dr. Müller kam z.B. am 3. Oktober. Er ging.", "de")
    assert doc.sentences == ["Dr. Müller kam z.B. am 3. Oktober.", "Er ging."]


def test_a_blank_line_always_ends_a_sentence_and_a_line_break_inside_one_is_a_space():
    doc = split_document("A man reads\na book. The end\n\nof it", "en")
    assert doc.sentences == ["A man reads a book.", "The end", "of it"]
    assert doc.join(["X", "Y", "Z"]) == "X Y\n\nZ"


def test_blank_text_has_no_sentences():
    for text in ["", "   ", "\n\n\r\n"]:
        doc = split_document(text, "en")
        assert doc.sentences == [] and doc.join([]) == text


def test_join_wants_one_translation_per_sentence():
    with pytest.raises(ValueError, match="1 translations for 2 sentences"):
        split_document("A dog sleeps. A cat plays.", "en").join(["x"])
