"""Linearization as in Vinyals & Kaiser et al. 2015 and the repair rules of delinearization."""

from __future__ import annotations

import random

import pytest

from hypothesis import given, settings
from hypothesis import strategies as st

from aiayn.data.demo_corpus import generate_example
from aiayn.parsing.demo_treebank import example_tree
from aiayn.parsing.evalb import DELETE_LABELS
from aiayn.parsing.linearize import align, delinearize, is_punctuation, linearize
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


def test_rule_a_closing_label_closes_its_constituent_and_all_inside_it():
    # rule 2: the model dropped the second ")VP" of ")VP )VP )S": ")S" still closes the
    # first S, with the VP it holds, so the comma and the second clause are the top S's
    words = "They must go , John sleeps .".split()
    gold = ("(TOP (S (S (NP (PRP They)) (VP (MD must) (VP (VB go)))) (, ,) "
            "(S (NP (NNP John)) (VP (VBZ sleeps))) (. .)))")  # fmt: skip
    assert repaired(linearize(tree(gold)), words) == gold
    dropped = "(S (S (NP PRP )NP (VP MD (VP VB )VP )S , (S (NP NNP )NP (VP VBZ )VP )S . )S"
    assert repaired(dropped, words) == gold
    # the innermost of two open constituents so labelled
    assert repaired("(S NNP (VP VBZ (VP DT )VP NN )VP . )S") == (
        "(TOP (S (NNP John) (VP (VBZ has) (VP (DT a)) (NN dog)) (. .)))")


def test_rule_a_label_open_nowhere_closes_the_innermost_and_stray_closes_are_dropped():
    # rule 2: ")VP" closes the NP it meets (no VP is open); a close with nothing open goes
    assert repaired(")S (S (NP NNP )VP )S )NP VBZ DT NN .") == (
        "(TOP (S (NP (NNP John))) (VBZ has) (DT a) (NN dog) (. .))")


def test_rule_unclosed_constituents_are_closed_at_the_end():
    assert repaired("(S (NP NNP )NP (VP VBZ (NP DT NN") == (
        "(TOP (S (NP (NNP John)) (VP (VBZ has) (NP (DT a) (NN dog) (. .)))))")


def test_rule_missing_words_become_xx_after_the_word_before_them():
    # rule 4: two words too few; they follow "a", in the VP
    assert repaired("(S (NP NNP )NP (VP VBZ DT") == (
        "(TOP (S (NP (NNP John)) (VP (VBZ has) (DT a) (XX dog) (. .))))")
    assert repaired("(NP NNP )NP") == "(TOP (NP (NNP John) (XX has) (XX a) (XX dog) (. .)))"
    # words before the first aligned one go just before it
    assert repaired("(S (NP )NP . )S") == "(TOP (S (XX John) (XX has) (XX a) (XX dog) (. .)))"
    # no slot at all: the innermost open constituent at the end (TOP when none is)
    assert repaired("(S (NP )NP") == "(TOP (S (XX John) (XX has) (XX a) (XX dog) (. .)))"
    assert repaired(")S") == "(TOP (XX John) (XX has) (XX a) (XX dog) (. .))"


HOUSE = "We see a house key .".split()


def test_punctuation_goes_to_punctuation_slots_and_no_other_word_does():
    # The parse demo's model left out the last NN of "a house key": reading slots left to
    # right gave "key" the tag "." and "." the tag XX, and EVALB, deleting "key" as
    # punctuation, scored an error sentence. Aligned, "key" follows "house" in its NP.
    target = "(S (NP PRP )NP (VP VBP (NP DT NN )NP )VP . )S"
    assert repaired(target, HOUSE) == (
        "(TOP (S (NP (PRP We)) (VP (VBP see) (NP (DT a) (NN house) (XX key))) (. .)))")
    # a punctuation slot too many is dropped, never given a word
    assert repaired("(S (NP PRP )NP , (VP VBP (NP DT NN NN )NP )VP . )S", HOUSE) == (
        "(TOP (S (NP (PRP We)) (VP (VBP see) (NP (DT a) (NN house) (NN key))) (. .)))")
    # a word the treebank always tags as punctuation takes no other tag: left without a
    # slot, it takes its own (so that EVALB deletes it, as from the gold tree)
    assert repaired("(S (NP PRP VBP DT NN NN NN )NP )S", HOUSE) == (
        "(TOP (S (NP (PRP We) (VBP see) (DT a) (NN house) (NN key) (. .))))")
    assert repaired("(S NN NN NN NN )S", "Yes , sir ?".split()) == (
        "(TOP (S (NN Yes) (, ,) (NN sir) (. ?)))")
    # other punctuation may take any tag: "'" is a possessive as often as a quote
    assert repaired("(NP (NP NNS POS )NP NN )NP", "dogs ' food".split()) == (
        "(TOP (NP (NP (NNS dogs) (POS ')) (NN food)))")


