"""EVALB with COLLINS.prm: one hand-built case per rule, each score worked out by hand."""

from __future__ import annotations

import pytest

from aiayn.parsing.evalb import format_result, score_trees
from aiayn.parsing.trees import parse_trees


def trees(*texts: str):
    return [t for text in texts for t in parse_trees(text)]


def score(gold: str, test: str):
    return score_trees(trees(gold), trees(test)).all


GOLD = "(TOP (S (NP (DT The) (NN dog)) (VP (VBZ sees) (NP (DT a) (NN cat)))))"


def test_labeled_brackets_precision_recall_f1():
    # gold: S 0-5, NP 0-2, VP 2-5, NP 3-5. This parse: S 0-5, NP 0-3, VP 3-5, NP 3-5.
    c = score(GOLD, "(TOP (S (NP (DT The) (NN dog) (VBZ sees)) (VP (NP (DT a) (NN cat)))))")
    assert (c.gold, c.test, c.matched) == (4, 4, 2)
    assert (c.precision, c.recall, c.f1) == (50.0, 50.0, 50.0)
    # a flat parse: only S 0-5, which matches: P 1/1, R 1/4, F1 2*100*25/125 = 40
    c = score(GOLD, "(TOP (S (DT The) (NN dog) (VBZ sees) (DT a) (NN cat)))")
    assert (c.precision, c.recall, c.f1) == (100.0, 25.0, 40.0)
    assert c.exact == 0 and score(GOLD, GOLD).exact == 1 and score(GOLD, GOLD).f1 == 100.0


def test_labels_must_agree_and_function_tags_are_cut():
    wrong = "(TOP (S (NP (DT The) (NN dog)) (VP (VBZ sees) (PP (DT a) (NN cat)))))"
    assert score(GOLD, wrong).matched == 3
    tagged = "(TOP (S (NP-SBJ-1 (DT The) (NN dog)) (VP (VBZ sees) (NP=2 (DT a) (NN cat)))))"
    assert score(tagged, GOLD).f1 == 100.0


def test_top_is_not_a_bracket():
    assert score(GOLD, GOLD).gold == 4  # S, NP, VP, NP: not TOP
    without_top = GOLD[len("(TOP "):-1]
    assert score(GOLD, without_top).f1 == 100.0


def test_traces_are_removed_and_their_empty_brackets_not_scored():
    gold = ("(TOP (S (NP-SBJ-1 (NNS Dogs)) (VP (VBP want) (S (NP-SBJ (-NONE- *-1)) "
            "(VP (TO to) (VP (VB run)))))))")
    test = "(TOP (S (NP (NNS Dogs)) (VP (VBP want) (S (VP (TO to) (VP (VB run)))))))"
    # gold: S 0-4, NP 0-1, VP 1-4, S 2-4 (the trace takes no position), VP 2-4, VP 3-4;
    # the trace's NP-SBJ spans no word: not a bracket
    c = score(gold, test)
    assert (c.gold, c.test, c.matched, c.errors) == (6, 6, 6, 0)


def test_punctuation_is_not_counted_so_where_it_attaches_does_not_matter():
    gold = "(TOP (S (S (NP (PRP I)) (VP (VBP sleep))) (, ,) (NP (PRP you)) (VP (VBP eat)) (. .)))"
    # the comma inside the first S, the stop inside the last VP, one mistagged, and a
    # bracket over the comma alone (no scored word: not a bracket)
    test = ("(TOP (S (S (NP (PRP I)) (VP (VBP sleep)) (PRN (NN ,))) (NP (PRP you)) "
            "(VP (VBP eat) (. .))))")
    c = score(gold, test)
    assert (c.gold, c.test, c.matched) == (6, 6, 6)
    assert (c.words, c.tags) == (4, 4)  # punctuation is out of the tagging accuracy too


def test_advp_and_prt_count_as_one_label():
    gold = "(TOP (S (NP (PRP He)) (VP (VBZ gets) (PRT (RP up)))))"
    c = score(gold, "(TOP (S (NP (PRP He)) (VP (VBZ gets) (ADVP (RB up)))))")
    assert (c.matched, c.f1, c.tags) == (4, 100.0, 2)
    assert score(gold, "(TOP (S (NP (PRP He)) (VP (VBZ gets) (NP (RP up)))))").matched == 3


def test_brackets_match_as_a_multiset():
    # gold: S 0-2, NP 0-1 twice, VP 1-2; the parse has one NP 0-1: P 3/3, R 3/4
    c = score("(TOP (S (NP (NP (NNS dogs))) (VP (VBP bark))))",
              "(TOP (S (NP (NNS dogs)) (VP (VBP bark))))")
    assert (c.gold, c.test, c.matched) == (4, 3, 3)
    assert round(c.f1, 2) == 85.71  # 2 * 100 * 75 / 175


def test_sentences_of_at_most_40_words_are_reported_apart():
    words40 = " ".join(f"(NN w{i})" for i in range(40))
    long_gold = f"(TOP (S {words40} (. .)))"  # 41 words: punctuation counts for the length
    long_test = f"(TOP (X {words40} (. .)))"  # a wrong label: 0 of 1
    short = f"(TOP (S (NP (-NONE- *)) {words40}))"  # 40: the trace does not count
    result = score_trees(trees(long_gold, short), trees(long_test, f"(TOP (S {words40}))"))
    assert (result.all.sentences, result.short.sentences) == (2, 1)
    assert (result.all.matched, result.all.gold, result.all.f1) == (1, 2, 50.0)
    assert (result.short.matched, result.short.gold, result.short.f1) == (1, 1, 100.0)
    assert format_result(result).splitlines()[-1] == "F1 50.00"


def test_a_parse_of_other_words_is_an_error_sentence_not_scored():
    result = score_trees(trees(GOLD, GOLD), trees(GOLD, GOLD.replace("cat", "rat")))
    assert (result.all.sentences, result.all.errors, result.all.gold) == (2, 1, 4)
    with pytest.raises(ValueError, match="2 reference trees but 1 parses"):
        score_trees(trees(GOLD, GOLD), trees(GOLD))
