"""`aiayn parse` and `aiayn evaluate --task parse`: a checkpoint's trees, and their scores.

Parsing is translation into linearized trees (sec. 6.3): `Translator` runs the beam search
with the checkpoint's decode settings (the paper's parsing recipe: beam 21, alpha 0.3,
maximum output length input + 300, `configs/wsj_parsing.yaml`), and `delinearize` turns
each output into a well-formed tree over exactly the input's words, with the model's
attention saying which word each tag is for.

Scores are EVALB's (`evalb.py`): the parses are read as EVALB reads its test file, a line
each, whatever a line holds (a malformed or empty one is an error or skip sentence, and the
run goes on); the gold trees as it reads its gold file.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

from aiayn.alignment import word_attention
from aiayn.data.corpus import read_lines as raw_lines
from aiayn.errors import DataError
from aiayn.evaluate import read_lines
from aiayn.parsing.evalb import score_lines
from aiayn.parsing.evalb_text import format_result
from aiayn.parsing.linearize import delinearize
from aiayn.parsing.trees import Tree, balanced, tree_texts, treebank_files
from aiayn.translate import Translator


def parse(translator: Translator, sentences: Sequence[str]) -> list[Tree | None]:
    """One tree per tokenized sentence (words split on spaces); None for a blank line.

    The repair (`delinearize`) is given the encoder-decoder attention of each output token
    on the sentence's words (`alignment.word_attention`: one teacher-forced pass over the
    found outputs, its default layer and heads), so that a dropped tag is put back where
    the model looked, not at the sentence's end."""
    t = translator
    sources = t.encode(list(sentences))
    outputs = [hyps[0].tokens if hyps else [] for hyps in t.hypotheses_of(sources)]
    attention = word_attention(t.model, t.src_vocab, t.tgt_vocab, list(zip(sources, outputs)),
                               max_tokens=t.max_tokens)  # fmt: skip
    trees: list[Tree | None] = []
    for sentence, out, weights in zip(sentences, outputs, attention):
        target, words = t.tgt_vocab.decode(out), sentence.split()
        # (output words, sentence words) unless the vocabulary spells words otherwise (a
        # normalized character, say): then order alone
        fits = tuple(weights.shape) == (len(target.split()), len(words))
        trees.append(delinearize(target, words, weights.tolist() if fits else None)
                     if sentence.strip() else None)  # fmt: skip
    return trees


def tree_lines(trees: Sequence[Tree | None]) -> list[str]:
    """One line per tree; an empty line for a blank input."""
    return [str(tree) if tree is not None else "" for tree in trees]


def reference_lines(path: str | Path) -> list[str]:
    """The gold trees of ``path``, one a line, as EVALB reads its gold file.

    A treebank's layout (a ``.mrg`` file or a directory of them; any file whose trees run
    over several lines) gives each tree on one line, unchanged otherwise. Any other file is
    read a line at a time, as EVALB reads it: a blank or malformed line is a sentence."""
    lines: list[str] = []
    for file in treebank_files(path):
        found = [line.rstrip() for line in raw_lines(file)]
        text = "\n".join(found)
        if file.name.endswith((".mrg", ".mrg.gz")) or (
                not all(map(balanced, found)) and balanced(text)):  # fmt: skip
            found = tree_texts(text, str(file))
            if not found:
                raise DataError(f"{file}: holds no tree")
        lines += found
    return lines


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


def evaluate_parse(ref: str | Path, hyp: str | Path | None = None,
                   src: str | Path | None = None,
                   translator: Callable[[], Translator] | None = None,
                   hyp_out: str | Path | None = None, as_json: bool = False) -> str:  # fmt: skip
    """`aiayn evaluate --task parse`: the parses of ``hyp`` (or of ``src``'s sentences by
    ``translator()``, written to ``hyp_out`` if given) scored against ``ref`` as EVALB
    scores them, with the strict figure beside; the text ends with ``F1 <strict F1>``."""
    gold = reference_lines(ref)
    if hyp is not None:
        parses = read_lines(hyp)
    else:
        assert src is not None and translator is not None
        sentences = read_lines(src)
        blank = [n for n, s in enumerate(sentences, start=1) if not s.strip()]
        if blank:
            raise DataError(f"{src}: line {blank[0]}: blank; each line needs a sentence")
        if len(sentences) != len(gold):  # before parsing, not after minutes of it
            raise DataError(f"{src} has {len(sentences)} sentences but {ref} has "
                            f"{len(gold)} trees: each sentence needs one gold tree")  # fmt: skip
        parses = tree_lines(parse(translator(), sentences))
        if hyp_out:
            Path(hyp_out).write_text("".join(t + "\n" for t in parses), encoding="utf-8")
    result = score_lines(gold, parses)
    return json.dumps(result.as_dict()) if as_json else format_result(result)
