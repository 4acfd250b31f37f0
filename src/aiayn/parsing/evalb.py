"""EVALB (Sekine & Collins 1997) with COLLINS.prm, line for line: the F1 of Table 4 (sec. 6.3).

WSJ parsing papers score with ``evalb -p COLLINS.prm GOLD TEST``; this module is its C
source's logic in Python, tested against the compiled program. EVALB reads each file a
line at a time, one sentence a line, and reads a line as its ``read_line`` does:

- ``(LABEL word)`` is a word with its tag; any other ``(LABEL`` opens a bracket, which spans
  the words up to its ``)``. ``DELETE_LABEL`` tags (TOP, -NONE- and the punctuation tags
  , : `` '' .) delete their word; each tree is cut by its own tags, so a comma the parse
  tags ``NN`` is a word there and not in the gold tree.
- The words of the two trees must then agree: a different number is an error sentence
  ("Length unmatch"), as is a different word ("Words unmatch"); a parse with no word left
  (an empty line) is a skip sentence. Neither is scored; both are counted.
- A bracket is scored unless it spans no word or its label, cut at the first ``-`` or
  ``=`` (NP-SBJ-1 is NP), is a DELETE_LABEL. Brackets match one to one on span and label
  (``EQ_LABEL ADVP PRT``: the two are one label); tags are compared word for word.
- ``CUTOFF_LEN 40``: figures are also given for the sentences whose gold tree has at most
  40 words, punctuation counted, traces not (``DELETE_LABEL_FOR_LENGTH -NONE-``).
- A line EVALB cannot read (a word outside any ``(TAG word)``) makes it repeat its error
  until ``MAX_ERROR`` stops it; a bracket left open is an error sentence. ``MAX_ERROR 10``
  stops EVALB at its twelfth error message with no summary; parsers' papers raise it
  (``-e``), and so do these figures: `stops_at` says where COLLINS.prm's EVALB would stop.

Where EVALB's behaviour is undefined: a ``)`` with no bracket open (EVALB reads before its
stack) and a line that ends just after a label (it reads past the line's end) make an error
sentence here (a skip sentence without a word); a line beyond its buffers (4,998
characters, 200 words or brackets, 29-character labels, 99-character words) is scored, and
`evalb_text.format_result` names it.

Because error sentences are left out, a parser whose output can be malformed looks better
than it is. `StrictCounts` scores every sentence: an error or skip sentence counts as a
parse with no matching bracket.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

# COLLINS.prm
DELETE_LABELS = frozenset({"TOP", "-NONE-", ",", ":", "``", "''", "."})
DELETE_LABELS_FOR_LENGTH = frozenset({"-NONE-"})
EQUAL_LABELS = frozenset({"ADVP", "PRT"})  # EQ_LABEL ADVP PRT
CUTOFF_LEN = 40
MAX_ERROR = 10

_SPACE = " \t\n\v\f\r"  # C's isspace
_TERMINATOR = re.compile(r"[ \t\n\v\f\r()]")  # a label or word ends here
_NOT_SPACE = re.compile(r"[^ \t\n\v\f\r]")
VALID, ERROR, SKIP = "valid", "error", "skip"


@dataclass
class Reading:
    """One line as EVALB's ``read_line`` reads it."""

    words: list[str] = field(default_factory=list)  # deleted ones left out
    tags: list[str] = field(default_factory=list)
    brackets: list[list] = field(default_factory=list)  # [label, start, end]; end -1: open
    length: int = 0  # words for CUTOFF_LEN
    errors: list[str] = field(default_factory=list)  # EVALB's messages, in order
    unreadable: bool = False  # EVALB repeats "Reading sentence" until MAX_ERROR
    beyond_limits: bool = False  # longer than EVALB's buffers: its behaviour is undefined


def read_line(line: str) -> Reading:
    """``line`` read as EVALB reads it (see the module doc)."""
    r, stack, p, n = Reading(), [], 0, len(line)
    while p < n:
        if line[p] in _SPACE:
            p += 1
        elif line[p] == "(":
            end = _token_end(line, p + 1)
            label, p = line[p + 1 : end], end
            r.beyond_limits = r.beyond_limits or len(label) > 29
            if p < n and line[p] in _SPACE:  # a word may follow: (TAG word)
                found = _NOT_SPACE.search(line, p)
                q = found.start() if found else n
                after = _token_end(line, q)
                r.beyond_limits = r.beyond_limits or after - q > 99
                if after < n and line[after] == ")":
                    r.length += label not in DELETE_LABELS_FOR_LENGTH
                    if label not in DELETE_LABELS:
                        r.words.append(line[q:after])
                        r.tags.append(label)
                    p = after + 1
                    continue
                if q < n and (after == n or line[after] != "("):  # then unreadable
                    r.errors.append("More than two elements in a bracket")
            r.brackets.append([label, len(r.words), -1])
            stack.append(len(r.brackets) - 1)
        elif line[p] == ")":
            if stack:
                r.brackets[stack.pop()][2] = len(r.words)
            else:  # undefined in EVALB: it pops below its stack
                r.errors.append("Bracketing is unbalanced (a ')' closes no bracket)")
            p += 1
        else:
            r.errors.append("Reading sentence")
            r.unreadable = True
            return r
    if stack:
        r.errors.append("Bracketing is unbalanced (too many open bracket)")
    r.beyond_limits = r.beyond_limits or len(line) > 4998 or max(
        len(r.words), len(r.brackets)) > 200  # fmt: skip
    return r


