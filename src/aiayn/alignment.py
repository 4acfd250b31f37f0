"""Word alignments from the encoder-decoder attention (sec. 3.2.3): which source word each
target word was translated from, as Moses and fast_align write them ("0-0 1-2 2-1").

    links = word_alignment(model, src_vocab, tgt_vocab, src_ids, tgt_ids)   # [(0, 0), ...]
    format_alignment(links)                                                  # "0-0 1-2 ..."

One teacher-forced pass gives the weights (`attention_view.capture_weights`, the model's
code untouched). The weights of `AlignmentConfig.layer`, averaged over its `heads`, become
a target word x source word matrix: summed over the pieces of each source word, averaged
over the target word's own pieces. Each target word is linked to the source word with the
most weight in its row; with `links="union"` each source word is also linked to the
target word with the most weight in its column (the union of the two directions, as
fast_align's two runs are symmetrized), so a source word that gives two target words
("opens" -> "macht ... auf") keeps both. Words are the texts split at whitespace, a word's
subword pieces merged (the vocabulary says which piece spells which characters); the
source's end of sentence is no word and gets no link.

A decoder row reads one piece and predicts the next: row t reads y_t (<s> for t = 0) and
predicts y_{t+1}. `row="prediction"` takes the row that predicts the target piece,
`row="input"` the row that reads it. `benchmarks/alignment.py` measured every layer and
head, both rows and both kinds of links, on the demo corpus, whose grammar knows the true
links (`aiayn.data.demo_alignment`): the default below is the choice it made there, the
last layer's heads averaged, the row that predicts the piece (while it predicts a word,
the decoder looks at the source word it translates; once it has read it, it has moved
on), and the union of both directions (its figures: docs/translate.md).
The head average, not the best single head: head k of one model has nothing to do with
head k of another, while which layer aligns best is a property of the architecture
(Garg et al. 2019 also average one layer's heads).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from aiayn.attention_view import capture_weights
from aiayn.data.batching import collate, longest_first_batches
from aiayn.data.vocab import Vocab
from aiayn.model.transformer import Transformer

ROWS = ("prediction", "input")
LINKS = ("target", "union")


@dataclass(frozen=True)
class AlignmentConfig:
    """Which encoder-decoder attention gives the links."""

    layer: int = -1  # decoder layer, 0-based; negative counts from the last (-1: the last)
    heads: tuple[int, ...] | None = None  # averaged; None: all heads
    row: str = "prediction"  # the decoder row of a target piece: see the module docstring
    links: str = "union"  # "target": each target word's best source word; "union": and back

    def __post_init__(self) -> None:
        if self.row not in ROWS:
            raise ValueError(f"row must be one of {ROWS}, got {self.row!r}")
        if self.links not in LINKS:
            raise ValueError(f"links must be one of {LINKS}, got {self.links!r}")


DEFAULT_ALIGNMENT = AlignmentConfig()


def piece_words(surfaces: Sequence[str]) -> list[int | None]:
    """The word (0-based, of `"".join(surfaces).split()`) each piece spells a part of;
    None for a piece of whitespace only. A piece that spells nothing (a byte of a character
    spelled in bytes) belongs to the word of the piece after it."""
    text = "".join(surfaces)
    word_of: list[int | None] = []
    word, in_word = -1, False
    for char in text:
        if char.isspace():
            in_word = False
            word_of.append(None)
        else:
            word += not in_word
            in_word = True
            word_of.append(word)
    out: list[int | None] = []
    pending: list[int] = []
    start = 0
    for surface in surfaces:
        found = next((word_of[start + k] for k, c in enumerate(surface) if not c.isspace()), None)
        start += len(surface)
        if not surface:
            pending.append(len(out))
        else:
            for k in pending:
                out[k] = found
            pending = []
        out.append(found)
    return out


def word_scores(
    weights: Tensor, src_words: Sequence[int | None], tgt_words: Sequence[int | None],
    row: str = "prediction",
) -> Tensor:  # fmt: skip
    """One pair's attention weights (tgt_len + 1, src_len), decoder rows <s> y_1 ... y_n and
    source columns as the model read them, as a (target words, source words) matrix: summed
    over each source word's pieces, averaged over the target word's own; `src_words` /
    `tgt_words` give each source column's and target piece's word."""
    n_src = max((w for w in src_words if w is not None), default=-1) + 1
    n_tgt = max((w for w in tgt_words if w is not None), default=-1) + 1
    weights = weights.double()
    columns = torch.zeros(len(src_words), n_src, dtype=weights.dtype)  # (src_len, n_src)
    for c, w in enumerate(src_words):
        if w is not None:
            columns[c, w] = 1.0
    shift = 0 if row == "prediction" else 1
    rows = torch.zeros(n_tgt, weights.size(0), dtype=weights.dtype)  # (n_tgt, tgt_len + 1)
    for t, w in enumerate(tgt_words):
        if w is not None:
            rows[w, t + shift] = 1.0
    rows = rows / rows.sum(1, keepdim=True).clamp_min(1.0)  # mean over a word's pieces
    return rows @ weights @ columns  # (n_tgt, n_src)


def links_from_weights(
    weights: Tensor, src_words: Sequence[int | None], tgt_words: Sequence[int | None],
    row: str = "prediction", links: str = "union",
) -> list[tuple[int, int]]:  # fmt: skip
    """(source word, target word) links from one pair's attention weights (`word_scores`)."""
    return links_from_scores(word_scores(weights, src_words, tgt_words, row), links)


