"""The demo grammar's gold trees, and the translation demo's corpus left as it was."""

from __future__ import annotations

import random
from collections import Counter

from aiayn.data.demo_corpus import (_DEFAULT_GRAMMAR, Clause, DemoExample, RandomChooser,
                                    demo_splits, generate_example, generate_examples,
                                    generate_pairs, write_splits)
from aiayn.data.demo_lexicon import DEFAULT_LEXICON as LEX
from aiayn.data.demo_lexicon import Det, NounPhrase, Pronoun
from aiayn.parsing.demo_treebank import demo_treebank, example_tree
from aiayn.parsing.trees import parse_trees


def treebank_tokens(sentence: str) -> list[str]:
    """The English sentence tokenized as the treebank is: comma and stop apart."""
    return sentence.replace(",", " ,").replace(".", " .").split()


def test_each_tree_spells_its_sentence_and_reads_back():
    rng = random.Random(11)
    forms, labels = Counter(), Counter()
    for _ in range(3000):
        example = generate_example(rng)
        tree = example_tree(example)
        assert tree.words() == treebank_tokens(example.en), example.en
        (again,) = parse_trees(str(tree))
        assert str(again) == str(tree)
        forms[example.form] += 1
        labels.update(node.label for node in _nodes(tree))
    assert set(forms) == {"simple", "adverbial", "subordinate", "fronted", "reported"}
    # the treebank's categories, PRT among them (EVALB's ADVP = PRT rule meets it)
    assert {"S", "NP", "VP", "PP", "SBAR", "ADJP", "ADVP", "PRT"} <= set(labels)
    tags = {"DT", "JJ", "NN", "NNS", "VBZ", "VBP", "VB", "MD", "TO", "IN", "PRP", "PRP$", "CD"}
    assert tags <= set(labels)


def _nodes(tree):
    yield tree
    for child in tree.children:
        if not isinstance(child, str):
            yield from _nodes(child)


def test_hand_checked_trees():
    lex = {x.en[0] if isinstance(x.en, tuple) else x.en: x
           for x in LEX.nouns + LEX.verbs + LEX.modals + LEX.adjectives}
    the, a = Det("def", "the", ""), Det("indef", "a", "ein")
    child = NounPhrase(the, (), lex["child"], False)
    lamp = NounPhrase(a, (lex["new"],), lex["lamp"], False, "acc")
    clause = Clause(child, lex["switch on"], lex["want to"], (lamp,))
    tree = example_tree(DemoExample("adverbial", (clause,), ("Today", "Heute")))
    assert str(tree) == (
        "(TOP (S (NP (NN Today)) (NP (DT the) (NN child)) (VP (VBZ wants) (S (VP (TO to) "
        "(VP (VB switch) (PRT (RP on)) (NP (DT a) (JJ new) (NN lamp)))))) (. .)))")
    dogs = NounPhrase(Det("num", "two", "zwei"), (), lex["dog"], True, "dat")
    look = Clause(Pronoun("I", "ich", "1sg"), lex["look for"], None, (dogs,))
    tree = example_tree(DemoExample("simple", (look,)))
    assert str(tree) == (
        "(TOP (S (NP (PRP I)) (VP (VBP look) (PP (IN for) (NP (CD two) (NNS dogs)))) (. .)))")
    # the module doc's example: a fronted subordinate clause
    sister = NounPhrase(Det("poss", "my", "mein"), (), lex["sister"], False)
    boys = NounPhrase(Det("num", "two", "zwei"), (), lex["boy"], True, "acc")
    eggs = NounPhrase(the, (), lex["egg"], True, "acc")
    clauses = (Clause(sister, lex["invite"], None, (boys,), order="sub"),
               Clause(Pronoun("we", "wir", "pl"), lex["cook"], None, (eggs,), order="inverted"))
    example = DemoExample("fronted", clauses, conjunction=("because", "weil"))
    assert example.en == "Because my sister invites two boys, we cook the eggs."
    assert str(example_tree(example)) == (
        "(TOP (S (SBAR (IN Because) (S (NP (PRP$ my) (NN sister)) (VP (VBZ invites) "
        "(NP (CD two) (NNS boys))))) (, ,) (NP (PRP we)) (VP (VBP cook) (NP (DT the) "
        "(NNS eggs))) (. .)))")


def test_treebank_splits_are_disjoint_and_seeded():
    bank = demo_treebank(200, 20, 20, seed=3)
    sentences = [" ".join(t.words()) for t in bank.train + bank.valid + bank.test]
    assert len(set(sentences)) == 240
    assert [str(t) for t in demo_treebank(200, 20, 20, seed=3).test] == [str(t) for t in bank.test]


def _pairs_as_before(n: int, seed: int) -> list[tuple[str, str]]:
    """`generate_pairs` as it was written before it drew through `generate_examples`."""
    chooser, seen, pairs = RandomChooser(random.Random(seed)), set(), []
    for _ in range(20 * n + 1000):
        if len(pairs) == n:
            return pairs
        example = _DEFAULT_GRAMMAR.sample(chooser)
        if example.en not in seen:
            seen.add(example.en)
            pairs.append((example.en, example.de))
    raise AssertionError("unreachable")


def test_the_translation_demo_corpus_is_byte_identical(tmp_path):
    assert generate_pairs(3000, seed=1234) == _pairs_as_before(3000, 1234)
    assert [(e.en, e.de) for e in generate_examples(500, 5)] == _pairs_as_before(500, 5)
    splits = demo_splits(n_train=2000, n_valid=100, n_test=100)
    write_splits(splits, tmp_path / "now")
    before = _pairs_as_before(2200, 1234)
    for name, pairs in (("train", before[:2000]), ("valid", before[2000:2100]),
                        ("test", before[2100:])):
        for lang, side in (("en", 0), ("de", 1)):
            written = (tmp_path / "now" / f"{name}.{lang}").read_bytes()
            assert written == "".join(p[side] + "\n" for p in pairs).encode("utf-8")