def _token_end(line: str, p: int) -> int:
    """Where the token at ``p`` ends: the next space or bracket, or the line's end."""
    found = _TERMINATOR.search(line, p)
    return found.start() if found else len(line)


def _same_label(a: str, b: str) -> bool:
    return a == b or {a, b} == EQUAL_LABELS


def scored_brackets(reading: Reading) -> list[tuple[str, int, int]]:
    """EVALB's ``massage_data``: the brackets left after zero-width and DELETE_LABEL ones go,
    labels cut at the first - or = (in that order: -NONE- as a bracket is kept, label '')."""
    kept = []
    for label, start, end in reading.brackets:
        cut = label.replace("=", "-").split("-", 1)[0]
        if start != end and cut not in DELETE_LABELS:
            kept.append((cut, start, end))
    return kept


@dataclass
class Sentence:
    """One line pair: EVALB's per-sentence row, and the brackets the strict figure counts."""

    line: int
    status: str  # VALID, ERROR, SKIP
    length: int  # the gold tree's, for CUTOFF_LEN
    gold: int = 0  # scored brackets, where EVALB gets as far as scoring (its row)
    test: int = 0
    matched: int = 0
    crossing: int = 0
    words: int = 0
    tags: int = 0  # correctly tagged words
    errors: list[str] = field(default_factory=list)  # EVALB's Error() calls on this line
    unreadable: bool = False
    beyond_limits: bool = False
    strict_gold: int = 0  # scored brackets whatever the status (0 for an unreadable parse)
    strict_test: int = 0


def compare(gold_line: str, test_line: str, line: int = 1) -> Sentence:
    """EVALB's ``calc_result`` for one pair of lines."""
    g, t = read_line(gold_line), read_line(test_line)
    gold_b = scored_brackets(g)
    test_b = [] if t.unreadable or g.unreadable else scored_brackets(t)
    s = Sentence(line, ERROR, g.length, errors=g.errors + t.errors,
                 unreadable=g.unreadable or t.unreadable, strict_gold=len(gold_b),
                 beyond_limits=g.beyond_limits or t.beyond_limits,
                 strict_test=len(test_b))  # fmt: skip
    if s.unreadable:
        if g.unreadable:
            s.errors = g.errors  # EVALB stops before it reads the parse
        return s
    if not t.words:
        s.status = SKIP
        return s
    if len(g.words) != len(t.words):
        s.errors.append(f"Length unmatch ({len(g.words)}|{len(t.words)})")
        return s
    for a, b in zip(g.words, t.words):
        if a != b:
            s.errors.append(f"Words unmatch ({a}|{b})")
            return s
    s.status = ERROR if s.errors else VALID  # an error in reading: scored, then left out
    s.gold, s.test, s.words = len(gold_b), len(test_b), len(g.words)
    s.matched = _matched(gold_b, test_b)
    s.crossing = sum(any(gs < ts < ge < te or ts < gs < te < ge for _, gs, ge in gold_b)
                     for _, ts, te in test_b)  # fmt: skip
    s.tags = sum(_same_label(a, b) for a, b in zip(g.tags, t.tags))
    return s


def _matched(gold: list[tuple[str, int, int]], test: list[tuple[str, int, int]]) -> int:
    """Each gold bracket takes the first unmatched test bracket of its span and label."""
    free, matched = [True] * len(test), 0
    for label, start, end in gold:
        for j, (other, s, e) in enumerate(test):
            if free[j] and (s, e) == (start, end) and _same_label(label, other):
                free[j], matched = False, matched + 1
                break
    return matched


def recall_precision(matched: int, gold: int, test: int) -> tuple[float, float]:
    """Labeled recall and precision in percent, 0 where there is no bracket (as EVALB)."""
    return (100.0 * matched / gold if gold else 0.0, 100.0 * matched / test if test else 0.0)


