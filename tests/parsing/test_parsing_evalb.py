"""EVALB with COLLINS.prm: one hand-built case per rule, each score worked out by hand
(`test_parsing_evalb_agreement.py` holds the same figures against the compiled EVALB)."""

from __future__ import annotations

import math

from aiayn.parsing.evalb import ERROR, SKIP, VALID, compare, score_lines, score_trees, stops_at
from aiayn.parsing.evalb_text import format_result
from aiayn.parsing.trees import parse_trees


def score(gold: str, test: str):
    return score_lines([gold], [test]).all


GOLD = "(TOP (S (NP (DT The) (NN dog)) (VP (VBZ sees) (NP (DT a) (NN cat)))))"
COMMA = "(TOP (S (NP (DT the) (NN man)) (, ,) (VP (VBZ sees) (NP (DT the) (NN dog))) (. .)))"


def test_labeled_brackets_precision_recall_f1():
    # gold: S 0-5, NP 0-2, VP 2-5, NP 3-5. This parse: S 0-5, NP 0-3, VP 3-5, NP 3-5.
    c = score(GOLD, "(TOP (S (NP (DT The) (NN dog) (VBZ sees)) (VP (NP (DT a) (NN cat)))))")
    assert (c.gold, c.test, c.matched) == (4, 4, 2)
    assert [c.figures()[k] for k in ("precision", "recall", "f1")] == [50.0, 50.0, 50.0]
    # a flat parse: only S 0-5, which matches: P 1/1, R 1/4, F1 2*100*25/125 = 40
    c = score(GOLD, "(TOP (S (DT The) (NN dog) (VBZ sees) (DT a) (NN cat)))")
    assert [c.figures()[k] for k in ("precision", "recall", "f1")] == [100.0, 25.0, 40.0]
    assert c.complete == 0 and score(GOLD, GOLD).complete == 1


def test_labels_must_agree_and_function_tags_are_cut():
    wrong = "(TOP (S (NP (DT The) (NN dog)) (VP (VBZ sees) (PP (DT a) (NN cat)))))"
    assert score(GOLD, wrong).matched == 3
    tagged = "(TOP (S (NP-SBJ-1 (DT The) (NN dog)) (VP (VBZ sees) (NP=2 (DT a) (NN cat)))))"
    assert score(tagged, GOLD).matched == 4
    # tags are compared whole: NN-1 is not NN
    assert score(GOLD, GOLD.replace("(NN cat)", "(NN-1 cat)")).tags == 4


def test_top_is_deleted_and_an_unlabeled_root_is_a_bracket():
    assert score(GOLD, GOLD).gold == 4  # S, NP, VP, NP: not TOP
    assert score(GOLD, GOLD[len("(TOP "):-1]).matched == 4
    # the treebank's "( (S ...))": its root has the label "", which COLLINS.prm keeps
    unlabeled = "( " + GOLD[len("(TOP "):]
    assert (score(unlabeled, unlabeled).gold, score(unlabeled, GOLD).matched) == (5, 4)


def test_traces_are_removed_and_their_empty_brackets_not_scored():
    gold = ("(TOP (S (NP-SBJ-1 (NNS Dogs)) (VP (VBP want) (S (NP-SBJ (-NONE- *-1)) "
            "(VP (TO to) (VP (VB run)))))))")
    test = "(TOP (S (NP (NNS Dogs)) (VP (VBP want) (S (VP (TO to) (VP (VB run)))))))"
    # gold: S 0-4, NP 0-1, VP 1-4, S 2-4 (the trace takes no position), VP 2-4, VP 3-4;
    # the trace's NP-SBJ spans no word: not a bracket
    c = score(gold, test)
    assert (c.gold, c.test, c.matched, c.errors) == (6, 6, 6, 0)
    assert compare(gold, test).length == 4  # the trace is not counted in the length


def test_punctuation_is_deleted_by_each_trees_own_tags():
    # where punctuation attaches does not matter: it is deleted from both trees
    gold = "(TOP (S (S (NP (PRP I)) (VP (VBP sleep))) (, ,) (NP (PRP you)) (VP (VBP eat)) (. .)))"
    test = ("(TOP (S (S (NP (PRP I)) (VP (VBP sleep)) (PRN (: ,))) (NP (PRP you)) "
            "(VP (VBP eat) (. .))))")
    c = score(gold, test)
    assert (c.gold, c.test, c.matched, c.words, c.tags) == (6, 6, 6, 4, 4)
    # the case: the parse tags the comma NN, so it keeps a word the gold tree does
    # not: EVALB reports one error sentence and no F1 (aiayn used to say 100.00)
    s = compare(COMMA, COMMA.replace("(, ,)", "(NN ,)"))
    assert (s.status, s.errors) == (ERROR, ["Length unmatch (5|6)"])
    result = score_lines([COMMA], [COMMA.replace("(, ,)", "(NN ,)")])
    assert (result.all.sentences, result.all.errors, result.all.valid) == (1, 1, 0)
    assert math.isnan(result.all.figures()["f1"]) and result.strict.f1 == 0.0
    assert result.as_dict()["evalb"]["all"]["f1"] is None
    # and a word the parse tags as punctuation is gone from it
    s = compare(COMMA, COMMA.replace("(NN dog)", "(. dog)"))
    assert (s.status, s.errors) == (ERROR, ["Length unmatch (5|4)"])


def test_advp_and_prt_count_as_one_label():
    gold = "(TOP (S (NP (PRP He)) (VP (VBZ gets) (PRT (RP up)))))"
    c = score(gold, "(TOP (S (NP (PRP He)) (VP (VBZ gets) (ADVP (RB up)))))")
    assert (c.matched, c.tags) == (4, 2)
    assert score(gold, "(TOP (S (NP (PRP He)) (VP (VBZ gets) (NP (RP up)))))").matched == 3


