"""Labeled bracket precision, recall and F1, as EVALB scores them with COLLINS.prm (sec. 6.3).

Table 4 reports the F1 of EVALB (Sekine & Collins 1997) with the parameter file every WSJ
parsing paper uses, COLLINS.prm. Its rules, each pinned by a test with a hand-built tree:

- a bracket is (label, first word, last word) of a constituent above the preterminals;
  function tags and indices are cut (NP-SBJ-1 is NP); brackets are matched as a multiset
  (two identical unary brackets in the reference need two in the parse);
- ``DELETE_LABEL TOP`` and ``-NONE-``: the root bracket and traces are not scored;
- ``DELETE_LABEL , : `` '' .``: words the reference tags as punctuation are removed from
  both trees before spans are counted, so a bracket that differs only in where a comma
  attaches still matches; a bracket left without words is not scored;
- ``EQ_LABEL ADVP PRT``: the two labels count as one;
- ``CUTOFF_LEN 40``: figures are also given for the sentences of at most 40 words, counting
  punctuation but not traces (``DELETE_LABEL_FOR_LENGTH -NONE-``).

As EVALB does, a pair whose words differ (after removing traces) is an error sentence:
counted and reported, but not scored. Tagging accuracy is over the scored words.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from aiayn.parsing.trees import ROOT, TRACE, Tree

PUNCTUATION = frozenset({",", ":", "``", "''", "."})
DELETED = frozenset({ROOT, TRACE})
EQUAL = {"PRT": "ADVP"}  # EQ_LABEL ADVP PRT
CUTOFF = 40

Bracket = tuple[str, int, int]  # (label, start, end): words start..end-1 of the scored ones


@dataclass
class Counts:
    """Totals over the scored sentences of one subset (all, or <= 40 words)."""

    sentences: int = 0
    errors: int = 0  # sentences whose words differ: not scored
    gold: int = 0  # brackets in the references
    test: int = 0  # brackets in the parses
    matched: int = 0
    exact: int = 0  # sentences whose brackets all match
    words: int = 0  # scored words (punctuation and traces removed)
    tags: int = 0  # of which correctly tagged

    @property
    def recall(self) -> float:
        return 100.0 * self.matched / self.gold if self.gold else 0.0

    @property
    def precision(self) -> float:
        return 100.0 * self.matched / self.test if self.test else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0

    def as_dict(self) -> dict[str, float | int]:
        figures = {"recall": self.recall, "precision": self.precision, "f1": self.f1}
        tagging = 100.0 * self.tags / self.words if self.words else 0.0
        return {**{k: round(v, 2) for k, v in figures.items()}, "sentences": self.sentences,
                "errors": self.errors, "gold_brackets": self.gold, "test_brackets": self.test,
                "matched": self.matched, "exact_match": self.exact,
                "tagging_accuracy": round(tagging, 2)}  # fmt: skip


@dataclass
class EvalbResult:
    all: Counts = field(default_factory=Counts)
    short: Counts = field(default_factory=Counts)  # sentences of at most CUTOFF words

    def as_dict(self) -> dict:
        return {"all": self.all.as_dict(), f"len<={CUTOFF}": self.short.as_dict()}


def score_trees(gold: Sequence[Tree], test: Sequence[Tree]) -> EvalbResult:
    """EVALB with COLLINS.prm over aligned lists of reference and parsed trees."""
    if len(gold) != len(test):
        raise ValueError(f"{len(gold)} reference trees but {len(test)} parses")
    result = EvalbResult()
    for ref, hyp in zip(gold, test):
        ref_words = [(t, w) for t, w in _leaves(ref) if t != TRACE]
        hyp_words = [(t, w) for t, w in _leaves(hyp) if t != TRACE]
        subsets = [result.all] + ([result.short] if len(ref_words) <= CUTOFF else [])
        for counts in subsets:
            counts.sentences += 1
        if [w for _, w in ref_words] != [w for _, w in hyp_words]:
            for counts in subsets:
                counts.errors += 1
            continue
        keep = [t not in PUNCTUATION for t, _ in ref_words]  # the reference's tags decide
        gold_brackets, test_brackets = brackets(ref, keep), brackets(hyp, keep)
        matched = sum((gold_brackets & test_brackets).values())
        tags = sum(k and g == h for k, (g, _), (h, _) in zip(keep, ref_words, hyp_words))
        for counts in subsets:
            counts.gold += sum(gold_brackets.values())
            counts.test += sum(test_brackets.values())
            counts.matched += matched
            counts.exact += gold_brackets == test_brackets
            counts.words += sum(keep)
            counts.tags += tags
    return result


def _leaves(tree: Tree) -> list[tuple[str, str]]:
    return [(p.label, p.children[0]) for p in tree.preterminals()]  # type: ignore[misc]


def brackets(tree: Tree, keep: Sequence[bool]) -> Counter[Bracket]:
    """The scored brackets of ``tree``; ``keep[i]`` says whether its i-th word (traces not
    counted) is scored. Spans index the kept words only."""
    index = [sum(keep[:i]) for i in range(len(keep) + 1)]  # kept words before position i
    found: Counter[Bracket] = Counter()
    _collect(tree, 0, index, found)
    return found


def _collect(node: Tree, start: int, index: list[int], found: Counter[Bracket]) -> int:
    """Add ``node``'s brackets (its words begin at position ``start``); return its end."""
    if node.is_preterminal:
        return start if node.label == TRACE else start + 1
    end = start
    for child in node.children:
        if isinstance(child, Tree):
            end = _collect(child, end, index, found)
    label = re.split(r"[-=]", node.label, maxsplit=1)[0]  # EVALB's modify_label
    label = EQUAL.get(label, label)
    if label not in DELETED and index[end] > index[start]:  # no bracket without words
        found[(label, index[start], index[end])] += 1
    return end


def format_result(result: EvalbResult) -> str:
    """EVALB's summary figures for both subsets; the last line is ``F1 <all sentences>``."""
    return f"{format_summary(result)}\nF1 {result.all.f1:.2f}"


def format_summary(result: EvalbResult) -> str:
    """One line of figures per subset: all sentences, and those of at most 40 words."""
    lines = []
    for name, figures in result.as_dict().items():
        lines.append(
            f"-- {name} -- sentences {figures['sentences']} (errors {figures['errors']})  "
            f"recall {figures['recall']:.2f}  precision {figures['precision']:.2f}  "
            f"F1 {figures['f1']:.2f}  exact {figures['exact_match']}  "
            f"tagging {figures['tagging_accuracy']:.2f}"
        )
    return "\n".join(lines)