@dataclass
class Counts:
    """EVALB's totals over one block of its summary: all sentences, or len <= CUTOFF_LEN."""

    sentences: int = 0
    errors: int = 0
    skips: int = 0
    gold: int = 0
    test: int = 0
    matched: int = 0
    complete: int = 0
    words: int = 0
    tags: int = 0
    crossing: int = 0
    no_crossing: int = 0
    two_or_less_crossing: int = 0

    def add(self, s: Sentence) -> None:
        self.sentences += 1
        if s.status != VALID:
            self.errors += s.status == ERROR
            self.skips += s.status == SKIP
            return
        self.gold, self.test, self.matched = (self.gold + s.gold, self.test + s.test,
                                              self.matched + s.matched)  # fmt: skip
        self.complete += s.gold == s.test == s.matched
        self.words, self.tags = self.words + s.words, self.tags + s.tags
        self.crossing += s.crossing
        self.no_crossing += s.crossing == 0
        self.two_or_less_crossing += s.crossing <= 2

    @property
    def valid(self) -> int:
        return self.sentences - self.errors - self.skips

    def figures(self) -> dict[str, float]:
        """EVALB's figures, unrounded; F1 is NaN where recall and precision are both 0."""
        r, p = recall_precision(self.matched, self.gold, self.test)
        per = (lambda x: 100.0 * x / self.valid) if self.valid else (lambda x: 0.0)
        return {"recall": r, "precision": p, "f1": 2 * p * r / (p + r) if p + r else math.nan,
                "complete_match": per(self.complete),
                "average_crossing": self.crossing / self.valid if self.valid else 0.0,
                "no_crossing": per(self.no_crossing),
                "two_or_less_crossing": per(self.two_or_less_crossing),
                "tagging_accuracy": 100.0 * self.tags / self.words if self.words else 0.0}

    def as_dict(self) -> dict:
        figures = {k: None if math.isnan(v) else round(v, 2) for k, v in self.figures().items()}
        return {"sentences": self.sentences, "error_sentences": self.errors,
                "skip_sentences": self.skips, "valid_sentences": self.valid, **figures,
                "matched": self.matched, "gold_brackets": self.gold,
                "test_brackets": self.test, "words": self.words, "correct_tags": self.tags}


@dataclass
class StrictCounts:
    """Every gold sentence scored: an error or skip sentence, or one with no parse line,
    counts as a parse with no matching bracket (its brackets still count)."""

    gold: int = 0
    test: int = 0
    matched: int = 0

    @property
    def recall(self) -> float:
        return recall_precision(self.matched, self.gold, self.test)[0]

    @property
    def precision(self) -> float:
        return recall_precision(self.matched, self.gold, self.test)[1]

    @property
    def f1(self) -> float:
        r, p = recall_precision(self.matched, self.gold, self.test)
        return 2 * p * r / (p + r) if p + r else 0.0

    def as_dict(self) -> dict:
        return {"recall": round(self.recall, 2), "precision": round(self.precision, 2),
                "f1": round(self.f1, 2), "matched": self.matched, "gold_brackets": self.gold,
                "test_brackets": self.test}  # fmt: skip


@dataclass
class EvalbResult:
    """EVALB's summary (its two blocks), the sentences, the strict figure and where
    COLLINS.prm's EVALB (MAX_ERROR 10) would stop."""

    sentences: list[Sentence]
    all: Counts
    short: Counts  # gold sentences of at most CUTOFF_LEN words
    strict: StrictCounts
    gold_lines: int
    test_lines: int
    stops_at: int | None = None  # the line at which EVALB with MAX_ERROR 10 stops
    line_errors: list[str] = field(default_factory=list)  # the files' line counts differ

    @property
    def unreadable(self) -> list[int]:
        return [s.line for s in self.sentences if s.unreadable]

    def as_dict(self) -> dict:
        return {"evalb": {"all": self.all.as_dict(), f"len<={CUTOFF_LEN}": self.short.as_dict()},
                "strict": self.strict.as_dict(),
                "error_sentences": [{"line": s.line, "errors": s.errors}
                                    for s in self.sentences if s.status == ERROR],
                "unreadable_lines": self.unreadable, "evalb_max_error_stops_at": self.stops_at,
                "lines": {"gold": self.gold_lines, "test": self.test_lines}}  # fmt: skip


def score_lines(gold: Sequence[str], test: Sequence[str]) -> EvalbResult:
    """``evalb -p COLLINS.prm -e <no limit> GOLD TEST`` over the lines of two files."""
    sentences = [compare(g, t, n) for n, (g, t) in enumerate(zip(gold, test), start=1)]
    result = EvalbResult(sentences, Counts(), Counts(), StrictCounts(), len(gold), len(test))
    for s in sentences:
        result.all.add(s)
        if s.length <= CUTOFF_LEN:
            result.short.add(s)
        result.strict.gold += s.strict_gold
        result.strict.test += s.strict_test
        result.strict.matched += s.matched if s.status == VALID else 0
    for line in gold[len(test) :]:  # no parse: nothing matches
        result.strict.gold += len(scored_brackets(read_line(line)))
    if len(gold) != len(test):
        which = "gold" if len(gold) > len(test) else "test"
        result.line_errors = [f"Number of lines unmatch (too many lines in {which} file)"]
    result.stops_at = stops_at(result)
    return result


def stops_at(result: EvalbResult, max_error: int = MAX_ERROR) -> int | None:
    """The line at which EVALB with ``max_error`` exits without a summary, or None: its
    Error() exits on the call that finds more than ``max_error`` calls before it."""
    calls = 0
    for s in result.sentences:
        calls += len(s.errors)
        if s.unreadable or calls > max_error + 1:
            return s.line
    calls += len(result.line_errors)
    return len(result.sentences) + 1 if calls > max_error + 1 else None


def score_trees(gold: Sequence[object], test: Sequence[object | None]) -> EvalbResult:
    """`score_lines` of trees written one a line (``str(tree)``; None: an empty line)."""
    return score_lines([str(t) for t in gold], ["" if t is None else str(t) for t in test])