def test_brackets_match_one_to_one():
    # gold: S 0-2, NP 0-1 twice, VP 1-2; the parse has one NP 0-1: P 3/3, R 3/4
    c = score("(TOP (S (NP (NP (NNS dogs))) (VP (VBP bark))))",
              "(TOP (S (NP (NNS dogs)) (VP (VBP bark))))")
    assert (c.gold, c.test, c.matched) == (4, 3, 3)
    assert round(c.figures()["f1"], 2) == 85.71  # 2 * 100 * 75 / 175


def test_crossing_brackets_are_counted_per_parse_bracket():
    # the parse's X over words 2-4 ("sees a") crosses the gold NP 3-5 ("a cat")
    s = compare(GOLD, "(TOP (S (NP (DT The) (NN dog)) (VP (X (VBZ sees) (DT a)) (NN cat))))")
    assert s.crossing == 1


def test_sentences_of_at_most_40_words_are_reported_apart():
    words40 = " ".join(f"(NN w{i})" for i in range(40))
    long_gold = f"(TOP (S {words40} (. .)))"  # 41 words: punctuation counts for the length
    long_test = f"(TOP (X {words40} (. .)))"  # a wrong label: 0 of 1
    short = f"(TOP (S (NP (-NONE- *)) {words40}))"  # 40: the trace does not count
    result = score_lines([long_gold, short], [long_test, f"(TOP (S {words40}))"])
    assert (result.all.sentences, result.short.sentences) == (2, 1)
    assert (result.all.matched, result.all.gold, result.all.figures()["f1"]) == (1, 2, 50.0)
    assert (result.short.matched, result.short.gold, result.short.figures()["f1"]) == (1, 1, 100.0)
    assert "-- len<=40 --" in format_result(result)


def test_other_words_are_an_error_sentence_and_an_empty_parse_a_skip_sentence():
    result = score_lines([GOLD, GOLD, GOLD], [GOLD, GOLD.replace("cat", "rat"), ""])
    assert [s.status for s in result.sentences] == [VALID, ERROR, SKIP]
    assert result.sentences[1].errors == ["Words unmatch (cat|rat)"]
    assert (result.all.errors, result.all.skips, result.all.gold) == (1, 1, 4)
    # strict: the error and skip sentences count their gold brackets, nothing matched
    assert (result.strict.gold, result.strict.test, result.strict.matched) == (12, 8, 4)
    assert round(result.strict.f1, 2) == 40.0  # P 4/8, R 4/12


def test_malformed_parses_are_counted_and_the_run_goes_on():
    unclosed = GOLD[:-1]  # TOP never closed: read, scored, then left out
    s = compare(GOLD, unclosed)
    assert (s.status, s.errors, s.matched) == (ERROR, [
        "Bracketing is unbalanced (too many open bracket)"], 4)
    assert compare(GOLD, GOLD + ")").status == ERROR  # a ')' closing nothing
    assert compare(GOLD, "(TOP)").status == SKIP  # no word: skip, as EVALB
    # a word outside (TAG word): EVALB cannot read the line and stops there; counted
    # here as an error sentence, and the next line is scored
    bare = GOLD.replace("(NN cat)", "cat")
    result = score_lines([GOLD, GOLD], [bare, GOLD])
    assert [s.status for s in result.sentences] == [ERROR, VALID]
    assert result.unreadable == [1] and result.stops_at == 1
    assert "EVALB cannot read line(s) 1" in format_result(result)


def test_evalb_with_max_error_10_stops_at_its_twelfth_error():
    gold, test = [GOLD] * 14, [GOLD.replace("cat", "rat")] * 12 + [GOLD] * 2
    result = score_lines(gold, test)
    assert result.all.errors == 12 and result.stops_at == 12
    assert stops_at(result, max_error=11) is None
    assert "MAX_ERROR 10 stops at line 12" in format_result(result)
    # an unbalanced parse of other words: two errors on one line
    result = score_lines([GOLD] * 6, [GOLD.replace("cat", "rat")[:-1]] * 6)
    assert (result.all.errors, result.stops_at) == (6, 6)


def test_line_counts_that_differ_are_scored_as_evalb_scores_them():
    result = score_lines([GOLD, GOLD, COMMA], [GOLD])
    assert (result.all.sentences, result.line_errors) == (
        1, ["Number of lines unmatch (too many lines in gold file)"])
    assert result.strict.gold == 4 + 4 + 4  # the gold trees without a parse count
    text = format_result(result)
    assert "2 : Number of lines unmatch (too many lines in gold file)" in text
    assert "3 gold lines, 1 parse lines" in text


def test_the_last_line_is_the_strict_f1_and_trees_score_as_their_lines():
    (gold,) = parse_trees(GOLD)
    result = score_trees([gold, gold], [gold, None])
    assert [s.status for s in result.sentences] == [VALID, SKIP]
    lines = format_result(result).splitlines()
    assert lines[-1] == "F1 66.67" and lines[-2] == "Strict FMeasure           =  66.67"
    assert "Bracketing FMeasure       = 100.00" in lines


def test_lines_beyond_evalbs_buffers_are_scored_and_named():
    many = "(S " + " ".join(f"(NN w{i})" for i in range(201)) + ")"  # EVALB holds 200 words
    result = score_lines([many, GOLD], [many, GOLD])
    assert result.all.valid == 2 and [s.beyond_limits for s in result.sentences] == [True, False]
    assert "line(s) 1 exceed EVALB's limits" in format_result(result)
    long_label = "(" + "N" * 30 + " (NN a))"  # 29 characters at most
    assert compare(long_label, long_label).beyond_limits
