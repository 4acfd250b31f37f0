"""Gold word alignments of the demo corpus: which English word gives which German word.

The demo grammar (`aiayn.data.demo_corpus`) records how it built each pair: clauses,
subjects, verbs, objects, phrases. This module spells each part's words again, each word
tagged with the part it comes from (a determiner, an adjective, a noun, the verb, a modal,
a preposition, a conjunction, a fronted adverbial), and links an English word to a German
word when they come from the same part:

    "Today the child opens the door."  ->  "Heute macht das Kind die Tür auf."
    0-0 1-2 2-3 3-1 3-6 4-4 5-5       (opens -> macht ... auf; door. -> Tür)

Words are the sentences split at spaces, punctuation attached ("door.", "schläft,"), the
convention of Moses and fast_align. A part of several words on one side links each of them
to each of the other side's ("opens" -> "macht", "auf"; "go shopping" -> "kauft", "ein";
"house door" -> "Haustür"; "in the" -> "im"); fronted adverbials pair their last words
("morning" -> "Morgen") and the rest with the rest ("In the" -> "Am"). Every alignment is
a "sure" one (Och & Ney 2003). The text is not generated again here: the words spelled
from the parts must equal the pair's own text, or `gold_alignment` raises.
"""

from __future__ import annotations

from aiayn.data.demo_corpus import Clause, DemoExample
from aiayn.data.demo_lexicon import NounPhrase, PrepPhrase, Pronoun

Word = tuple[str, frozenset]  # a word and the parts it comes from


def _tagged(text: str, *parts: object) -> list[Word]:
    return [(w, frozenset(parts)) for w in text.split()]


def _noun_phrase(np: NounPhrase | Pronoun, key: tuple, lang: str) -> list[Word]:
    """Determiner, adjectives and noun, each its own part ("house door" is one noun)."""
    if isinstance(np, Pronoun):
        return _tagged(getattr(np, lang), key)
    words = getattr(np, lang).split()
    n_det = 0 if np.det.kind == "bare" else 1
    n_adj = len(np.adjectives)
    tags = [(*key, "det")] * n_det + [(*key, "adj", k) for k in range(n_adj)]
    tags += [(*key, "noun")] * (len(words) - n_det - n_adj)
    return [(w, frozenset({t})) for w, t in zip(words, tags)]


def _prep_phrase(pp: PrepPhrase, key: tuple, lang: str) -> list[Word]:
    inner = _noun_phrase(pp.np, (*key, "np"), lang)
    prep = pp.en_prep if lang == "en" else pp.de_prep
    words = [(prep, frozenset({(*key, "prep")})), *inner]
    if lang == "de" and words[1][0] == "dem" and prep == "in":  # "in dem" -> "im"
        words[:2] = [("im", words[0][1] | words[1][1])]
    return words


def _rest(clause: Clause, key: tuple, lang: str) -> list[Word]:
    """Objects, complement and prepositional phrase, in the clause's order."""
    words = []
    for k, obj in enumerate(clause.objects):
        words += _noun_phrase(obj, (*key, "obj", k), lang)
    if clause.complement is not None:
        words += _tagged(getattr(clause.complement, lang), (*key, "complement"))
    if clause.pp is not None:
        words += _prep_phrase(clause.pp, (*key, "pp"), lang)
    return words


def clause_words(clause: Clause, key: tuple, lang: str) -> list[Word]:
    """The words of `clause.en_words()` or `de_words()`, each with its parts."""
    person = clause.subject.person
    subject = _noun_phrase(clause.subject, (*key, "subj"), lang)
    verb, modal = (*key, "verb"), (*key, "modal")
    if lang == "en":
        verbs = _tagged(clause.verb.en_form("inf" if clause.modal else person), verb)
        if clause.modal:
            verbs = _tagged(clause.modal.en_form(person), modal) + verbs
        words = [*subject, *verbs, *_rest(clause, key, lang)]
        return _checked(words, " ".join(clause.en_words()))
    finite = _tagged(clause.finite, modal if clause.modal else verb)
    if clause.modal:
        tail = _tagged(clause.verb.de_infinitive, verb) + (finite if clause.order == "sub" else [])
    elif clause.order == "sub":
        tail = finite
    else:
        tail = _tagged(clause.verb.prefix, verb)
    head = {"main": subject + finite, "inverted": finite + subject, "sub": subject}
    words = [*head[clause.order], *_rest(clause, key, lang), *tail]
    return _checked(words, " ".join(clause.de_words()))


def _checked(words: list[Word], text: str) -> list[Word]:
    if " ".join(w for w, _ in words) != text:
        raise ValueError(f"spelled {' '.join(w for w, _ in words)!r}, the grammar wrote {text!r}")
    return words


def _adverbial(en: str, de: str) -> tuple[list[Word], list[Word]]:
    """Word for word when both have as many words; else last with last, rest with rest."""
    e, d = en.split(), de.split()
    if len(e) == len(d):
        return _tagged_each(e, "adv"), _tagged_each(d, "adv")
    tags = lambda ws: [("adv", 0)] * (len(ws) - 1) + [("adv", 1)]  # noqa: E731
    return ([(w, frozenset({t})) for w, t in zip(e, tags(e))],
            [(w, frozenset({t})) for w, t in zip(d, tags(d))])  # fmt: skip


def _tagged_each(words: list[str], key: str) -> list[Word]:
    return [(w, frozenset({(key, k)})) for k, w in enumerate(words)]


def _attach(words: list[Word], mark: str) -> list[Word]:
    """Punctuation joins the word before it: "door" + "." -> "door."."""
    word, parts = words[-1]
    return [*words[:-1], (word + mark, parts)]


def sentence_words(example: DemoExample, lang: str) -> list[Word]:
    """The words of `example.en` (or `.de`), each with the parts it comes from."""
    clauses = [clause_words(c, (k,), lang) for k, c in enumerate(example.clauses)]
    i = 0 if lang == "en" else 1
    conj = _tagged(example.conjunction[i], "conj") if example.conjunction else []
    if example.form == "simple":
        words = clauses[0]
    elif example.form == "adverbial":
        words = _adverbial(*example.adverbial)[i] + clauses[0]
    elif example.form == "subordinate":
        words = _attach(clauses[0], ",") + conj + clauses[1]
    elif example.form == "fronted":
        words = conj + _attach(clauses[0], ",") + clauses[1]
    else:  # reported: "says that" -> "sagt, dass"
        words = (_attach(clauses[0], ",") if lang == "de" else clauses[0]) + conj + clauses[1]
    words = _attach(words, ".")
    first, parts = words[0]
    words[0] = (first[0].upper() + first[1:], parts)
    return _checked(words, example.en if lang == "en" else example.de)


def gold_alignment(example: DemoExample) -> set[tuple[int, int]]:
    """(English word i, German word j) pairs, 0-based: the words that share a part."""
    en, de = sentence_words(example, "en"), sentence_words(example, "de")
    return {(i, j) for i, (_, a) in enumerate(en) for j, (_, b) in enumerate(de) if a & b}
