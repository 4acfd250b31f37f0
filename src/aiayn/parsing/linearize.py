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
2. ``)Y`` closes the innermost open constituent labelled Y and every one inside it; ``)``,
   or ``)Y`` with no Y open, closes the innermost; a close with nothing open is dropped.
   The label counts because a model's closings go wrong in their number, not their
   labels: having learnt that ``)Y`` follows the last child of Y, a small one drops the
   second of two equal closings (``)VP )VP )S`` as ``)VP )S``); ``)S`` then still closes
   the S, the VP it holds with it, where closing only the innermost would leave the S
   open and put all that follows inside it (chosen on the parse demo's dev split, where
   it scores better than closing the innermost whatever Y says).
3. Any other token is a preterminal slot. Slots and source words are aligned in order,
   leaving the fewest slots and words over, so that EVALB, which
   deletes the words its punctuation tags carry (, : `` '' .; and -NONE-, TOP) from each
   tree, reads the same words in the parse as in the gold tree: a word that is not
   punctuation (`is_punctuation`) never takes such a tag, and a word the treebank always
   tags as punctuation (`PUNCTUATION_TAG`: , . ? ! ; : -- ... `` '') never takes another.
   A slot left without a word goes. Among the alignments that leave as few over, the one
   whose pairs the model attended to most (`attention`: each target word's encoder-decoder
   weight on each source word, `alignment.word_attention`); without it, the earliest pairs.
   A model most often drops the second of two equal tags (``NN NN`` as ``NN``), and the
   slots after it still look at their own words, so the attention says which word lost its
   slot where order alone gives it to the last word and shifts every slot in between
   (chosen on the parse demo's dev split, where the last decoder layer's heads averaged,
   `alignment`'s default, did better than order alone and than the first layer's).
4. A word left without a slot becomes ``(XX word)``, or ``(TAG word)`` with its
   `PUNCTUATION_TAG`, right after the word before it, in that word's constituent (a model
   most often drops the last word of a phrase: "a house key" as ``DT NN``); one before
   every aligned word goes just before the first, and with no aligned word at all, the
   words go in the innermost constituent open at the end (of TOP when none is). Then every
   open constituent closes.
5. Constituents that hold no word are removed; what is left goes under one TOP node.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Sequence

from aiayn.parsing.evalb import DELETE_LABELS
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


def delinearize(target: str | Sequence[str], words: Sequence[str],
                attention: Sequence[Sequence[float]] | None = None) -> Tree:  # fmt: skip
    """A well-formed tree over exactly ``words`` from a (possibly ill-formed) target;
    ``attention[t][j]``: the model's attention from the target's t-th space-separated token
    to word j (rule 3's tie-break)."""
    text = target if isinstance(target, str) else " ".join(target)
    tokens, slot_rows = [], []  # slot_rows: each slot's space-separated token
    for row, chunk in enumerate(text.split()):
        for token in _TOKEN.findall(chunk):  # "NP(VP" is two tokens: no label holds a bracket
            tokens.append(token)
            if not token.startswith(("(", ")")):
                slot_rows.append(row)
    slots = [t for t in tokens if not t.startswith(("(", ")"))]
    if attention is not None and (len(attention) != len(text.split())
                                  or any(len(row) != len(words) for row in attention)):
        raise ValueError(f"attention must be (output tokens, words) = "
                         f"({len(text.split())}, {len(words)})")  # fmt: skip
    weights = None if attention is None else [attention[row] for row in slot_rows]
    taken = align(slots, words, weights)  # slot -> its word's index, or None (rule 3)
    aligned = {i for i in taken if i is not None}
    first = min(aligned, default=None)
    loose: dict[int | None, list[Tree]] = {}  # aligned word -> words after it (rule 4)
    before = None  # None: before the first aligned word, or no word aligned
    for i, word in enumerate(words):
        if i in aligned:
            before = i
        else:
            tag = PUNCTUATION_TAG.get(word, NO_TAG)
            loose.setdefault(before, []).append(Tree(tag, [word]))
    root = Tree(ROOT)
    stack = [root]  # open constituents, TOP at the bottom (never closed by the output)
    slot = 0
    for token in tokens:
        if token.startswith("("):
            if len(token) > 1:  # rule 1
                node = Tree(token[1:])
                stack[-1].children.append(node)
                stack.append(node)
        elif token.startswith(")"):  # rule 2
            labels = [node.label for node in stack[1:]]
            if token[1:] in labels:  # the innermost open one so labelled, and all inside it
                del stack[len(labels) - labels[::-1].index(token[1:]) :]
            elif len(stack) > 1:
                stack.pop()
        else:
            i, slot = taken[slot], slot + 1
            if i is not None:
                head = loose.pop(None, []) if i == first else []
                stack[-1].children += [*head, Tree(token, [words[i]]), *loose.pop(i, [])]
    stack[-1].children += loose.pop(None, [])  # rule 4, no word aligned
    return _prune(root) or Tree(ROOT)  # rule 5


