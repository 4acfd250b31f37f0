"""An embedded English→German corpus for the offline demo: a small grammar, written by us.

``aiayn demo`` trains a small Transformer on these pairs on a laptop CPU in minutes, and
the tests use them, so no download is needed. It is a real translation task, not a copy
task: German word order, inflection and word formation all differ from the English.

Grammar (present tense; each English sentence has exactly one German translation)::

    sentence   := clause "."                           simple
                | ADVERBIAL clause "."                  fronted adverbial (German: V2)
                | clause ", " CONJ clause "."           subordinate clause (German: verb-final)
                | CONJ clause ", " clause "."           fronted subordinate clause
                | SUBJECT REPORTER "that" clause "."    "says that" -> ", dass"
    clause     := SUBJECT [MODAL] VERB objects [ADJ if copula] [PP]
    objects    := "" | NP | NP_dat NP_acc              by the verb's frame
    NP         := DET ADJ{0,2} NOUN                    DET: the, a, no, my/our/his/her,
                                                       plural: the, none, numbers 2-12
    PP         := "in the" NP | "with" NP              both govern the dative

German phenomena covered, each pinned by a test in tests/data/test_demo_corpus.py:

- verb second after a fronted adverbial or subordinate clause:
  "Today the man sees the dog." -> "Heute sieht der Mann den Hund."
- verb-final subordinate clauses (weil, obwohl, während, wenn, bevor, dass):
  "The man sleeps, because the woman buys a book." -> "Der Mann schläft, weil die Frau ein
  Buch kauft."
- separable prefixes: "The child opens the door." -> "Das Kind macht die Tür auf."; in a
  subordinate clause "..., weil das Kind die Tür aufmacht."
- modal verb clusters: "The man wants to read the book." -> "Der Mann will das Buch lesen."
  and, verb-final, "..., dass der Mann das Buch lesen will."
- gender, case (nominative, accusative, dative: indirect objects, "helfen", "mit", "in")
  and number agreement of articles and adjectives, weak/mixed/strong endings, weak nouns:
  "der große Hund", "ein großer Hund", "einen großen Hund", "dem Jungen", "im Garten";
  "The woman gives the children a new book." -> "Die Frau gibt den Kindern ein neues Buch."
- plurals with verb agreement and dative plural -n: "Two big dogs sleep." -> "Zwei große
  Hunde schlafen."; "with three children" -> "mit drei Kindern".
- compounds: "the house door" -> "die Haustür", "apple trees" -> "Apfelbäume".

Hand-checked examples (all reachable):

    "On Monday the old man wants to switch on the new lamp."
        -> "Am Montag will der alte Mann die neue Lampe einschalten."
    "I know that the girls help the student."
        -> "Ich weiß, dass die Mädchen dem Studenten helfen."
    "Because my sister invites two boys, we cook the eggs."
        -> "Weil meine Schwester zwei Jungen einlädt, kochen wir die Eier."
    "A hungry bear follows no children in the dark forest."
        -> "Ein hungriger Bär folgt keinen Kindern im dunklen Wald."

The grammar draws every choice through a ``Chooser``: a random one samples; a replaying one
enumerates every path (the tests do so on tiny lexicons to check ``count_reachable``).
"""

from __future__ import annotations

import functools
import pathlib
import random
from dataclasses import dataclass, replace
from itertools import combinations
from typing import Protocol, Sequence, TypeVar

from aiayn.data.demo_lexicon import (DEFAULT_LEXICON, Adjective, Det, Lexicon, Noun, NounPhrase,
                                     PrepPhrase, Pronoun, Verb)

T = TypeVar("T")

# Sampling weights: they shape the mix of constructions, never which sentences exist.
FORM_WEIGHTS = {"simple": 3.0, "adverbial": 2.0, "subordinate": 2.0, "fronted": 1.5,
                "reported": 1.5}
GROUP_WEIGHTS = {"intr": 1.2, "trans": 3.0, "dative": 1.0, "separable": 2.2, "ditrans": 1.3,
                 "copula": 1.3}
