"""`aiayn.data.demo_alignment`: the demo grammar's own word links, spelled from its parts."""

from __future__ import annotations

from aiayn.data.demo_alignment import gold_alignment, sentence_words
from aiayn.data.demo_corpus import Clause, DemoExample, generate_examples
from aiayn.data.demo_lexicon import DEFAULT_LEXICON, Det, NounPhrase, PrepPhrase

NOUNS = {n.en: n for n in DEFAULT_LEXICON.nouns}
VERBS = {v.en[0]: v for v in DEFAULT_LEXICON.verbs}
THE = Det("def", "the", "")


def links(example: DemoExample) -> list[str]:
    en, de = example.en.split(), example.de.split()
    return sorted(f"{en[i]}-{de[j]}" for i, j in gold_alignment(example))


def test_every_word_of_thousands_of_pairs_is_spelled_and_linked():
    for example in generate_examples(3000, seed=3):
        en, de = example.en.split(), example.de.split()
        assert [w for w, _ in sentence_words(example, "en")] == en
        assert [w for w, _ in sentence_words(example, "de")] == de
        found = gold_alignment(example)
        assert {i for i, _ in found} == set(range(len(en)))
        assert {j for _, j in found} == set(range(len(de)))


def test_separable_verb_after_a_fronted_adverbial():
    child = NounPhrase(THE, (), NOUNS["child"], False, "nom")
    door = NounPhrase(THE, (), NOUNS["door"], False, "acc")
    clause = Clause(child, VERBS["open"], objects=(door,), order="inverted")
    example = DemoExample("adverbial", (clause,), adverbial=("Today", "Heute"))
    assert (example.en, example.de) == ("Today the child opens the door.",
                                        "Heute macht das Kind die Tür auf.")
    assert links(example) == sorted(["Today-Heute", "the-das", "child-Kind", "opens-macht",
                                     "opens-auf.", "the-die", "door.-Tür"])


def test_in_the_becomes_im_and_multiword_adverbials():
    man = NounPhrase(THE, (), NOUNS["man"], False, "nom")
    garden = NounPhrase(THE, (), NOUNS["garden"], False, "dat")
    clause = Clause(man, VERBS["sleep"], pp=PrepPhrase("in", "in", garden), order="inverted")
    example = DemoExample("adverbial", (clause,), adverbial=("In the morning", "Am Morgen"))
    assert example.de == "Am Morgen schläft der Mann im Garten."
    assert links(example) == sorted(["In-Am", "the-Am", "morning-Morgen", "the-der", "man-Mann",
                                     "sleeps-schläft", "in-im", "the-im", "garden.-Garten."])
