"""Linearization as in Vinyals & Kaiser et al. 2015 and the repair rules of delinearization."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from aiayn.data.demo_corpus import generate_example
from aiayn.parsing.demo_treebank import example_tree
from aiayn.parsing.linearize import delinearize, linearize
from aiayn.parsing.trees import parse_trees

JOHN = "(TOP (S (NP (NNP John)) (VP (VBZ has) (NP (DT a) (NN dog))) (. .)))"
WORDS = "John has a dog .".split()


def tree(text: str):
    (t,) = parse_trees(text)
    return t


def test_the_format_of_grammar_as_a_foreign_language():
    # [37]: labelled closing brackets, tags for words, no TOP
    assert linearize(tree(JOHN)) == "(S (NP NNP )NP (VP VBZ (NP DT NN )NP )VP . )S"
    assert linearize(tree(JOHN), tags=False) == "(S (NP XX )NP (VP XX (NP XX XX )NP )VP XX )S"


def test_delinearize_inverts_linearize_on_demo_trees():
    rng = random.Random(7)
    for _ in range(300):
        gold = example_tree(generate_example(rng))
        assert str(delinearize(linearize(gold), gold.words())) == str(gold)


def repaired(target: str, words=WORDS) -> str:
    return str(delinearize(target, words))


def test_rule_closing_label_is_ignored_and_stray_closes_dropped():
    # rule 2: ")VP" closes the NP it meets; a close with nothing open is dropped
    assert repaired(")S (S (NP NNP )VP )S )NP VBZ DT NN .") == (
        "(TOP (S (NP (NNP John))) (VBZ has) (DT a) (NN dog) (. .))")


def test_rule_unclosed_constituents_are_closed_at_the_end():
    assert repaired("(S (NP NNP )NP (VP VBZ (NP DT NN") == (
        "(TOP (S (NP (NNP John)) (VP (VBZ has) (NP (DT a) (NN dog) (XX .)))))")


def test_rule_missing_words_become_xx_in_the_innermost_open_constituent():
    # rule 4: two words too few; the output ended inside the VP
    assert repaired("(S (NP NNP )NP (VP VBZ DT") == (
        "(TOP (S (NP (NNP John)) (VP (VBZ has) (DT a) (XX dog) (XX .))))")
    # nothing open: under TOP
    assert repaired("(NP NNP )NP") == "(TOP (NP (NNP John)) (XX has) (XX a) (XX dog) (XX .))"


def test_rule_extra_preterminals_and_empty_constituents_are_dropped():
    # rule 3: preterminals beyond the words go; rule 5: (ADJP ) holds no word
    assert repaired("(S (ADJP )ADJP NNP VBZ DT NN . NN NN )S") == (
        "(TOP (S (NNP John) (VBZ has) (DT a) (NN dog) (. .)))")
    flat = "(TOP (S (NNP John) (VBZ has) (DT a) (NN dog) (. .)))"
    assert repaired("( (S NNP VBZ DT NN . )S") == flat  # rule 1: a lone "(" is dropped
    assert repaired("", []) == "(TOP)"


TOKENS = st.sampled_from(["(S", "(NP", "(VP", ")S", ")NP", ")", "(", "NN", "VBZ", "XX", "NP(VP",
                          "a)b(", "((", "\ufffd"])


@settings(max_examples=200, deadline=None)
@given(st.lists(TOKENS, max_size=30), st.lists(st.sampled_from(["a", "b", "c"]), min_size=1,
                                                 max_size=8))
def test_any_output_gives_a_well_formed_tree_over_exactly_the_words(tokens, words):
    result = delinearize(tokens, words)
    assert result.words() == words
    assert str(tree(str(result))) == str(result)  # balanced: reads back as one tree