def test_attention_says_which_word_lost_its_tag():
    # the model dropped the second NN of "house key"; its VBZ slot looked at "falls"
    words = "the house key falls".split()
    target = "(S (NP DT NN )NP (VP VBZ )VP )S"
    order_only = "(TOP (S (NP (DT the) (NN house)) (VP (VBZ key) (XX falls))))"
    assert repaired(target, words) == order_only
    attention = [[0.0] * 4 for _ in target.split()]  # (output tokens, words)
    for row, word in ((2, 0), (3, 1), (6, 3)):  # DT -> the, NN -> house, VBZ -> falls
        attention[row][word] = 0.9
    assert str(delinearize(target, words, attention)) == (
        "(TOP (S (NP (DT the) (NN house) (XX key)) (VP (VBZ falls))))")
    # an output token holding two ("NN)NP") is one attention row for both
    glued = "(S (NP DT NN)NP (VP VBZ )VP )S"
    rows = [attention[r] for r in (0, 1, 2, 3, 5, 6, 7, 8)]
    assert str(delinearize(glued, words, rows)) == str(delinearize(target, words, attention))


def test_attention_never_leaves_more_slots_or_words_over():
    # all the attention on the last word would pair DT with "key" and drop two slots;
    # the fewest left over still wins (all three pairs), attention only breaks ties
    words = "a house key".split()
    attention = [[0.0, 0.0, 1.0] for _ in range(3)]
    assert str(delinearize("DT NN NN", words, attention)) == (
        "(TOP (DT a) (NN house) (NN key))")
    assert align(["DT", "NN"], words, [[1, 0, 0], [0, 0, 1]]) == [0, 2]
    assert align(["DT", "NN"], words) == [0, 1]  # without attention: the earliest pairs
    # attention on a shifted diagonal would buy three pairs of weight 1 with two left over;
    # all four pairs, none left over, is still the alignment
    shifted = [[1.0 if j == i + 1 else 0.0 for j in range(4)] for i in range(4)]
    assert align(["X"] * 4, list("abcd"), shifted) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match=r"\(output tokens, words\) = \(3, 3\)"):
        delinearize("DT NN NN", words, attention[:2])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["NN", "DT", ".", ","]), max_size=7),
       st.lists(st.sampled_from(["a", "b", ".", ","]), max_size=7), st.data())
def test_attention_only_breaks_ties_between_alignments_leaving_as_few_over(slots, words, data):
    unit = st.floats(min_value=0.0, max_value=1.0)
    attention = data.draw(st.lists(st.lists(unit, min_size=len(words), max_size=len(words)),
                                   min_size=len(slots), max_size=len(slots)))  # fmt: skip

    def left_over(taken):
        paired = sum(t is not None for t in taken)
        return len(slots) + len(words) - 2 * paired

    assert left_over(align(slots, words, attention)) == left_over(align(slots, words))


def test_only_punctuation_counts_as_punctuation():
    assert all(map(is_punctuation, [",", ".", "--", "...", "``", "''", "?", "-", "\u201c"]))
    assert not any(map(is_punctuation, ["'s", "$", "3.5", "U.S.", "key", "-LRB-", ""]))


def test_rule_extra_preterminals_and_empty_constituents_are_dropped():
    # rule 3: preterminals beyond the words go; rule 5: (ADJP ) holds no word
    assert repaired("(S (ADJP )ADJP NNP VBZ DT NN . NN NN )S") == (
        "(TOP (S (NNP John) (VBZ has) (DT a) (NN dog) (. .)))")
    flat = "(TOP (S (NNP John) (VBZ has) (DT a) (NN dog) (. .)))"
    assert repaired("( (S NNP VBZ DT NN . )S") == flat  # rule 1: a lone "(" is dropped
    assert repaired("", []) == "(TOP)"


TOKENS = st.sampled_from(["(S", "(NP", "(VP", ")S", ")NP", ")", "(", "NN", "VBZ", "XX", "NP(VP",
                          "a)b(", "((", "\ufffd", ".", ",", "``", "-NONE-", "TOP"])


@settings(max_examples=200, deadline=None)
@given(st.lists(TOKENS, max_size=30), st.lists(st.sampled_from(["a", "b", ".", ","]), min_size=1,
                                                 max_size=8))
def test_any_output_gives_a_well_formed_tree_over_exactly_the_words(tokens, words):
    result = delinearize(tokens, words)
    assert result.words() == words
    assert str(tree(str(result))) == str(result)  # balanced: reads back as one tree
    # a word that is not punctuation gets no tag EVALB deletes, "." and "," no other tag:
    # EVALB reads the same words in the tree as in a gold tree that follows the treebank
    assert all((t in DELETE_LABELS) == (w in ".,") for t, w in zip(result.tags(), words))
