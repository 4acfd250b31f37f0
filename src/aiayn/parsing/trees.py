"""Penn Treebank bracketed trees: read, clean, write (the data of sec. 6.3).

A tree is ``(LABEL child child ...)``; a preterminal is ``(TAG word)``. Files are either
the treebank's ``.mrg`` files (trees spread over several lines, the outer bracket without a
label, ``( (S ...) )``) or one tree per line; both are read by the same tokenizer, so any
mix of layouts works. The unlabeled outer bracket is read as ``TOP``, the name EVALB's
COLLINS.prm deletes. Errors (an unbalanced bracket, an empty tree, a word outside any
tree) name the file and the line.

`clean` prepares a gold tree for training as Vinyals & Kaiser et al. 2015 did: function
tags and co-indices go (``NP-SBJ-1`` -> ``NP``), traces (``-NONE-``) go, and so do the
constituents they leave empty.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from aiayn.data.corpus import read_lines
from aiayn.errors import DataError

ROOT = "TOP"
TRACE = "-NONE-"
_TOKEN = re.compile(r"\(|\)|[^\s()]+")
_SPACES = re.compile(r"[ \t\n\v\f\r]+")  # C's isspace: what separates EVALB's tokens


@dataclass
class Tree:
    """A constituent: a label and children, each a subtree or (for a preterminal) a word."""

    label: str
    children: list[Tree | str] = field(default_factory=list)

    @property
    def is_preterminal(self) -> bool:
        return len(self.children) == 1 and isinstance(self.children[0], str)

    def preterminals(self) -> Iterator[Tree]:
        """The (TAG word) nodes, left to right."""
        if self.is_preterminal:
            yield self
            return
        for child in self.children:
            if isinstance(child, Tree):
                yield from child.preterminals()

    def words(self) -> list[str]:
        return [p.children[0] for p in self.preterminals()]  # type: ignore[misc]

    def tags(self) -> list[str]:
        return [p.label for p in self.preterminals()]

    def __str__(self) -> str:
        """One line: ``(S (NP (DT The) (NN dog)) (VP (VBZ sleeps)) (. .))``."""
        inner = " ".join(str(c) for c in self.children)
        return f"({self.label} {inner})" if inner else f"({self.label})"


def parse_trees(text: str, where: str = "<text>", first_line: int = 1) -> list[Tree]:
    """Every tree in ``text``; ``where`` and ``first_line`` name the place in errors."""
    trees: list[Tree] = []
    stack: list[tuple[Tree, int]] = []  # open constituents with the line they opened on
    pending_label = False  # the token after "(" is the label
    for line_no, line in enumerate(text.split("\n"), start=first_line):
        for token in _TOKEN.findall(line):
            if token == "(":
                node = Tree("")  # "((": the outer one keeps no label (ROOT, when closed)
                if stack:
                    stack[-1][0].children.append(node)
                stack.append((node, line_no))
                pending_label = True
            elif token == ")":
                if not stack:
                    raise DataError(f"{where}: line {line_no}: ')' closes no open bracket")
                node, opened = stack.pop()
                pending_label = False
                _check_node(node, where, opened)
                if not stack:
                    trees.append(node)
            elif pending_label:
                stack[-1][0].label, pending_label = token, False
            elif not stack:
                raise DataError(f"{where}: line {line_no}: {token!r} is outside any tree")
            else:
                stack[-1][0].children.append(token)
    if stack:
        raise DataError(f"{where}: line {stack[0][1]}: the tree opened here is never closed")
    return trees


def _check_node(node: Tree, where: str, line: int) -> None:
    if not node.children:
        raise DataError(f"{where}: line {line}: empty tree '({node.label})'")
    if not node.label:
        node.label = ROOT  # "( (S ...) )": the treebank's unlabeled outer bracket
    words = [c for c in node.children if isinstance(c, str)]
    if words and len(node.children) > 1:
        raise DataError(
            f"{where}: line {line}: ({node.label} ...) mixes the word {words[0]!r} with "
            "constituents; a word needs its own (TAG word) bracket"
        )


def treebank_files(path: str | Path) -> list[Path]:
    """``path``, or every ``*.mrg`` under it in name order if it is a directory (e.g. a
    treebank section); a directory without one is an error."""
    path = Path(path)
    files = sorted(path.rglob("*.mrg")) if path.is_dir() else [path]
    if not files:
        raise DataError(f"{path}: a directory without .mrg files")
    return files


def read_trees(path: str | Path) -> list[Tree]:
    """The trees of a file (UTF-8, plain or .gz), or of every ``*.mrg`` under a directory in
    name order (e.g. a treebank section). An input without a tree is an error."""
    trees: list[Tree] = []
    for file in treebank_files(path):
        found = parse_trees("\n".join(read_lines(file)), str(file))
        if not found:
            raise DataError(f"{file}: holds no tree")
        trees.extend(found)
    return trees


def tree_texts(text: str, where: str = "<text>") -> list[str]:
    """The text of each tree in ``text`` on one line, for EVALB: line breaks and runs of
    spaces become one space, and the treebank's unlabeled outer bracket, ``( (S``, is named
    TOP as `parse_trees` names it (COLLINS.prm deletes TOP; it would score a bracket without
    a label); nothing else changes. Errors as `parse_trees`' for a bracket never closed, a
    ``)`` that closes nothing and a word outside any tree."""
    found: list[str] = []
    depth, opened, start = 0, 0, 0
    lines = text.split("\n")
    flat = " ".join(lines)
    line_of = [n for n, line in enumerate(lines, start=1) for _ in range(len(line) + 1)]
    for i, char in enumerate(flat):
        if char == "(":
            if depth == 0:
                start, opened = i, line_of[i]
            depth += 1
        elif char == ")":
            if depth == 0:
                raise DataError(f"{where}: line {line_of[i]}: ')' closes no open bracket")
            depth -= 1
            if depth == 0:
                tree = _SPACES.sub(" ", flat[start : i + 1])
                found.append(f"({ROOT}{tree[1:]}" if tree[1] in " ()" else tree)
        elif depth == 0 and char not in " \t\v\f\r":
            word = flat[i:].split()[0].split("(")[0]
            raise DataError(f"{where}: line {line_of[i]}: {word!r} is outside any tree")
    if depth:
        raise DataError(f"{where}: line {opened}: the tree opened here is never closed")
    return found


def balanced(text: str) -> bool:
    """Whether every ``(`` in ``text`` is closed and every ``)`` closes one."""
    depth = 0
    for char in text:
        depth += (char == "(") - (char == ")")
        if depth < 0:
            return False
    return depth == 0


def base_label(label: str) -> str:
    """The category without function tags or indices: NP-SBJ-1 -> NP, NP=2 -> NP; labels
    that start with '-' (-NONE-, -LRB-) are kept whole."""
    if label.startswith("-"):
        return label
    return re.split(r"[-=|]", label, maxsplit=1)[0] or label


def clean(tree: Tree) -> Tree | None:
    """A copy without traces, function tags, or constituents left empty (None if nothing is
    left): the trees a parser is trained on and outputs."""
    if tree.is_preterminal:
        return None if tree.label == TRACE else Tree(tree.label, list(tree.children))
    children = [c for c in (clean(c) for c in tree.children if isinstance(c, Tree)) if c]
    return Tree(base_label(tree.label), children) if children else None


def with_root(tree: Tree) -> Tree:
    """``tree`` under a TOP node, unless it is one already."""
    return tree if tree.label == ROOT else Tree(ROOT, [tree])


def write_trees(trees: Iterable[Tree], path: str | Path) -> int:
    """One tree per line (UTF-8); returns how many were written."""
    lines = [f"{tree}\n" for tree in trees]
    Path(path).write_text("".join(lines), encoding="utf-8")
    return len(lines)