# The Penn Treebank's tag for the words it always tags as punctuation (its tagging
# guidelines): the tag a repaired tree gives them when the model's output left them no slot.
PUNCTUATION_TAG = {",": ",", ".": ".", "?": ".", "!": ".", ";": ":", ":": ":", "--": ":",
                   "...": ":", "``": "``", "''": "''"}  # fmt: skip


def is_punctuation(word: str) -> bool:
    """A word of punctuation characters only: Unicode's (categories P*) and the backtick
    of the treebank's opening quote. So ``,`` ``.`` ``--`` ``...`` ``''`` and two backticks
    are; ``'s``, ``$`` and ``3.5`` are not."""
    return bool(word) and all(c == "`" or unicodedata.category(c)[0] == "P" for c in word)


def align(slots: Sequence[str], words: Sequence[str],
          attention: Sequence[Sequence[float]] | None = None) -> list[int | None]:  # fmt: skip
    """For each slot, the index of its word (None: dropped), in order, leaving the fewest
    slots and words over, where no word that is not punctuation goes in a slot EVALB
    deletes and no word of `PUNCTUATION_TAG` in another. Of the alignments that leave as
    few over, the one with the most attention on its pairs (``attention[i][j]`` in [0, 1]:
    slot i's on word j), else the earliest (an output with every slot right aligns one to
    one either way)."""
    m, n = len(slots), len(words)
    deleting = [s in DELETE_LABELS for s in slots]
    may = [is_punctuation(w) for w in words]  # may be deleted
    must = [w in PUNCTUATION_TAG for w in words]  # must be deleted

    def cost(i: int, j: int) -> float:
        if not (may[j] if deleting[i] else not must[j]):
            return math.inf
        # at most 1 / (m + 1) a pair, under 1 in all: one more left over always costs more
        return 0.0 if attention is None else -float(attention[i][j]) / (m + 1)

    # rest[i][j]: the least cost of aligning slots[i:] with words[j:]
    rest = [[float(m - i + n - j) for j in range(n + 1)] for i in range(m + 1)]
    for i in range(m - 1, -1, -1):
        for j in range(n - 1, -1, -1):
            rest[i][j] = min(cost(i, j) + rest[i + 1][j + 1], 1 + rest[i + 1][j],
                             1 + rest[i][j + 1])  # fmt: skip
    taken: list[int | None] = []
    i = j = 0
    while i < m:
        if j < n and rest[i][j] == cost(i, j) + rest[i + 1][j + 1]:
            taken.append(j)
            j += 1
        elif j == n or rest[i][j] == 1 + rest[i + 1][j]:
            taken.append(None)
        else:
            j += 1
            continue
        i += 1
    return taken


def _prune(node: Tree) -> Tree | None:
    """``node`` without the constituents that hold no word (None if it holds none)."""
    if node.is_preterminal:
        return node
    children = [c for c in (_prune(c) for c in node.children if isinstance(c, Tree)) if c]
    return Tree(node.label, children) if children else None