SG_DET_WEIGHTS = {"def": 4.0, "indef": 3.0, "no": 1.0, "poss": 2.0}
PL_DET_WEIGHTS = {"def": 3.0, "bare": 1.5, "no": 1.0, "poss": 1.5, "num": 3.0}
ADJ_COUNT_WEIGHTS = (5.0, 3.5, 1.5)  # 0, 1, 2 adjectives
PP_WEIGHTS = {"none": 5.0, "in": 2.5, "with": 2.5}
PLURAL_WEIGHTS = (0.6, 0.4)
PRONOUN_WEIGHTS = (4.0, 1.0)  # noun phrase, pronoun
MODAL_WEIGHTS = (7.0, 3.0)  # without, with
# A full clause (simple sentences) takes two adjectives per noun and a PP; the two clauses
# of a complex sentence take bare noun phrases and no ditransitive verb, to stay short.
FULL, SMALL = "full", "small"
MAX_ADJ = {FULL: 2, SMALL: 0}

_PERSON_TAGS = frozenset({"person"})
_COMPANION_TAGS = frozenset({"person", "animal"})


_TEMPLATES = {"simple": "{0}.", "adverbial": "{adv} {0}.", "subordinate": "{0}, {conj} {1}.",
              "fronted": "{conj} {0}, {1}.", "reported": "{0}{comma} {conj} {1}."}


def _cap(s: str) -> str:
    return s[0].upper() + s[1:]


@dataclass(frozen=True)
class Clause:
    """One clause; ``order`` is its German word order: "main" (S V ...), "inverted" (V S ...,
    after a fronted constituent) or "sub" (S ... V, subordinate)."""

    subject: NounPhrase | Pronoun
    verb: Verb
    modal: Verb | None = None
    objects: tuple[NounPhrase, ...] = ()
    complement: Adjective | None = None
    pp: PrepPhrase | None = None
    order: str = "main"

    @property
    def finite(self) -> str:
        """The German finite verb as it appears: "will", "macht", or "aufmacht" if final."""
        person = self.subject.person
        if self.modal:
            return self.modal.de_form(person)
        return (self.verb.prefix if self.order == "sub" else "") + self.verb.de_form(person)

    def en_words(self) -> list[str]:
        """English words: subject, verb group, objects, complement, PP."""
        person = self.subject.person
        verbs = ([self.modal.en_form(person), self.verb.en_form("inf")] if self.modal
                 else [self.verb.en_form(person)])
        return [self.subject.en, *verbs, *self._rest("en")]

    def de_words(self) -> list[str]:
        """German words in this clause's order (Duden: "Satzklammer")."""
        subject, finite = self.subject.de, self.finite
        if self.modal:
            tail = [self.verb.de_infinitive] + ([finite] if self.order == "sub" else [])
        elif self.order == "sub":
            tail = [finite]
        else:
            tail = [self.verb.prefix] if self.verb.prefix else []
        head = {"main": [subject, finite], "inverted": [finite, subject], "sub": [subject]}
        return [*head[self.order], *self._rest("de"), *tail]

    def _rest(self, lang: str) -> list[str]:
        parts = [*self.objects, self.complement, self.pp]
        return [getattr(p, lang) for p in parts if p is not None]


@dataclass(frozen=True)
class DemoExample:
    """A generated sentence pair with its structure: the clauses in English surface order,
    the fronted adverbial or the conjunction as (English, German)."""

    form: str  # a key of FORM_WEIGHTS
    clauses: tuple[Clause, ...]
    adverbial: tuple[str, str] | None = None
    conjunction: tuple[str, str] | None = None

    def _join(self, i: int) -> str:
        text = [" ".join(c.de_words() if i else c.en_words()) for c in self.clauses]
        return _cap(_TEMPLATES[self.form].format(
            *text, adv=(self.adverbial or ("", ""))[i], conj=(self.conjunction or ("", ""))[i],
            comma="," * i))  # German has a comma before "dass"

    @property
    def en(self) -> str:
        return self._join(0)

    @property
    def de(self) -> str:
        return self._join(1)


class Chooser(Protocol):
    """Where the grammar's choices come from."""

    def pick(self, options: Sequence[T], weights: Sequence[float] | None = None) -> T: ...


