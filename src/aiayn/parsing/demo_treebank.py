"""Gold trees for the demo grammar's English sentences: a synthetic treebank (sec. 6.3 offline).

The demo grammar (`aiayn.data.demo_corpus`) records how it built each sentence: clauses,
subjects, verb groups, objects, prepositional phrases. This module writes that structure
as a Penn Treebank tree with the treebank's labels and tags, so `aiayn demo --task parse`
can train and score a parser without the licensed WSJ. The words are the English sentence
tokenized as the treebank is (comma and full stop apart)::

    "Because my sister invites two boys, we cook the eggs."
    (TOP (S (SBAR (IN Because) (S (NP (PRP$ my) (NN sister))
                                   (VP (VBZ invites) (NP (CD two) (NNS boys)))))
            (, ,) (NP (PRP we)) (VP (VBP cook) (NP (DT the) (NNS eggs))) (. .)))

Conventions (PTB-like, kept simple and consistent): a modal group nests one VP per verb,
with ``to`` under (S (VP (TO to) ...)); English particles are (PRT (RP up)), so the
scorer's ADVP = PRT rule is exercised; "look for X" is (PP (IN for) X); subordinate clauses
are (SBAR (IN because) (S ...)); fronted time expressions are NP, PP or ADVP.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiayn.data.demo_corpus import Clause, DemoExample, generate_examples
from aiayn.data.demo_lexicon import NounPhrase, PrepPhrase, Pronoun
from aiayn.parsing.trees import ROOT, Tree

_MD = frozenset({"can", "must", "should", "would"})
_LATER_TAGS = {"to": "TO", "like": "VB", "allowed": "VBN"}  # words after a modal group's first
_PARTICLES = frozenset({"up", "back", "along", "on", "off"})
_PREPOSITIONS = frozenset({"On", "In", "At", "After"})
_DET_TAGS = {"def": "DT", "indef": "DT", "no": "DT", "poss": "PRP$", "num": "CD"}


def _leaf(tag: str, word: str) -> Tree:
    return Tree(tag, [word])


def noun_phrase(np: NounPhrase | Pronoun) -> Tree:
    """(NP (DT the) (JJ big) (NN house) (NN door)); a pronoun is (NP (PRP she))."""
    if isinstance(np, Pronoun):
        return Tree("NP", [_leaf("PRP", np.en)])
    words = np.en.split()
    det = [_leaf(_DET_TAGS[np.det.kind], words.pop(0))] if np.det.kind != "bare" else []
    adjectives = [_leaf("JJ", words.pop(0)) for _ in np.adjectives]
    nouns = [_leaf("NN", w) for w in words[:-1]]  # a compound's modifiers
    head = _leaf("NNS" if np.plural else "NN", words[-1])
    return Tree("NP", [*det, *adjectives, *nouns, head])


def prep_phrase(pp: PrepPhrase) -> Tree:
    return Tree("PP", [_leaf("IN", pp.en_prep), noun_phrase(pp.np)])


def _main_verb(clause: Clause, words: list[str], tag: str) -> Tree:
    """The VP of the lexical verb: head, particle, objects, complement, PP."""
    objects = [noun_phrase(o) for o in clause.objects]
    rest: list[Tree] = []
    for word in words[1:]:
        if word in _PARTICLES:
            rest.append(Tree("PRT", [_leaf("RP", word)]))
        elif word == "for":  # "look for X": the object is the preposition's
            objects = [Tree("PP", [_leaf("IN", word), *objects])]
        else:  # "go shopping"
            rest.append(Tree("NP", [_leaf("NN", word)]))
    complement = [Tree("ADJP", [_leaf("JJ", clause.complement.en)])] if clause.complement else []
    pp = [prep_phrase(clause.pp)] if clause.pp is not None else []
    return Tree("VP", [_leaf(tag, words[0]), *rest, *objects, *complement, *pp])


def _verb_chain(words: list[str], first_tag: str, inner: Tree) -> Tree:
    """A modal group around the lexical VP: "wants to" X -> (VP (VBZ wants) (S (VP (TO to) X)))."""
    if not words:
        return inner
    word, rest = words[0], words[1:]
    if word == "to":
        return Tree("S", [Tree("VP", [_leaf("TO", word), _verb_chain(rest, "", inner)])])
    tag = first_tag or _LATER_TAGS[word]
    return Tree("VP", [_leaf(tag, word), _verb_chain(rest, "", inner)])


def clause_parts(clause: Clause, extra: tuple[Tree, ...] = ()) -> list[Tree]:
    """[subject NP, VP] of a clause; ``extra`` ends the VP (a reported clause's SBAR)."""
    person = clause.subject.person
    finite = "VBZ" if person == "3sg" else "VBP"
    if clause.modal is None:
        vp = _main_verb(clause, clause.verb.en_form(person).split(), finite)
    else:
        modal = clause.modal.en_form(person).split()
        lexical = _main_verb(clause, clause.verb.en_form("inf").split(), "VB")
        vp = _verb_chain(modal, "MD" if modal[0] in _MD else finite, lexical)
    vp.children.extend(extra)  # a reporting clause ("she says that ...") has no modal
    return [noun_phrase(clause.subject), vp]


def adverbial(text: str) -> Tree:
    """A fronted time or manner expression: PP (On Monday), NP (Today, Every day), ADVP."""
    words = text.split()
    if words[0] in _PREPOSITIONS:
        tags = ["DT" if w == "the" else "NNP" if w[0].isupper() else "NN" for w in words[1:]]
        np = Tree("NP", [_leaf(t, w) for t, w in zip(tags, words[1:])])
        return Tree("PP", [_leaf("IN", words[0]), np])
    if words[0] in ("Today", "Tomorrow", "Every"):
        tags = ["DT"] * (len(words) - 1) + ["NN"]
        return Tree("NP", [_leaf(t, w) for t, w in zip(tags, words)])
    return Tree("ADVP", [_leaf("RB", w) for w in words])


def example_tree(example: DemoExample) -> Tree:
    """The gold tree of ``example``'s English sentence, under TOP."""
    comma, stop = _leaf(",", ","), _leaf(".", ".")
    clauses = example.clauses
    if example.form == "simple":
        children = [*clause_parts(clauses[0]), stop]
    elif example.form == "adverbial":
        children = [adverbial(example.adverbial[0]), *clause_parts(clauses[0]), stop]
    elif example.form == "reported":
        sbar = Tree("SBAR", [_leaf("IN", "that"), Tree("S", clause_parts(clauses[1]))])
        children = [*clause_parts(clauses[0], (sbar,)), stop]
    else:
        main, sub = (0, 1) if example.form == "subordinate" else (1, 0)
        sbar = Tree("SBAR", [_leaf("IN", example.conjunction[0]),
                             Tree("S", clause_parts(clauses[sub]))])
        if example.form == "subordinate":  # "{main}, because {sub}."
            children = [Tree("S", clause_parts(clauses[main])), comma, sbar, stop]
        else:  # "Because {sub}, {main}."
            children = [sbar, comma, *clause_parts(clauses[main]), stop]
    tree = Tree(ROOT, [Tree("S", children)])
    first = next(tree.preterminals())  # the sentence starts with a capital
    first.children[0] = first.children[0][0].upper() + first.children[0][1:]
    return tree


@dataclass(frozen=True)
class DemoTreebank:
    """Train, validation and test trees; no sentence is in two of them."""

    train: list[Tree]
    valid: list[Tree]
    test: list[Tree]


def demo_treebank(n_train: int, n_valid: int, n_test: int, seed: int = 4321) -> DemoTreebank:
    """Disjoint splits of gold trees of distinct demo sentences (a seed fixes them)."""
    trees = [example_tree(e) for e in generate_examples(n_train + n_valid + n_test, seed)]
    cut = n_train + n_valid
    return DemoTreebank(trees[:n_train], trees[n_train:cut], trees[cut:])
