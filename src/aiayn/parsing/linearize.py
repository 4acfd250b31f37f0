"""Trees as target sequences, and model output back to trees (sec. 6.3, after [37]).

The paper trains on WSJ parsing as Vinyals & Kaiser et al. 2015, "Grammar as a Foreign
Language" (its reference [37]), did: the source is the sentence's words, the target its
tree written depth first, one token per bracket and per word, words left out::

    words:   John has a dog .
    tree:    (TOP (S (NP (NNP John)) (VP (VBZ has) (NP (DT a) (NN dog))) (. .)))
    target:  (S (NP NNP )NP (VP VBZ (NP DT NN )NP )VP . )S

Exactly: a constituent X is the token ``(X``, its children, then ``)X``; a preterminal is
its tag alone, as in [37] (``tags=False`` writes ``XX`` for every tag: EVALB
does not score tags); the TOP bracket is not written (every tree has one);
tokens are separated by single spaces. Labels are the cleaned ones (`trees.clean`).

Model output may be ill-formed. `delinearize` always returns a tree over exactly the
source words, by these rules, applied left to right to the output's tokens (split at
spaces and before every bracket, so that no label holds one):

1. ``(X`` opens a constituent X; a lone ``(`` is dropped.
2. ``)`` or ``)Y`` closes the innermost open constituent, whatever Y says (its label is
   the opening one's); a close with nothing open is dropped.
3. Any other token is a preterminal and takes the next source word; one with no word
   left is dropped.
4. Source words left when the output ends become ``(XX word)`` children of the innermost
   constituent still open (of TOP when none is); then every open constituent closes.
5. Constituents that hold no word are removed; what is left goes under one TOP node.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from aiayn.parsing.trees import ROOT, Tree

NO_TAG = "XX"
_TOKEN = re.compile(r"[()][^\s()]*|[^\s()]+")


def linearize(tree: Tree, tags: bool = True) -> str:
    """The target sequence of a cleaned tree (see the module doc), TOP left out."""
    nodes = tree.children if tree.label == ROOT else [tree]
    tokens: list[str] = []
    for node in nodes:
        if isinstance(node, Tree):
            _tokens(node, tags, tokens)
    return " ".join(tokens)


def _tokens(node: Tree, tags: bool, out: list[str]) -> None:
    if node.is_preterminal:
        out.append(node.label if tags else NO_TAG)
        return
    out.append(f"({node.label}")
    for child in node.children:
        if isinstance(child, Tree):
            _tokens(child, tags, out)
    out.append(f"){node.label}")


def delinearize(target: str | Sequence[str], words: Sequence[str]) -> Tree:
    """A well-formed tree over exactly ``words`` from a (possibly ill-formed) target."""
    text = target if isinstance(target, str) else " ".join(target)
    tokens = _TOKEN.findall(text)  # "NP(VP" is two tokens: no label holds a bracket
    root = Tree(ROOT)
    stack = [root]  # open constituents, TOP at the bottom (never closed by the output)
    remaining = list(reversed(words))  # next word last
    for token in tokens:
        if token.startswith("("):
            if len(token) > 1:  # rule 1
                node = Tree(token[1:])
                stack[-1].children.append(node)
                stack.append(node)
        elif token.startswith(")"):
            if len(stack) > 1:  # rule 2
                stack.pop()
        elif remaining:  # rule 3
            stack[-1].children.append(Tree(token, [remaining.pop()]))
    while remaining:  # rule 4
        stack[-1].children.append(Tree(NO_TAG, [remaining.pop()]))
    return _prune(root) or Tree(ROOT)  # rule 5


def _prune(node: Tree) -> Tree | None:
    """``node`` without the constituents that hold no word (None if it holds none)."""
    if node.is_preterminal:
        return node
    children = [c for c in (_prune(c) for c in node.children if isinstance(c, Tree)) if c]
    return Tree(node.label, children) if children else None
