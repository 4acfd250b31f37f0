"""`aiayn prepare parse`: treebanks in, the usual prepared directory out (sec. 6.3).

Each tree is cleaned (`trees.clean`) and becomes one sentence pair: source its words,
target its linearization (`linearize`). The pairs go through the ordinary `prepare` (joint
BPE over words and tree tokens, token shards), with "words" and "tree" as the two
languages, so training, averaging and decoding are the translation pipeline unchanged.
One change to the BPE: a piece may join a bracket to its label (``split_by_script`` off),
so that each of the target's tree tokens, ``(NP`` and ``)NP``, is one piece as in [37];
sentencepiece's default cuts every one in two (``(`` + ``NP``), which makes the target
1.6 times longer and has the model spell out each closing label.
Beside the shards, ``OUT/parse/`` keeps the text of every split: ``SPLIT.words`` (input for
`aiayn parse`), ``SPLIT.tree`` (targets) and ``SPLIT.gold`` (the cleaned trees, for
`aiayn evaluate --task parse`).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from dataclasses import replace

from aiayn.data.prepare import prepare
from aiayn.data.prepare_options import NO_CLEANING, PrepareOptions
from aiayn.errors import DataError
from aiayn.parsing.linearize import linearize
from aiayn.parsing.trees import Tree, clean, read_trees, with_root, write_trees

SRC, TGT = "words", "tree"
PAPER_VOCAB = 16000  # "a vocabulary of 16K tokens for the WSJ only setting" (sec. 6.3)
# Trees are no crawled text: the cleaning filters (letters, languages, duplicates) stay off.
OPTIONS = PrepareOptions(vocab_size=PAPER_VOCAB, src=SRC, tgt=TGT, split_by_script=False,
                         clean=NO_CLEANING)  # fmt: skip


def cleaned_trees(path: str | Path) -> list[Tree]:
    """The cleaned trees of a treebank file or directory, each under TOP; a tree with no
    word left after removing traces is an error (it would shift every later line)."""
    trees = []
    for i, tree in enumerate(read_trees(path), start=1):
        kept = clean(tree)
        if kept is None:
            raise DataError(f"{path}: tree {i} holds only traces (-NONE-), no words")
        trees.append(with_root(kept))
    return trees


def write_split(trees: list[Tree], prefix: Path, tags: bool = True) -> None:
    """PREFIX.words, PREFIX.tree and PREFIX.gold for one split."""
    prefix.with_suffix(f".{SRC}").write_text(
        "".join(" ".join(t.words()) + "\n" for t in trees), encoding="utf-8")
    prefix.with_suffix(f".{TGT}").write_text(
        "".join(linearize(t, tags) + "\n" for t in trees), encoding="utf-8")
    write_trees(trees, prefix.with_suffix(".gold"))


def prepare_parse(
    *,
    train: str | Path,
    valid: str | Path,
    test: str | Path | None = None,
    out: str | Path,
    options: PrepareOptions = OPTIONS,
    tags: bool = True,
) -> dict:
    """Read, clean and linearize the treebanks, then `prepare` them with `options` (the
    sides' names are this module's: words in, linearized trees out); returns the manifest."""
    splits = {"train": train, "valid": valid, "test": test}
    trees = {name: cleaned_trees(path) for name, path in splits.items() if path is not None}
    out = Path(out)
    with tempfile.TemporaryDirectory(prefix="aiayn-parse-") as tmp:
        text = Path(tmp)
        for name, split in trees.items():
            write_split(split, text / name, tags)
        prefixes = {name: text / name if name in trees else None for name in splits}
        manifest = prepare(**prefixes, out=out, options=replace(options, src=SRC, tgt=TGT))
        shutil.copytree(text, out / "parse", dirs_exist_ok=True)
    return manifest
