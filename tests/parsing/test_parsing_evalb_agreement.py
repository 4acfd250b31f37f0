"""`aiayn.parsing.evalb` against EVALB itself: its C source, compiled here, run with
COLLINS.prm on its own sample files and on thousands of generated tree pairs (moved
brackets, relabelled nodes, retagged words, punctuation tags given and taken, words dropped,
added and changed, malformed and empty lines). Every figure of the summary, every
per-sentence row, and the line where MAX_ERROR 10 stops EVALB must be EVALB's."""

from __future__ import annotations

import random
import re
import shutil
import subprocess

import pytest

from aiayn.cli import main
from aiayn.parsing.evalb import CUTOFF_LEN, ERROR, SKIP, VALID, Sentence, score_lines
from aiayn.parsing.evalb_text import summary_block
from conftest import SHARED_DATA

EVALB = SHARED_DATA / "evalb"
pytestmark = pytest.mark.skipif(not (EVALB / "evalb.c").is_file(),
                                reason=f"no EVALB source at {EVALB}")


@pytest.fixture(scope="module")
def evalb(tmp_path_factory):
    """``run(gold_lines, test_lines, *options)``: the compiled EVALB's stdout."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc) to build EVALB with")
    folder = tmp_path_factory.mktemp("evalb")
    exe = folder / "evalb"
    subprocess.run(["cc", "-O1", "-o", str(exe), str(EVALB / "evalb.c")], check=True,
                   capture_output=True)  # fmt: skip

    def run(gold: list[str], test: list[str], *options: str) -> str:
        for name, lines in (("gold", gold), ("test", test)):
            (folder / name).write_text("".join(line + "\n" for line in lines))
        return subprocess.run([str(exe), "-p", str(EVALB / "COLLINS.prm"), *options,
                               str(folder / "gold"), str(folder / "test")],
                              capture_output=True, text=True, timeout=60).stdout  # fmt: skip

    return run


def sample() -> tuple[list[str], list[str]]:
    read = lambda name: (EVALB / name).read_text().split("\n")[:-1]  # noqa: E731
    return read("sample.gld"), read("sample.tst")


def summary(stdout: str) -> list[str]:
    """EVALB's two summary blocks; its 0/0 F1 prints as -nan."""
    lines = stdout.replace("  -nan", "   nan").splitlines()
    return [line for line in lines[lines.index("-- All --"):] if line]


def ours(result) -> list[str]:
    return summary_block("All", result.all) + summary_block(f"len<={CUTOFF_LEN}", result.short)


ROW = re.compile(r"\s*\d+\s+\d+\s+\d\s")


def rows(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if ROW.match(line)]


def row(s: Sentence) -> str:
    """EVALB's per-sentence row (its ``individual_result``)."""
    r = 100.0 * s.matched / s.gold if s.gold else 0.0
    p = 100.0 * s.matched / s.test if s.test else 0.0
    tags = 100.0 * s.tags / s.words if s.words else 0.0
    status = {VALID: 0, ERROR: 1, SKIP: 2}[s.status]
    return (f"{s.line:4d}  {s.length:3d}    {status}  {r:6.2f} {p:6.2f}   {s.matched:3d}    "
            f"{s.gold:3d}  {s.test:3d}    {s.crossing:3d}   {s.words:4d}  {s.tags:4d}   {tags:6.2f}")


def test_evalbs_sample_files_give_evalbs_published_figures(evalb):
    result = score_lines(*sample())
    a, figures = result.all, result.all.figures()
    assert (a.sentences, a.errors, a.skips, a.valid) == (24, 6, 2, 16)
    assert (a.matched, a.gold, a.test) == (82, 94, 91)
    assert [f"{figures[k]:.2f}" for k in ("recall", "precision", "f1", "complete_match")] == [
        "87.23", "90.11", "88.65", "50.00"]
    assert (f"{figures['tagging_accuracy']:.2f}", a.tags, a.words) == ("97.12", 101, 104)
    stdout = evalb(*sample())
    assert summary(stdout) == ours(result)
    assert rows(stdout) == [row(s) for s in result.sentences]


def test_the_cli_prints_evalbs_summary_for_the_sample_files(tmp_path, capsys):
    gold, test = tmp_path / "sample.gld", tmp_path / "sample.tst"
    gold.write_text((EVALB / "sample.gld").read_text())
    test.write_text((EVALB / "sample.tst").read_text())
    assert main(["evaluate", "--task", "parse", "--ref", str(gold), "--hyp", str(test)]) == 0
    out = capsys.readouterr().out
    assert "Number of Error sentence  =      6" in out and "12 : Words unmatch (is|was)" in out
    assert "Bracketing FMeasure       =  88.65" in out
    assert out.splitlines()[-1].startswith("F1 ")


COMMA = "(TOP (S (NP (DT the) (NN man)) (, ,) (VP (VBZ sees) (NP (DT the) (NN dog))) (. .)))"