class RandomChooser:
    """Samples each choice with ``rng`` (weights are relative, as in ``random.choices``)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def pick(self, options: Sequence[T], weights: Sequence[float] | None = None) -> T:
        if weights is None:
            return options[self.rng.randrange(len(options))]
        return self.rng.choices(options, weights)[0]


def _pick_key(c: Chooser, groups: dict[str, Sequence], weights: dict[str, float]) -> str:
    keys = [k for k in weights if groups.get(k)]
    return c.pick(keys, [weights[k] for k in keys])


class Grammar:
    """Samples sentences from a lexicon (``sample``) and counts them exactly (``count``).

    Every ``count_*`` method mirrors the ``sample`` method of the same part: the number of
    distinct choice paths, which is the number of distinct English sentences because no
    two paths spell the same English (checked by enumeration in the tests).
    """

    def __init__(self, lexicon: Lexicon = DEFAULT_LEXICON) -> None:
        self.lex = lexicon
        self.modal_options = ((False, True), MODAL_WEIGHTS) if lexicon.modals else ((False,), (1,))
        the, no = (Det("def", "the", ""),), (Det("no", "no", "kein"),)
        poss = tuple(Det("poss", e, d) for e, d in lexicon.possessives)
        self.dets = {  # by plural, then kind
            False: {"def": the, "indef": (Det("indef", "a", "ein"),), "no": no, "poss": poss},
            True: {"def": the, "bare": (Det("bare", "", ""),), "no": no, "poss": poss,
                   "num": tuple(Det("num", e, d) for e, d in lexicon.numbers)}}
        self.places = tuple(n for n in lexicon.nouns if "place" in n.tags)
        self.groups = {size: {} for size in (FULL, SMALL)}
        for size, groups in self.groups.items():
            for verb in lexicon.verbs:
                if verb.frame != "report" and self.count_verb(verb, size):
                    groups.setdefault(verb.group, []).append(verb)
        self.reporters = [v for v in lexicon.verbs
                          if v.frame == "report" and self.count_subject(v, 0)]
        self.form_counts = self._count_forms()

    # -- noun phrases -------------------------------------------------------------------
    @functools.cache
    def nouns(self, tags: frozenset[str], with_adjective: bool = False) -> tuple[Noun, ...]:
        """Nouns carrying any of ``tags`` (and, if asked, with an adjective that fits)."""
        return tuple(n for n in self.lex.nouns if n.tags & tags
                     and (not with_adjective or self.adjectives(n.tags, 1)[1]))

    @functools.cache
    def adjectives(self, tags: frozenset[str], max_adj: int) -> list[list[tuple[Adjective, ...]]]:
        """Adjective sequences for a noun with ``tags``, grouped by length 0..max_adj; two
        adjectives must differ in rank and come in English order ("big old", "old red")."""
        fit = sorted((a for a in self.lex.adjectives if a.tags & tags), key=lambda a: a.rank)
        pairs = [p for p in combinations(fit, 2) if p[0].rank < p[1].rank]
        return [[()], [(a,) for a in fit], pairs][: max_adj + 1]

    def noun_phrase(self, c: Chooser, tags: frozenset[str], case: str, max_adj: int,
                    nouns: Sequence[Noun] | None = None) -> NounPhrase:
        """A noun phrase with a noun carrying any of ``tags``."""
        noun = c.pick(nouns if nouns is not None else self.nouns(tags))
        plural = c.pick((False, True), PLURAL_WEIGHTS)
        dets = self.dets[plural]
        det = c.pick(dets[_pick_key(c, dets, PL_DET_WEIGHTS if plural else SG_DET_WEIGHTS)])
        groups = [g for g in self.adjectives(noun.tags, max_adj) if g]
        adjs = c.pick(c.pick(groups, ADJ_COUNT_WEIGHTS[: len(groups)]))
        return NounPhrase(det, adjs, noun, plural, case)

    def count_noun_phrase(self, nouns: Sequence[Noun], max_adj: int,
                          complement: bool = False) -> int:
        """Noun phrases over ``nouns``; with ``complement``, times the fitting adjectives."""
        n_dets = sum(len(d) for plural in (False, True) for d in self.dets[plural].values())
        return sum(n_dets * sum(len(g) for g in self.adjectives(n.tags, max_adj))
                   * (len(self.adjectives(n.tags, 1)[1]) if complement else 1) for n in nouns)

    def subject(self, c: Chooser, verb: Verb, max_adj: int) -> NounPhrase | Pronoun:
        """A pronoun (if persons fit the verb) or a nominative noun phrase."""
        nouns, pronouns = self._subjects(verb)
        kinds = [k for k, ok in (("np", nouns), ("pronoun", pronouns)) if ok]
        w = dict(zip(("np", "pronoun"), PRONOUN_WEIGHTS))
        if c.pick(kinds, [w[k] for k in kinds]) == "pronoun":
            return c.pick(pronouns)
        return self.noun_phrase(c, verb.subj, "nom", max_adj, nouns)

    def count_subject(self, verb: Verb, max_adj: int) -> int:
        nouns, pronouns = self._subjects(verb)
        copula = verb.frame == "copula"
        per_pronoun = len(self.adjectives(_PERSON_TAGS, 1)[1]) if copula else 1
        return self.count_noun_phrase(nouns, max_adj, copula) + len(pronouns) * per_pronoun

    def _subjects(self, verb: Verb) -> tuple[tuple[Noun, ...], tuple[Pronoun, ...]]:
        copula = verb.frame == "copula"  # its subjects need an adjective to be predicated
        ok = "person" in verb.subj and (not copula or self.adjectives(_PERSON_TAGS, 1)[1])
        return self.nouns(verb.subj, with_adjective=copula), self.lex.pronouns if ok else ()

    # -- clauses ------------------------------------------------------------------------
    def clause(self, c: Chooser, size: str) -> Clause:
        """A clause with its verb, arguments, optional modal and (full size) optional PP."""
        groups = self.groups[size]
        verb = c.pick(groups[_pick_key(c, groups, GROUP_WEIGHTS)])
        max_adj = MAX_ADJ[size]
        subject = self.subject(c, verb, max_adj)
        modal = c.pick(self.lex.modals) if c.pick(*self.modal_options) else None
        objects: tuple[NounPhrase, ...] = ()
        complement, pp = None, None
        if verb.frame == "ditrans":
            objects = (self.noun_phrase(c, verb.io, "dat", max_adj),
                       self.noun_phrase(c, verb.obj, "acc", max_adj))
        elif verb.frame == "trans":
            objects = (self.noun_phrase(c, verb.obj, verb.case, max_adj),)
        elif verb.frame == "copula":
            (complement,) = c.pick(self.adjectives(subject.tags, 1)[1])
        if size == FULL and verb.frame in ("intr", "trans"):
            pp = self.prep_phrase(c)
        return Clause(subject, verb, modal, objects, complement, pp)

    def count_verb(self, verb: Verb, size: str) -> int:
        """Clauses with ``verb`` (0 if its arguments cannot be filled from the lexicon)."""
        max_adj = MAX_ADJ[size]
        if verb.frame == "ditrans" and size == SMALL:
            return 0
        n = self.count_subject(verb, max_adj) * (1 + len(self.lex.modals))
        if verb.frame in ("trans", "ditrans"):
            n *= self.count_noun_phrase(self.nouns(verb.obj), max_adj)
        if verb.frame == "ditrans":
            n *= self.count_noun_phrase(self.nouns(verb.io), max_adj)
        if size == FULL and verb.frame in ("intr", "trans"):
            n *= self.count_prep_phrase()
        return n

    def prep_phrase(self, c: Chooser) -> PrepPhrase | None:
        """None, "in the PLACE" (singular, definite) or "with" a person or animal."""
        options = {"none": True, "in": self.places, "with": self.nouns(_COMPANION_TAGS)}
        kind = _pick_key(c, options, PP_WEIGHTS)
        if kind == "in":
            place = c.pick(self.places)
            adjs = c.pick(c.pick([g for g in self.adjectives(place.tags, 1) if g]))
            the_place = NounPhrase(self.dets[False]["def"][0], adjs, place, False, "dat")
            return PrepPhrase("in", "in", the_place)
        if kind == "with":
            return PrepPhrase("with", "mit", self.noun_phrase(c, _COMPANION_TAGS, "dat", 1))
        return None

    def count_prep_phrase(self) -> int:
        places = sum(len(g) for p in self.places for g in self.adjectives(p.tags, 1))
        return 1 + places + self.count_noun_phrase(self.nouns(_COMPANION_TAGS), 1)

    # -- sentences ----------------------------------------------------------------------
    def _count_forms(self) -> dict[str, int]:
        """The number of distinct sentences of each form."""
        full = sum(self.count_verb(v, FULL) for v in self.lex.verbs if v.frame != "report")
        small = sum(self.count_verb(v, SMALL) for v in self.lex.verbs if v.frame != "report")
        reported = sum(self.count_subject(v, 0) for v in self.reporters) * small
        return {"simple": full, "adverbial": len(self.lex.adverbials) * full,
                "subordinate": small * len(self.lex.conjunctions) * small,
                "fronted": small * len(self.lex.conjunctions) * small, "reported": reported}

    def count(self) -> int:
        """The number of distinct sentence pairs this grammar can produce."""
        return sum(self.form_counts.values())

    def sample(self, c: Chooser) -> DemoExample:
        """One sentence pair, every choice drawn from ``c``."""
        form = _pick_key(c, self.form_counts, FORM_WEIGHTS)
        if form == "simple":
            return DemoExample(form, (self.clause(c, FULL),))
        if form == "adverbial":
            adverbial = c.pick(self.lex.adverbials)
            return DemoExample(form, (replace(self.clause(c, FULL), order="inverted"),), adverbial)
        if form == "reported":
            reporter = c.pick(self.reporters)
            main = Clause(self.subject(c, reporter, 0), reporter)
            return DemoExample(form, (main, replace(self.clause(c, SMALL), order="sub")),
                               conjunction=("that", "dass"))
        first, conj = self.clause(c, SMALL), c.pick(self.lex.conjunctions)
        second = self.clause(c, SMALL)
        o1, o2 = ("main", "sub") if form == "subordinate" else ("sub", "inverted")
        return DemoExample(form, (replace(first, order=o1), replace(second, order=o2)),
                           conjunction=conj)


_DEFAULT_GRAMMAR = Grammar(DEFAULT_LEXICON)


def generate_example(rng: random.Random) -> DemoExample:
    """One sentence pair with its structure, drawn with ``rng``."""
    return _DEFAULT_GRAMMAR.sample(RandomChooser(rng))


def generate_pair(rng: random.Random) -> tuple[str, str]:
    """One (English, German) pair drawn with ``rng``."""
    example = generate_example(rng)
    return example.en, example.de


def generate_examples(n: int, seed: int = 0) -> list[DemoExample]:
    """``n`` examples with distinct English sides, in order of first appearance; a seed fixes
    them. Their structure gives the parsing demo its gold trees (`aiayn.parsing`)."""
    chooser, seen, examples = RandomChooser(random.Random(seed)), set(), []
    for _ in range(20 * n + 1000):
        if len(examples) == n:
            return examples
        example = _DEFAULT_GRAMMAR.sample(chooser)
        if example.en not in seen:
            seen.add(example.en)
            examples.append(example)
    raise ValueError(f"could not draw {n} distinct pairs")


def generate_pairs(n: int, seed: int = 0) -> list[tuple[str, str]]:
    """``n`` pairs with distinct English sides, in order of first appearance; a seed fixes them."""
    return [(example.en, example.de) for example in generate_examples(n, seed)]


@dataclass(frozen=True)
class DemoSplits:
    """Train, validation and test pairs; no English sentence is in two of them."""

    train: list[tuple[str, str]]
    valid: list[tuple[str, str]]
    test: list[tuple[str, str]]


def demo_splits(n_train: int = 20000, n_valid: int = 500, n_test: int = 500,
                seed: int = 1234) -> DemoSplits:
    """Disjoint splits cut from one stream of distinct pairs."""
    pairs = generate_pairs(n_train + n_valid + n_test, seed)
    return DemoSplits(pairs[:n_train], pairs[n_train:n_train + n_valid], pairs[n_train + n_valid:])


def write_splits(splits: DemoSplits, out_dir: pathlib.Path, src: str = "en",
                 tgt: str = "de") -> dict[str, pathlib.Path]:
    """Write ``out_dir/{train,valid,test}.{src,tgt}`` (UTF-8, one sentence a line); return
    the prefixes ``{"train": out_dir / "train", ...}``."""
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    prefixes = {}
    for name in ("train", "valid", "test"):
        pairs = getattr(splits, name)
        prefix = out_dir / name
        for lang, side in ((src, 0), (tgt, 1)):
            text = "".join(pair[side] + "\n" for pair in pairs)
            prefix.with_name(f"{name}.{lang}").write_text(text, encoding="utf-8")
        prefixes[name] = prefix
    return prefixes


def count_reachable(lexicon: Lexicon = DEFAULT_LEXICON) -> int:
    """The exact number of distinct sentence pairs the generator can produce."""
    return (_DEFAULT_GRAMMAR if lexicon is DEFAULT_LEXICON else Grammar(lexicon)).count()
