"""The cleaning filters one by one: each removes the noise it is made for, under its own
name, and leaves alone what looks like noise and is not (names, numbers, short sentences,
the same sentence in two contexts)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiayn.data.clean import Deduplicator, PairFilter, SeenHashes, normalized
from aiayn.data.demo_corpus import demo_splits
from aiayn.data.prepare_options import CLEANING, CleanOptions
from aiayn.errors import ConfigError

# Real English -> German pairs that every filter must keep.
LEAVE_ALONE = [
    # names, which stay as they are in a translation
    ("Angela Merkel", "Angela Merkel"), ("Johann Sebastian Bach", "Johann Sebastian Bach"),
    ("New York", "New York"), ("Mozart", "Mozart"), ("Paris", "Paris"),
    ("Apple Inc.", "Apple Inc."),
    # numbers inside sentences
    ("He was born in 1956 in Ulm.", "Er wurde 1956 in Ulm geboren."),
    ("Call 112 in an emergency.", "Rufen Sie im Notfall 112 an."),
    ("Page 3 of 10", "Seite 3 von 10"), ("The meeting is at 10:30.", "Die Sitzung ist um 10:30."),
    ("It costs 4.99 euros.", "Es kostet 4,99 Euro."),
    # short sentences, whose lengths and languages are least certain
    ("Yes.", "Ja."), ("OK", "In Ordnung"), ("Thank you!", "Danke!"), ("Sorry.", "Entschuldigung."),
    ("Help!", "Hilfe!"), ("No.", "Nein."), ("Hello", "Hallo"), ("Good morning!", "Guten Morgen!"),
    # the same sentence in two contexts: one source, two translations
    ("Thank you.", "Danke."), ("Thank you.", "Vielen Dank."),
    ("I see.", "Ich verstehe."), ("I see.", "Ich sehe."),
    # ordinary sentences, and a URL within one
    ("A man in a blue shirt is standing on a ladder.",
     "Ein Mann in einem blauen Hemd steht auf einer Leiter."),
    ("Two young girls are playing in the sand.", "Zwei junge Mädchen spielen im Sand."),
    ("More is on the project's page, www.example.org.", "Mehr auf der Seite des Projekts, "
     "www.example.org."),
    ("Tom & Jerry are friends.", "Tom & Jerry sind Freunde."),
    ("If a < b, then b > a.", "Wenn a < b, dann b > a."),
]  # fmt: skip

# Translations that the misaligned filter learns its word model from, with the pairs judged
# (`clean`), as `prepare` learns it from a sample of the corpus it cleans; LEAVE_ALONE's
# pairs are among them ten times over, as a corpus of such sentences would have them.
BACKGROUND = demo_splits(n_train=1500, n_valid=0, n_test=0, seed=3).train
LONG = [pair for pair in BACKGROUND[:20] if min(len(side.split()) for side in pair) >= 6]

# What each filter must remove (given after a first occurrence for the duplicate ones).
CATCH = {
    "duplicate": [("Two young girls are playing in the sand.",
                   "Zwei junge Mädchen spielen im Sand.")],
    "near_duplicate": [("two young girls are  playing in the sand.",
                        "Zwei junge Mädchen spielen im Sand. "),
                       ("He was born in 1957 in Ulm.", "Er wurde 1957 in Ulm geboren.")],
    "copy": [("The cat sits on the mat.", "The cat sits on the mat."),
             ("Click here to read more", "click here to  read more")],
    "markup": [("<p>A man is running.</p>", "Ein Mann läuft."),
               ("Tom &amp; Jerry are friends.", "Tom & Jerry sind Freunde."),
               ('<a href="/home">Home</a>', "Startseite"), ("Line<br/>break", "Zeilenumbruch")],
    "chars": [("12345 67890 1234", "12345 67890 1234"), ("+49 30 1234567", "+49 30 1234567"),
              ("http://example.com/path/to/page.html", "http://example.com/pfad/seite.html"),
              ("!!! ??? ...", "!!! ??? ..."), ("A man.", "---- ==== ####")],
    "script": [("Москва — столица России.", "Moskau ist die Hauptstadt Russlands."),
               ("A man is running.", "Человек бежит."), ("A dog.", "一只狗。")],
    "language": [("A man is running down the street.", "A man is running down the street now."),
                 ("Where is the train station?", "Où est la gare ?"),
                 ("Two dogs play in the snow.", "Dos perros juegan en la nieve."),
                 ("Der Hund spielt im Garten mit einem Ball.", "Der Hund spielt im Garten.")],
    "char_ratio": [("A dog plays in the snow with a red ball.", "Ein Hund."),
                   ("Yes.", "Ja, das ist eine sehr gute Idee, die wir morgen besprechen.")],
    # sentences of six words or more beside another pair's translation (BACKGROUND's words)
    "misaligned": [(a[0], b[1]) for a, b in zip(LONG[:6], LONG[6:12])],
}  # fmt: skip


def clean(pairs: list, options: CleanOptions, src: str = "en", tgt: str = "de") -> list:
    """Each pair's reason (None: kept), in two chunks, as `prepare`'s workers and parent do."""
    pair_filter, dedup = PairFilter(options, src, tgt), Deduplicator(options)
    pair_filter.learn_alignment(BACKGROUND[20:] + LEAVE_ALONE * 10 + pairs)
    reasons: list = []
    for chunk in (pairs[: len(pairs) // 2], pairs[len(pairs) // 2 :]):
        verdicts = pair_filter.judge(chunk)
        dedup.apply(verdicts)
        reasons += verdicts.reasons
    return reasons


def only(name: str) -> CleanOptions:
    return CleanOptions(skip=tuple(f for f in CLEANING if f != name))


@pytest.mark.parametrize("name", CLEANING)
def test_each_filter_catches_its_noise_and_leaves_the_rest(name: str) -> None:
    reasons = clean(LEAVE_ALONE + CATCH[name], only(name))
    assert reasons[: len(LEAVE_ALONE)] == [None] * len(LEAVE_ALONE)
    assert reasons[len(LEAVE_ALONE) :] == [name] * len(CATCH[name])


def test_all_filters_together_keep_what_must_be_left_alone() -> None:
    rng = random.Random(0)
    pairs = LEAVE_ALONE[:]
    rng.shuffle(pairs)
    assert clean(pairs, CleanOptions()) == [None] * len(pairs)


def test_a_pair_is_counted_under_the_first_filter_that_removes_it() -> None:
    # a copy of a duplicate is a duplicate; an empty pair is empty before anything else
    pairs = [("The cat sits on the mat.",) * 2, ("The cat sits on the mat.",) * 2, ("", "")]
    assert clean(pairs, CleanOptions()) == ["copy", "duplicate", "empty"]


def test_duplicates_keep_the_first_and_ignore_empty_pairs() -> None:
    pairs = [("a b c", "x y z"), ("", "x"), ("", "x"), ("a b c", "x y z"), ("A  B C", "X Y Z")]
    reasons = clean(pairs, only("near_duplicate"))
    assert reasons == [None, "empty", "empty", "near_duplicate", "near_duplicate"]
    reasons = clean(pairs, CleanOptions(skip=("language", "chars", "misaligned")))
    assert reasons == [None, "empty", "empty", "duplicate", "near_duplicate"]


def test_normalized_form_of_near_duplicates() -> None:
    assert normalized("  Room 12\tis FREE ") == normalized("room 47 is free") == "room 00 is free"
    assert normalized("Room 12 is free.") != normalized("Room 12 is free")  # punctuation counts


def test_languages_the_identifier_or_script_table_do_not_know_are_not_judged() -> None:
    pair_filter = PairFilter(CleanOptions(), "en", "xx")
    assert any("language: not run for 'xx'" in note for note in pair_filter.notes)
    assert any("script: not run for 'xx'" in note for note in pair_filter.notes)
    assert pair_filter.reason("A man is running down the street.", "Человек бежит по улице.") is None
    assert pair_filter.reason("Человек бежит по улице.", "Человек бежит.") == "script"


def test_languages_are_matched_by_their_base_code_and_close_relatives() -> None:
    sentence = ("Der Mann läuft schnell die Straße entlang.", "Čovjek brzo trči niz ulicu.")
    assert clean([sentence], CleanOptions(), "de-DE", "hr") == [None]
    assert clean([sentence], CleanOptions(), "de_AT", "sr") == [None]  # sr, hr: one language
    assert clean([sentence], CleanOptions(), "de", "fi") == ["language"]


def test_script_filter_takes_a_few_latin_names_in_cyrillic_text() -> None:
    pairs = [("Apple released a new iPhone.", "Apple выпустила новый iPhone."),
             ("Apple released a new iPhone.", "Apple released new iPhone.")]  # fmt: skip
    assert clean(pairs, only("script"), "en", "ru") == [None, "script"]


def test_character_ratio_is_not_judged_for_scripts_of_syllables_or_words() -> None:
    pair_filter = PairFilter(only("char_ratio"), "en", "zh")
    assert any("char_ratio: not run" in note for note in pair_filter.notes)
    assert pair_filter.reason("Two young girls are playing in the sand.", "两个女孩在玩沙子。") is None


@pytest.mark.parametrize(
    "changes, message",
    [({"skip": ("langauge",)}, "no cleaning filter 'langauge'"),
     ({"min_letter_share": 1.5}, "the min letter share must be between 0 and 1, got 1.5"),
     ({"max_char_ratio": 0.5}, "the max char ratio must be a number >= 1, got 0.5"),
     ({"language_ratio": float("nan")}, "the language ratio must be a number >= 1"),
     ({"min_copy_words": 0}, "must be at least 1"),
     ({"misaligned_min_words": 0}, "misaligned min words must be at least 1"),
     ({"misaligned_mads": 0.0}, "deviations must be a number > 0"),
     ({"misaligned_sample": 0}, "its sample at least 1 pair")],
)  # fmt: skip
def test_impossible_cleaning_options_are_refused(changes: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        CleanOptions(**changes)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(st.integers(0, 40), max_size=30), max_size=12))
def test_seen_hashes_is_a_set_that_remembers_in_input_order(batches: list) -> None:
    seen, reference = SeenHashes(), set()
    for batch in batches:
        hashes = np.array(batch, np.uint64)
        expected = []
        for h in batch:
            expected.append(h in reference)
            reference.add(h)
        assert seen.seen(hashes).tolist() == expected
    assert len(seen) == len(reference)