def test_the_comma_tagged_nn_is_an_error_sentence_for_both(evalb):
    gold, test = [COMMA], [COMMA.replace("(, ,)", "(NN ,)")]
    assert summary(evalb(gold, test)) == ours(score_lines(gold, test))


# Generated tree pairs: labels, tags and words chosen to hit every rule.
LABELS = ["S", "NP", "VP", "PP", "ADVP", "PRT", "NP-SBJ", "NP-SBJ-1", "VP=2", "TOP", "-NONE-", ""]
TAGS = ["NN", "DT", "VB", "RB", ",", ".", ":", "``", "''", "-NONE-", "TOP", "PRT", "ADVP", "NN-1"]
WORDS = ["a", "b", "c", ",", ".", "the", "*", "x-y"]


def bracketed(rng: random.Random, items: list) -> list:
    """A random tree over ``items`` (leaves [tag, word] or subtrees [label, children])."""
    children, i = [], 0
    while i < len(items):
        k = rng.randint(1, len(items) - i)
        chunk = items[i : i + k]
        one = len(chunk) == 1 and rng.random() < 0.7
        children.append(chunk[0] if one else bracketed(rng, chunk) if k > 1 or
                        rng.random() < 0.5 else [rng.choice(LABELS), chunk])  # fmt: skip
        i += k
    return [rng.choice(LABELS), children]


def text(tree: list) -> str:
    label, rest = tree
    return f"({label} {rest})" if isinstance(rest, str) else \
        f"({label} {' '.join(text(c) for c in rest)})"  # fmt: skip


def parse_of(rng: random.Random, leaves: list, gold: list) -> str:
    leaves = [list(leaf) for leaf in leaves]
    change = rng.random()
    if change < 0.15:
        rng.choice(leaves)[0] = rng.choice(TAGS)  # retagged, punctuation tags included
    elif change < 0.2 and len(leaves) > 1:
        leaves.pop(rng.randrange(len(leaves)))
    elif change < 0.25:
        leaves.insert(rng.randrange(len(leaves) + 1), [rng.choice(TAGS), rng.choice(WORDS)])
    elif change < 0.3:
        rng.choice(leaves)[1] = rng.choice(WORDS)
    elif rng.random() < 0.3:
        return text(gold)
    line = text(bracketed(rng, leaves))  # brackets moved, nodes relabelled
    damage = rng.random()
    if damage < 0.04:
        return ""
    if damage < 0.08:
        return line[:-1]  # a bracket left open
    if damage < 0.1:
        return f"{line} {line}"  # two trees on one line
    return line


def pairs(rng: random.Random, n: int) -> tuple[list[str], list[str]]:
    gold, test = [], []
    for _ in range(n):
        k = rng.choice([0, 1, 2, 3, 5, 8, 12, rng.randint(38, 45)])
        leaves = [[rng.choice(TAGS), rng.choice(WORDS)] for _ in range(k)]
        tree = bracketed(rng, leaves) if leaves else None
        gold.append(text(tree) if tree else "")
        test.append(parse_of(rng, leaves, tree) if tree else rng.choice(["", "(S (NN a))"]))
    return gold, test


def test_thousands_of_generated_pairs_score_as_evalb_scores_them(evalb):
    gold, test = pairs(random.Random(0), 1500)
    result = score_lines(gold, test)
    assert result.unreadable == []  # EVALB would repeat its error a million times
    assert {s.status for s in result.sentences} == {VALID, ERROR, SKIP}
    assert min(result.all.errors, result.all.skips, result.all.valid) > 200
    assert sum(s.crossing > 0 for s in result.sentences) > 100
    assert sum(s.length > CUTOFF_LEN for s in result.sentences) > 20
    assert sum(s.status == ERROR and s.words > 0 for s in result.sentences) > 20  # unbalanced
    stdout = evalb(gold, test, "-e", "1000000")  # after -p: MAX_ERROR raised
    assert rows(stdout) == [row(s) for s in result.sentences]
    assert summary(stdout) == ours(result)


def test_evalb_with_max_error_10_stops_where_predicted(evalb):
    rng, stopped = random.Random(1), 0
    for _ in range(25):
        gold, test = pairs(rng, rng.randint(5, 40))
        for i in rng.sample(range(len(test)), 3):  # errors, and lines EVALB cannot read
            test[i] = rng.choice([test[i].replace(")", "", 1), "word " + test[i],
                                  gold[i][:-1], test[i] + " (X y)"])  # fmt: skip
        if rng.random() < 0.3:
            test = test[: rng.randint(1, len(test))]
        result, stdout = score_lines(gold, test), evalb(gold, test)
        if "=== Summary ===" in stdout:
            assert result.stops_at is None and summary(stdout) == ours(result)
        else:
            done = rows(stdout)
            assert result.stops_at == (int(done[-1].split()[0]) + 1 if done else 1)
            stopped += 1
    assert 5 < stopped < 25
