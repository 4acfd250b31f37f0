"""`aiayn parse` and `aiayn evaluate --task parse`: a checkpoint's trees, and their scores.

Parsing is translation into linearized trees (sec. 6.3): `Translator` runs the beam search
with the checkpoint's decode settings (the paper's parsing recipe: beam 21, alpha 0.3,
maximum output length input + 300, `configs/wsj_parsing.yaml`), and `delinearize` turns
each output into a well-formed tree over exactly the input's words.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from aiayn.errors import DataError
from aiayn.evaluate import read_lines
from aiayn.parsing.evalb import EvalbResult, score_trees
from aiayn.parsing.linearize import delinearize
from aiayn.parsing.trees import Tree, parse_trees, read_trees
from aiayn.translate import Translator


def parse(translator: Translator, sentences: Sequence[str]) -> list[Tree | None]:
    """One tree per tokenized sentence (words split on spaces); None for a blank line."""
    targets = translator.translate(list(sentences))
    return [delinearize(target, sentence.split()) if sentence.strip() else None
            for sentence, target in zip(sentences, targets)]  # fmt: skip


def tree_lines(trees: Sequence[Tree | None]) -> list[str]:
    """One line per tree; an empty line for a blank input."""
    return [str(tree) if tree is not None else "" for tree in trees]


def read_tree_lines(path: str | Path) -> list[Tree]:
    """A file of one tree per line, each line exactly one tree (so lines stay aligned)."""
    trees = []
    for line_no, line in enumerate(read_lines(path), start=1):
        found = parse_trees(line, str(path), line_no)
        if len(found) != 1:
            what = "no tree" if not found else f"{len(found)} trees"
            raise DataError(f"{path}: line {line_no}: {what}; expected one tree per line")
        trees.append(found[0])
    return trees


def score_against(ref: str | Path, hyps: Sequence[Tree]) -> EvalbResult:
    """EVALB-style scores of ``hyps`` against the trees of ``ref`` (a file in any layout,
    e.g. a treebank's .mrg, or a directory of them)."""
    gold = read_trees(ref)
    if len(gold) != len(hyps):
        raise DataError(f"{ref} has {len(gold)} trees but there are {len(hyps)} parses")
    return score_trees(gold, hyps)


def parse_files(translator: Translator, input: str | None, output: str | None) -> int:
    """`aiayn parse`: the sentences of `input` (None: stdin), one tree per line into `output`
    (None: stdout; a file is replaced only once every line is done); -> lines written."""
    import sys

    from aiayn.outfile import AtomicOutput, refuse_output_among_inputs

    refuse_output_among_inputs(output, input)
    if input is not None:
        sentences = read_lines(input)
    else:
        sentences = [line.rstrip("\n") for line in sys.stdin]
    lines = tree_lines(parse(translator, sentences))
    with AtomicOutput(output) as out:
        out.handle.write("".join(line + "\n" for line in lines))
    return len(lines)


def evaluate_parses(
    ref: str | Path, hyp: str | Path | None = None, src: str | Path | None = None,
    translator: Callable[[], Translator] | None = None, hyp_out: str | Path | None = None,
) -> EvalbResult:
    """`aiayn evaluate --task parse`: the trees of `hyp`, or the sentences of `src` parsed
    with `translator()` (then also written to `hyp_out`), scored against the trees of `ref`."""
    if hyp is not None:
        hyps = read_tree_lines(hyp)
    else:
        sentences = read_lines(src)
        blank = [n for n, s in enumerate(sentences, start=1) if not s.strip()]
        if blank:
            raise DataError(f"{src}: line {blank[0]}: blank; each line needs a sentence")
        hyps = parse(translator(), sentences)
        if hyp_out:
            Path(hyp_out).write_text("".join(t + "\n" for t in tree_lines(hyps)), "utf-8")
    return score_against(ref, hyps)