def links_from_scores(scores: Tensor, links: str = "union") -> list[tuple[int, int]]:
    """(source word, target word) links of a (target words, source words) matrix: each
    target word's best source word, and with "union" each source word's best target word."""
    if scores.numel() == 0:
        return []
    found = {(int(i), j) for j, i in enumerate(scores.argmax(dim=1).tolist())}
    if links == "union":
        found |= {(i, int(j)) for i, j in enumerate(scores.argmax(dim=0).tolist())}
    return sorted(found)


def cross_attention(
    model: Transformer, pairs: Sequence[tuple[Sequence[int], Sequence[int]]],
    max_tokens: int = 4096,
) -> list[Tensor]:  # fmt: skip
    """The encoder-decoder weights of each (source ids + eos, target ids) pair, each
    (layers, heads, tgt_len + 1, src_len): batched teacher-forced passes, padding cut off."""
    device = next(model.parameters()).device
    out: list[Tensor | None] = [None] * len(pairs)
    sizes = [len(s) + len(t) + 1 for s, t in pairs]
    for batch_ids in longest_first_batches(sizes, max_tokens):
        batch = collate([(_without_eos(pairs[i][0]), pairs[i][1]) for i in batch_ids])
        cross = capture_weights(model, batch.src.to(device), batch.tgt_in.to(device))["cross"]
        cross = cross.float().cpu()  # (layers, batch, heads, tgt_len, src_len)
        for row, i in enumerate(batch_ids):
            src, tgt = pairs[i]
            out[i] = cross[:, row, :, : len(tgt) + 1, : len(src)]
    return out  # type: ignore[return-value]


def _without_eos(src_ids: Sequence[int]) -> list[int]:
    return list(src_ids[:-1])  # collate appends the eos again


def select(weights: Tensor, config: AlignmentConfig) -> Tensor:
    """One pair's weights (layers, heads, rows, src_len) -> the configured (rows, src_len)."""
    layer = weights[config.layer]  # (heads, rows, src_len)
    if config.heads is not None:
        layer = layer[list(config.heads)]
    return layer.mean(dim=0)


def word_attention(
    model: Transformer, src_vocab: Vocab, tgt_vocab: Vocab,
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]],
    config: AlignmentConfig = DEFAULT_ALIGNMENT, max_tokens: int = 4096,
) -> list[Tensor]:  # fmt: skip
    """The configured attention of each (source ids, eos last; target ids, no bos or eos)
    pair as a (target words, source words) matrix (`word_scores`); (0, 0) for an empty
    target. Words: `src_vocab.decode(source).split()`, the same of the target."""
    todo = [k for k, (_, tgt) in enumerate(pairs) if len(tgt)]
    weights = cross_attention(model, [pairs[k] for k in todo], max_tokens)
    found = [torch.zeros(0, 0, dtype=torch.float64) for _ in pairs]
    for k, w in zip(todo, weights):
        src, tgt = pairs[k]
        src_words = piece_words(src_vocab.surfaces(_without_eos(src))) + [None]  # eos: none
        tgt_words = piece_words(tgt_vocab.surfaces(tgt))
        found[k] = word_scores(select(w, config), src_words, tgt_words, config.row)
    return found


def word_alignments(
    model: Transformer, src_vocab: Vocab, tgt_vocab: Vocab,
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]],
    config: AlignmentConfig = DEFAULT_ALIGNMENT, max_tokens: int = 4096,
) -> list[list[tuple[int, int]]]:  # fmt: skip
    """Word links of each (source ids, eos last; target ids, no bos or eos) pair, sorted;
    none for an empty target (`word_attention`, then `links_from_scores`)."""
    return [links_from_scores(scores, config.links)
            for scores in word_attention(model, src_vocab, tgt_vocab, pairs, config, max_tokens)]


def word_alignment(
    model: Transformer, src_vocab: Vocab, tgt_vocab: Vocab, src_ids: Sequence[int],
    tgt_ids: Sequence[int], config: AlignmentConfig = DEFAULT_ALIGNMENT,
) -> list[tuple[int, int]]:  # fmt: skip
    """The word links of one pair (see `word_alignments`)."""
    return word_alignments(model, src_vocab, tgt_vocab, [(src_ids, tgt_ids)], config)[0]


def format_alignment(links: Sequence[tuple[int, int]]) -> str:
    """Moses / fast_align's "i-j" pairs, source word first, space-separated."""
    return " ".join(f"{i}-{j}" for i, j in links)


def alignment_error(
    predicted: Sequence[set[tuple[int, int]]], sure: Sequence[set[tuple[int, int]]],
    possible: Sequence[set[tuple[int, int]]] | None = None,
) -> dict[str, float]:  # fmt: skip
    """Precision, recall and alignment error rate over a corpus (Och & Ney 2003):
    precision |A & P| / |A|, recall |A & S| / |S|, AER 1 - (|A & S| + |A & P|) / (|A| + |S|),
    with possible links P = S when not given."""
    possible = sure if possible is None else possible
    a = sum(len(x) for x in predicted)
    s = sum(len(x) for x in sure)
    a_s = sum(len(x & y) for x, y in zip(predicted, sure))
    a_p = sum(len(x & (y | z)) for x, y, z in zip(predicted, possible, sure))
    return {
        "precision": a_p / a if a else 0.0,
        "recall": a_s / s if s else 0.0,
        "aer": 1.0 - (a_s + a_p) / (a + s) if a + s else 0.0,
    }
