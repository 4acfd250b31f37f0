"""The embedded demo corpus: determinism, splits, its size, and one test per German
phenomenon, checked on generated sentences against rules restated here."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections.abc import Iterator, Sequence

import pytest

from aiayn.data.demo_corpus import (Clause, DemoExample, Grammar, RandomChooser,
                                    count_reachable, demo_splits, generate_example,
                                    generate_pair, generate_pairs, write_splits)
from aiayn.data.demo_lexicon import DEFAULT_LEXICON as LEX
from aiayn.data.demo_lexicon import Det, NounPhrase, PrepPhrase, compound

# Tiny lexicons whose every sentence can be enumerated; together they use every frame,
# sentence form, determiner kind, both PPs and stacked adjectives.
TINY = {
    "complex": {"man", "dog", "sleep", "say", "can", "I", "because", "Today", "big", "be"},
    "ditransitive": {"man", "book", "house door", "big", "give", "two", "my"},
    "clauses": {"man", "dog", "garden", "big", "old", "come back", "be", "she", "two"},
    "dative": {"boy", "door", "young", "open", "help", "they", "two"},
}


class Replay:
    """A chooser that follows a path of option indices (0 past its end) and records how
    many options each choice had: one step of a depth-first enumeration."""

    def __init__(self, path: list[int]) -> None:
        self.path, self.sizes = path, []

    def pick(self, options: Sequence, weights: Sequence[float] | None = None):
        i = len(self.sizes)
        self.sizes.append(len(options))
        return options[self.path[i] if i < len(self.path) else 0]


def enumerate_all(grammar: Grammar) -> Iterator[DemoExample]:
    """Every choice path of ``grammar``, depth first."""
    path: list[int] = []
    while True:
        replay = Replay(path)
        yield grammar.sample(replay)
        path = path + [0] * (len(replay.sizes) - len(path))
        while path and path[-1] + 1 >= replay.sizes[len(path) - 1]:
            path.pop()
        if not path:
            return
        path[-1] += 1


@pytest.fixture(scope="module")
def examples() -> list[DemoExample]:
    rng = random.Random(2024)
    return [generate_example(rng) for _ in range(4000)]


def noun_phrases(ex: DemoExample) -> Iterator[NounPhrase]:
    for c in ex.clauses:
        for np in (c.subject, *c.objects, c.pp.np if c.pp else None):
            if isinstance(np, NounPhrase):
                yield np


def finite_form(c: Clause) -> str:
    """The German finite verb of a main clause, from the lexicon: modal, else verb stem."""
    return (c.modal or c.verb).de_form(c.subject.person)


def cap(s: str) -> str:
    return s[0].upper() + s[1:]


def tokens(de: str) -> list[str]:
    return de.replace(",", "").rstrip(".").split()


def occurs(np: NounPhrase, ex: DemoExample) -> bool:
    """Whether ``np`` is spelled in ``ex.de`` (maybe capitalised, maybe "in dem" -> "im")."""
    return any(f in f" {ex.de}" for f in (f" {np.de}", f" {cap(np.de)}", f" im {np.de[4:]}"))


# -- determinism, splits, size -------------------------------------------------------
def test_a_seed_fixes_the_pairs():
    assert generate_pairs(300, seed=5) == generate_pairs(300, seed=5)
    assert generate_pair(random.Random(3)) == generate_pair(random.Random(3))
    other = generate_pairs(300, seed=6)
    assert len(set(generate_pairs(300, seed=5)) & set(other)) < 30


def test_pairs_do_not_depend_on_the_hash_seed():
    code = "from aiayn.data.demo_corpus import generate_pairs; print(generate_pairs(200, 9))"
    outputs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              check=True, env={**os.environ, "PYTHONHASHSEED": seed}).stdout
               for seed in ("1", "2")}
    assert outputs == {str(generate_pairs(200, 9)) + "\n"}


def test_pairs_are_distinct_and_translation_is_a_function_of_the_source():
    pairs = generate_pairs(5000, seed=0)
    assert len(pairs) == 5000 and len({en for en, _ in pairs}) == 5000
    rng, seen = random.Random(1), {}
    for _ in range(5000):
        en, de = generate_pair(rng)
        assert seen.setdefault(en, de) == de


def test_splits_are_disjoint_deterministic_and_written(tmp_path):
    splits = demo_splits(2000, 200, 100, seed=1)
    assert (len(splits.train), len(splits.valid), len(splits.test)) == (2000, 200, 100)
    sources = [{en for en, _ in part} for part in (splits.train, splits.valid, splits.test)]
    assert sum(map(len, sources)) == len(set.union(*sources)) == 2300
    assert demo_splits(2000, 200, 100, seed=1) == splits
    prefixes = write_splits(splits, tmp_path / "demo", src="en", tgt="de")
    assert prefixes == {name: tmp_path / "demo" / name for name in ("train", "valid", "test")}
    for name, prefix in prefixes.items():
        pairs = getattr(splits, name)
        for lang, side in (("en", 0), ("de", 1)):
            text = prefix.with_name(f"{name}.{lang}").read_text(encoding="utf-8")
            assert text.splitlines() == [pair[side] for pair in pairs]


def test_at_least_a_million_pairs_are_reachable():
    assert count_reachable() >= 10**6


@pytest.mark.parametrize("name", sorted(TINY))
def test_count_is_exact_by_enumerating_a_tiny_lexicon(name):
    grammar = Grammar(LEX.subset(TINY[name]))
    english = [ex.en for ex in enumerate_all(grammar)]
    # Every path gives a new English sentence, and the count formula counts the paths.
    assert len(english) == len(set(english)) == grammar.count() == count_reachable(grammar.lex)
    chooser = RandomChooser(random.Random(0))
    assert all(grammar.sample(chooser).en in set(english) for _ in range(300))


def test_sentence_shape(examples):
    lengths = []
    for ex in examples:
        for s in (ex.en, ex.de):
            assert s[0].isupper() and s.endswith(".") and "  " not in s and s.count(".") == 1
        for np in noun_phrases(ex):  # German nouns are capitalised
            assert np.noun.de[0].isupper() and np.noun.form(np.plural, np.case) in tokens(ex.de)
            ranks = [a.rank for a in np.adjectives]  # English order: "big old red"
            assert ranks == sorted(set(ranks))
            if np.det.kind == "indef":
                assert np.en.split()[0] == ("an" if np.en.split()[1][0] in "aeiou" else "a")
        lengths.append(len(ex.en.split()))
    assert 2 <= min(lengths) and max(lengths) <= 22
    assert 7 <= sum(lengths) / len(lengths) <= 14
    assert {ex.form for ex in examples} == {"simple", "adverbial", "subordinate", "fronted",
                                            "reported"}


# -- word order ----------------------------------------------------------------------
def test_fronted_adverbial_or_clause_puts_the_finite_verb_second(examples):
    seen = 0
    for ex in examples:
        if ex.form == "adverbial":
            fronted, main = ex.adverbial[1], ex.clauses[0]
            rest = ex.de[len(fronted) + 1:]
        elif ex.form == "fronted":
            fronted, main = ex.de.split(", ")[0], ex.clauses[1]
            rest = ex.de[len(fronted) + 2:]
        else:
            continue
        finite = finite_form(main)
        assert rest.split()[0] == finite  # position 2, after the fronted constituent
        assert rest[len(finite) + 1:].startswith(main.subject.de)  # then the subject
        seen += 1
    assert seen > 500


def test_subordinate_clause_ends_with_the_finite_verb(examples):
    seen = 0
    for ex in examples:
        if ex.form not in ("subordinate", "fronted", "reported"):
            continue
        conj, sub = ex.conjunction[1], ex.clauses[0 if ex.form == "fronted" else 1]
        if ex.form == "fronted":  # "Weil ..., liest der Mann ..."
            assert ex.de.startswith(cap(conj) + " ")
            text = ex.de.split(", ")[0][len(conj) + 1:]
        else:
            text = ex.de.split(f", {conj} ")[1]
        words = text.rstrip(".").split()
        person = sub.subject.person
        finite = (sub.modal or sub.verb).de_form(person)
        if sub.modal:  # "..., weil der Mann das Buch lesen will."
            assert words[-2:] == [sub.verb.prefix + sub.verb.de_form("inf"), finite]
        else:  # "..., weil das Kind die Tür aufmacht."
            finite = sub.verb.prefix + finite
            assert words[-1] == finite
        assert words.count(finite) == 1 and " ".join(words).startswith(sub.subject.de + " ")
        conj_en = ex.conjunction[0]
        assert f" {conj_en} " in ex.en or ex.en.startswith(cap(conj_en) + " ")
        seen += 1
    assert seen > 800


def test_separable_prefix_closes_the_main_clause(examples):
    seen = 0
    for ex in examples:
        c = ex.clauses[0]
        if ex.form != "simple" or not c.verb.prefix:
            continue
        if c.modal:  # "Das Kind will die Tür aufmachen."
            assert ex.de.endswith(f" {c.verb.prefix}{c.verb.de_form('inf')}.")
        else:  # "Das Kind macht die Tür auf."
            assert ex.de.startswith(f"{cap(c.subject.de)} {c.verb.de_form(c.subject.person)} ")
            assert ex.de.endswith(f" {c.verb.prefix}.")
        assert f" {c.verb.en_form('inf' if c.modal else c.subject.person)}" in ex.en
        seen += 1
    assert seen > 150


def test_modal_sends_the_infinitive_to_the_end(examples):
    seen = 0
    for ex in examples:
        c = ex.clauses[0]
        if ex.form != "simple" or not c.modal:
            continue
        person = c.subject.person
        assert ex.de.startswith(f"{cap(c.subject.de)} {c.modal.de_form(person)} ")
        assert ex.de.endswith(f" {c.verb.prefix}{c.verb.de_form('inf')}.")
        assert f" {c.modal.en_form(person)} {c.verb.en_form('inf')}" in ex.en
        seen += 1
    assert seen > 200


# -- agreement -----------------------------------------------------------------------
def expected_article(np: NounPhrase) -> str:
    """Articles restated from a grammar book (not from the module's tables)."""
    g, case = ("pl" if np.plural else np.noun.gender), np.case
    if np.det.kind == "def":
        return {"nom": {"m": "der", "f": "die", "n": "das", "pl": "die"},
                "acc": {"m": "den", "f": "die", "n": "das", "pl": "die"},
                "dat": {"m": "dem", "f": "der", "n": "dem", "pl": "den"}}[case][g]
    if np.det.kind in ("bare", "num"):
        return np.det.de
    ending = {"nom": {"m": "", "f": "e", "n": "", "pl": "e"},
              "acc": {"m": "en", "f": "e", "n": "", "pl": "e"},
              "dat": {"m": "em", "f": "er", "n": "em", "pl": "en"}}[case][g]
    return np.det.de + ending


def expected_adjective_ending(np: NounPhrase) -> str:
    """Weak after der-words, mixed after ein-words, strong without an article."""
    g, case = ("pl" if np.plural else np.noun.gender), np.case
    if np.det.kind == "def":
        return "e" if (case == "nom" and g != "pl") or (case == "acc" and g in "fn") else "en"
    if np.det.kind in ("bare", "num"):  # only plurals here
        return "en" if case == "dat" else "e"
    if case == "dat" or g == "pl":
        return "en"
    return {"m": "er" if case == "nom" else "en", "f": "e", "n": "es"}[g]


WEAK_NOUNS = {"Junge": "Jungen", "Student": "Studenten", "Nachbar": "Nachbarn",
              "Elefant": "Elefanten", "Bär": "Bären"}  # n-declension: "den Jungen"


def expected_noun(np: NounPhrase) -> str:
    n = np.noun
    if np.plural:
        return n.de_pl + ("n" if np.case == "dat" and n.de_pl[-1] not in "ns" else "")
    return WEAK_NOUNS[n.de] if np.case != "nom" and n.de in WEAK_NOUNS else n.de


def test_articles_and_adjectives_agree_in_gender_case_and_number(examples):
    seen = set()
    for ex in examples:
        for np in noun_phrases(ex):
            words = np.de.split()
            article = expected_article(np)
            adjectives = [a.stem + expected_adjective_ending(np) for a in np.adjectives]
            assert words == [w for w in (article, *adjectives) if w] + [expected_noun(np)]
            assert occurs(np, ex)
            seen.add((np.det.kind, np.case, "pl" if np.plural else np.noun.gender,
                      len(np.adjectives) > 0))
    # accusative masculine: "den großen Hund", "einen großen Hund"
    assert {("def", "acc", "m", True), ("indef", "acc", "m", True)} <= seen
    assert len(seen) > 60


def test_dative_objects_prepositions_and_plural_n(examples):
    seen = 0
    for ex in examples:
        assert " in dem " not in ex.de
        for c in ex.clauses:
            if c.verb.frame == "ditrans" or (c.verb.frame == "trans" and c.verb.case == "dat"):
                assert c.objects[0].case == "dat"
                assert occurs(c.objects[0], ex)
                seen += 1
            if c.pp:
                assert c.pp.np.case == "dat"
                prep = c.pp.de.split()[0]
                assert prep in ("mit", "im", "in")
                if prep == "in":
                    assert c.pp.de.startswith("in der ")
        for np in noun_phrases(ex):
            if np.case == "dat" and np.plural:  # "mit den Kindern", "den Autos"
                assert np.de.endswith(("n", "s"))
    assert seen > 300


def test_numbers_take_plural_nouns_and_plural_verbs(examples):
    seen = 0
    for ex in examples:
        for c in ex.clauses:
            for np in (c.subject, *c.objects):
                if isinstance(np, NounPhrase) and np.det.kind == "num":
                    assert np.en.endswith(" " + np.noun.en_pl)
                    assert np.de.split()[-1] == np.noun.form(True, np.case)
                    seen += 1
            if isinstance(c.subject, NounPhrase) and c.subject.plural and c.order == "main":
                verb = c.modal or c.verb
                assert c.de_words()[1] == verb.de[3] and c.en_words()[1] == verb.en[3]
    assert seen > 300
    plural = {n.en: (n.en_pl, n.de_pl) for n in LEX.nouns}
    assert plural["dog"] == ("dogs", "Hunde") and plural["child"] == ("children", "Kinder")
    assert plural["woman"] == ("women", "Frauen") and plural["book"] == ("books", "Bücher")


def test_compounds_are_one_german_word(examples):
    seen = 0
    for ex in examples:
        for np in noun_phrases(ex):
            if " " in np.noun.en:
                modifier, head = np.noun.en.split()
                assert np.noun.de.endswith(next(n.de.lower() for n in LEX.nouns if n.en == head))
                assert np.noun.form(np.plural, np.case) in tokens(ex.de)
                seen += 1
    assert seen > 100
    nouns = {n.en: n for n in LEX.nouns}
    assert (nouns["house door"].de, nouns["apple tree"].de_pl) == ("Haustür", "Apfelbäume")
    assert compound("apple", nouns["tree"]).gender == "m"


# -- hand-checked sentences ----------------------------------------------------------
WORDS = {x.en[0] if isinstance(x.en, tuple) else x.en: x
         for x in (*LEX.nouns, *LEX.adjectives, *LEX.pronouns)}
VERBS = {(v.en[0], v.frame): v for v in (*LEX.verbs, *LEX.modals)}
DETS = {"the": Det("def", "the", ""), "a": Det("indef", "a", "ein"), "no": Det("no", "no", "kein"),
        "my": Det("poss", "my", "mein"), "two": Det("num", "two", "zwei")}


def np_(det: str, words: str, case: str = "nom", plural: bool = False) -> NounPhrase:
    *adjs, noun = words.split("/")
    return NounPhrase(DETS[det], tuple(WORDS[a] for a in adjs), WORDS[noun], plural, case)


def verb(en: str, frame: str = "trans"):
    return VERBS[(en, frame)]


HAND_CHECKED = [
    (DemoExample("adverbial", (Clause(np_("the", "old/man"), verb("switch on"),
                                      verb("want to", "modal"), (np_("the", "new/lamp", "acc"),),
                                      order="inverted"),),
                 adverbial=("On Monday", "Am Montag")),
     "On Monday the old man wants to switch on the new lamp.",
     "Am Montag will der alte Mann die neue Lampe einschalten."),
    (DemoExample("reported", (Clause(WORDS["I"], verb("know", "report")),
                              Clause(np_("the", "girl", plural=True), verb("help"),
                                     objects=(np_("the", "student", "dat"),), order="sub")),
                 conjunction=("that", "dass")),
     "I know that the girls help the student.",
     "Ich weiß, dass die Mädchen dem Studenten helfen."),
    (DemoExample("fronted", (Clause(np_("my", "sister"), verb("invite"),
                                    objects=(np_("two", "boy", "acc", True),), order="sub"),
                             Clause(WORDS["we"], verb("cook"),
                                    objects=(np_("the", "egg", "acc", True),), order="inverted")),
                 conjunction=("because", "weil")),
     "Because my sister invites two boys, we cook the eggs.",
     "Weil meine Schwester zwei Jungen einlädt, kochen wir die Eier."),
    (DemoExample("simple", (Clause(np_("a", "hungry/bear"), verb("follow"),
                                   objects=(np_("no", "child", "dat", True),),
                                   pp=PrepPhrase("in", "in", np_("the", "dark/forest", "dat"))),)),
     "A hungry bear follows no children in the dark forest.",
     "Ein hungriger Bär folgt keinen Kindern im dunklen Wald."),
    (DemoExample("subordinate", (Clause(np_("the", "man"), verb("sleep", "intr")),
                                 Clause(np_("the", "child"), verb("open"),
                                        objects=(np_("the", "door", "acc"),), order="sub")),
                 conjunction=("because", "weil")),
     "The man sleeps, because the child opens the door.",
     "Der Mann schläft, weil das Kind die Tür aufmacht."),
    (DemoExample("simple", (Clause(np_("the", "child"), verb("open"),
                                   objects=(np_("a", "expensive/old/house door", "acc"),)),)),
     "The child opens an expensive old house door.",
     "Das Kind macht eine teure alte Haustür auf."),
    (DemoExample("simple", (Clause(np_("two", "big/dog", plural=True), verb("sleep", "intr"),
                                   pp=PrepPhrase("with", "mit", np_("my", "young/cat", "dat"))),)),
     "Two big dogs sleep with my young cat.",
     "Zwei große Hunde schlafen mit meiner jungen Katze."),
    (DemoExample("simple", (Clause(np_("the", "woman"), verb("give", "ditrans"), objects=(
        np_("the", "child", "dat", True), np_("a", "new/book", "acc"))),)),
     "The woman gives the children a new book.", "Die Frau gibt den Kindern ein neues Buch."),
    (DemoExample("adverbial", (Clause(WORDS["she"], verb("be", "copula"), verb("can", "modal"),
                                      complement=WORDS["tired"], order="inverted"),),
                 adverbial=("Today", "Heute")),
     "Today she can be tired.", "Heute kann sie müde sein."),
]


@pytest.mark.parametrize("example,en,de", HAND_CHECKED)
def test_hand_checked_sentences(example, en, de):
    assert (example.en, example.de) == (en, de)
