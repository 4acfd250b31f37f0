"""What each attention head does, and how much the translation needs it (Figures 3-5).

    report = analyse_heads(translator, sources, references)   # `aiayn heads`
    print(report.text()); report.to_json(); write_grid(report, "heads.png")

For every layer, head and kind of attention (encoder self, decoder self, encoder-decoder),
over the model's own translations of `sources` (its attention as `aiayn attention` shows
it: one teacher-forced pass per batch, `attention_view.capture_weights`):

- `distance`: the mean distance, in words, between a query and the keys it attends to;
- `entropy`: the mean entropy of a query's weights, in nats (0: one key; log n: uniform);
- `previous`, `same`, `next`: the share of attention on the word before the query's, its
  own word, the word after;
- `eos`: the share on the sentence boundary: the source's `</s>`, and in decoder
  self-attention `<s>` (the decoder reads no `</s>`);
- `punctuation`: the share on pieces that are punctuation only.

Words are sentencepiece's: a piece starting with "▁" starts a word, a punctuation piece and
a control token (`<s>`, `</s>`) are words of their own. Encoder-decoder attention joins a
target and a source sentence, so its query's "own word" is the source word at the same
relative place (the diagonal): distance and previous / same / next are measured from there.

`importance` (with references): the dev BLEU lost when that head alone is masked at
inference (Michel et al., 2019, "Are Sixteen Heads Really Better than One?"): its output is
zeroed before W^O by a forward pre-hook, so the model's code is untouched. Every head is
masked in one run: the sentences of a batch are searched once per masked head, side by
side in one batch (`group` heads at a time), each copy's rows masking their own head.
"""

from __future__ import annotations

import dataclasses
import re
import unicodedata
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from sacrebleu.metrics import BLEU
from torch import Tensor

from aiayn.attention_view import KINDS, capture_weights
from aiayn.data.batching import longest_first_batches
from aiayn.decode.search import make_strategy, run_search
from aiayn.model.attention import MultiHeadAttention
from aiayn.model.cache import KVCache
from aiayn.model.transformer import Transformer
from aiayn.translate import Translator

STATS = ("distance", "entropy", "previous", "same", "next", "eos", "punctuation")
WORD_START = "\u2581"  # sentencepiece's "▁"


@dataclass(frozen=True)
class Head:
    """One head: kind ("encoder", "decoder" or "cross"), layer and head, from 0."""

    kind: str
    layer: int
    head: int

    def name(self) -> str:
        """As people read it, counting from 1: "cross layer 3 head 2"."""
        return f"{self.kind} layer {self.layer + 1} head {self.head + 1}"


@dataclass
class HeadReport:
    """Per head, its statistics (`STATS`, each averaged over every query of every sentence)
    and importance (BLEU lost when masked; None without references)."""

    stats: dict[Head, dict[str, float]]
    importance: dict[Head, float] | None = None
    bleu: float | None = None  # unmasked, on the references
    sentences: int = 0
    layers: int = 0
    heads: int = 0
    translations: list[str] = field(default_factory=list)

    def rows(self) -> list[dict]:
        """One JSON-ready dict per head: kind, layer and head (from 1), statistics, importance."""
        out = []
        for head, values in self.stats.items():
            lost = None if self.importance is None else round(self.importance[head], 2)
            stats = {k: round(v, 4) for k, v in values.items()}
            out.append({"kind": head.kind, "layer": head.layer + 1, "head": head.head + 1,
                        **stats, "importance": lost})  # fmt: skip
        return out

    def to_json(self) -> dict:
        """The report as `aiayn heads --json` writes it (`heads_output.HEADS` is its schema)."""
        return {"sentences": self.sentences, "layers": self.layers, "heads": self.heads,
                "bleu": self.bleu, "importance": "dev BLEU lost when the head alone is masked",
                "entropy_unit": "nats", "rows": self.rows()}  # fmt: skip

    def text(self) -> str:
        """A text table, one line per head."""
        names = ("kind", "layer", "head", "dist", "entropy", "prev", "same", "next", "eos",
                 "punct", "BLEU lost")  # fmt: skip
        lines = ["{:<8}{:>6}{:>5}{:>7}{:>8}{:>6}{:>6}{:>6}{:>6}{:>6}{:>10}".format(*names)]
        for r in self.rows():
            lost = "" if r["importance"] is None else f"{r['importance']:+.2f}"
            lines.append(
                f"{r['kind']:<8}{r['layer']:>6}{r['head']:>5}{r['distance']:>7.2f}"
                f"{r['entropy']:>8.2f}{r['previous']:>6.2f}{r['same']:>6.2f}{r['next']:>6.2f}"
                f"{r['eos']:>6.2f}{r['punctuation']:>6.2f}{lost:>10}"
            )
        if self.bleu is not None:
            lines.append(f"unmasked sacreBLEU {self.bleu:.2f} on {self.sentences} sentences")
        return "\n".join(lines)


# --- statistics -------------------------------------------------------------------------


BYTE_PIECE = re.compile(r"<0x([0-9A-F]{2})>")  # sentencepiece's byte fallback


def piece_text(piece: str) -> str:
    """A piece's text without the "▁" mark; a byte-fallback piece (`<0x2E>`) as its
    character where the byte is one (ASCII)."""
    match = BYTE_PIECE.fullmatch(piece)
    if match and int(match.group(1), 16) < 128:
        return chr(int(match.group(1), 16))
    return piece.replace(WORD_START, "")


def is_punctuation(piece: str) -> bool:
    """Whether a subword piece is punctuation alone (the "punct" statistic's target)."""
    text = piece_text(piece)
    return bool(text) and all(unicodedata.category(c).startswith("P") for c in text)


def _is_control(piece: str) -> bool:
    return piece in ("<s>", "</s>", "<pad>", "<unk>")


def word_numbers(pieces: Sequence[str]) -> list[int]:
    """The word of each piece, from 0: a piece starting with "▁", a punctuation piece or a
    control token starts a word; a piece after a punctuation piece or a control token too."""
    numbers, word, joinable = [], -1, False
    for piece in pieces:
        alone = is_punctuation(piece) or _is_control(piece)
        if alone or not joinable or piece.startswith(WORD_START):
            word += 1
        numbers.append(word)
        joinable = not alone
    return numbers


def sentence_sums(
    weights: Tensor, queries: Sequence[str], keys: Sequence[str], diagonal: bool
) -> dict[str, Tensor]:
    """The statistics of one sentence, summed over its queries: weights (layers, heads,
    q_len, k_len) -> {stat: (layers, heads)}. `diagonal`: the query's own word is the key
    sentence's word at the same relative place (encoder-decoder attention)."""
    q_word = torch.tensor(word_numbers(queries), dtype=torch.float64)  # (q_len,)
    k_word = torch.tensor(word_numbers(keys), dtype=torch.float64)  # (k_len,)
    if diagonal:  # the target word's place, on the source's scale
        q_word = q_word * (k_word[-1] + 1) / (q_word[-1] + 1)
    offset = k_word[None, :] - q_word[:, None]  # (q_len, k_len), in words
    near = offset.round()
    w = weights.double()  # (layers, heads, q_len, k_len)
    boundary = torch.tensor([p in ("</s>", "<s>") for p in keys])  # (k_len,)
    punct = torch.tensor([is_punctuation(p) for p in keys])  # (k_len,)
    entropy = -(w * w.clamp_min(1e-30).log()).sum(-1)  # (layers, heads, q_len)
    return {
        "distance": (w * offset.abs()).sum((-1, -2)),
        "entropy": entropy.sum(-1),
        "previous": (w * near.eq(-1)).sum((-1, -2)),
        "same": (w * near.eq(0)).sum((-1, -2)),
        "next": (w * near.eq(1)).sum((-1, -2)),
        "eos": w[..., boundary].sum((-1, -2)),
        "punctuation": w[..., punct].sum((-1, -2)),
    }


def attention_statistics(
    model: Transformer, src_vocab, tgt_vocab, pairs: Sequence[tuple[list[int], list[int]]],
    max_tokens: int = 4096,
) -> dict[Head, dict[str, float]]:  # fmt: skip
    """Each head's statistics over `pairs` of (source ids with eos, target ids without bos
    or eos): one teacher-forced pass per batch, each sentence's weights unpadded."""
    layers, heads = model.config.n_layers, model.config.n_heads
    sums = {k: {s: torch.zeros(layers, heads, dtype=torch.float64) for s in STATS} for k in KINDS}
    queries = {k: 0 for k in KINDS}
    device, pad = next(model.parameters()).device, model.config.pad_id
    lengths = [max(len(s), len(t) + 1) for s, t in pairs]
    for batch in longest_first_batches(lengths, max_tokens):
        src = _padded([pairs[i][0] for i in batch], pad, device)  # (batch, src_len)
        tgt = _padded([[tgt_vocab.bos_id, *pairs[i][1]] for i in batch], pad, device)
        weights = {k: w.float().cpu() for k, w in capture_weights(model, src, tgt).items()}
        for row, i in enumerate(batch):
            source = [src_vocab.piece(t) for t in pairs[i][0]]
            target = [tgt_vocab.piece(t) for t in [tgt_vocab.bos_id, *pairs[i][1]]]
            sides = {"encoder": (source, source), "decoder": (target, target),
                     "cross": (target, source)}  # (queries, keys)  # fmt: skip
            for kind, (q, k) in sides.items():
                w = weights[kind][:, row, :, : len(q), : len(k)]  # (layers, heads, q, k)
                for stat, value in sentence_sums(w, q, k, kind == "cross").items():
                    sums[kind][stat] += value
                queries[kind] += len(q)
    return {Head(kind, l, h): {s: float(sums[kind][s][l, h] / max(queries[kind], 1))
                               for s in STATS}
            for kind in KINDS for l in range(layers) for h in range(heads)}  # fmt: skip


def _padded(rows: list[list[int]], pad: int, device) -> Tensor:
    out = torch.full((len(rows), max(map(len, rows))), pad, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return out.to(device)  # (batch, len), right-padded


# --- masking heads --------------------------------------------------------------------------


def attention_modules(model: Transformer) -> dict[tuple[str, int], MultiHeadAttention]:
    """(kind, layer) -> that layer's attention module."""
    out = {}
    for i, layer in enumerate(model.encoder):
        out["encoder", i] = layer.self_attn
    for i, layer in enumerate(model.decoder):
        out["decoder", i], out["cross", i] = layer.self_attn, layer.cross_attn
    return out


class HeadMasks:
    """Zeroes, per batch row, the output of one head (or none) before W^O: copy g of a
    batch masks `variants[g]` (None: no head). The encoder's rows are the batch's sentences
    (`sentence_variant`: the copy of each); the search's decoder rows follow `row_variant`,
    which the search's cache reorders with its rows (`TrackedCache`)."""

    def __init__(self, model: Transformer, variants: Sequence[Head | None]) -> None:
        self.sentence_variant = self.row_variant = torch.zeros(0, dtype=torch.long)
        modules = attention_modules(model)
        device = next(model.parameters()).device
        # (kind, layer) -> (its module, (copies, heads * d_v) ones with the masked heads' zeros)
        self.masks: dict[tuple[str, int], tuple[MultiHeadAttention, Tensor]] = {}
        for g, head in enumerate(variants):
            if head is None:
                continue
            module = modules[head.kind, head.layer]
            width = module.n_heads * module.d_v
            _, mask = self.masks.setdefault(
                (head.kind, head.layer), (module, torch.ones(len(variants), width, device=device))
            )
            mask[g, head.head * module.d_v : (head.head + 1) * module.d_v] = 0.0

    def set_rows(self, variant: Tensor) -> None:
        """variant: (sentences,) the copy of each sentence of the batch about to be searched."""
        self.sentence_variant = self.row_variant = variant

    @contextmanager
    def applied(self) -> Iterator[None]:
        """While inside, every attention module's W^O sees its masked heads zeroed."""
        handles = [module.w_o.register_forward_pre_hook(self._hook(mask, kind == "encoder"))
                   for (kind, _), (module, mask) in self.masks.items()]  # fmt: skip
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()

    def _hook(self, mask: Tensor, encoder: bool):
        def zero_heads(_module, args: tuple) -> tuple:
            x = args[0]  # (rows, len, heads * d_v)
            rows = self.sentence_variant if encoder else self.row_variant  # (rows,)
            return (x * mask[rows][:, None, :].to(x.dtype), *args[1:])

        return zero_heads


@dataclass
class TrackedCache(KVCache):
    """A search's cache that also reorders the masks' row copies as the search reorders
    (and drops) its rows, so that each row keeps masking its own head."""

    masks: HeadMasks | None = None

    @classmethod
    def of(cls, cache: KVCache, masks: HeadMasks) -> TrackedCache:
        """`cache`'s contents, tracked for `masks`."""
        return cls(**{f.name: getattr(cache, f.name) for f in dataclasses.fields(KVCache)},
                   masks=masks)  # fmt: skip

    def reorder(self, rows: Tensor) -> None:
        """The cache's reorder (`KVCache.reorder`), and the masks' row copies with it."""
        super().reorder(rows)
        self.masks.row_variant = self.masks.row_variant.index_select(0, rows.to(
            self.masks.row_variant.device))  # fmt: skip


def masked_translations(
    translator: Translator, ids: Sequence[list[int]], variants: Sequence[Head | None]
) -> list[list[list[int]]]:
    """Per variant (a head masked, or None), the token ids of the translation of each
    source (`ids`, eos included): the variants' copies of a batch searched in one batch,
    by the core's search driver over the core's cache, which carries the copies' row
    numbers along its reorders (`TrackedCache`)."""
    model, copies = translator.model, len(variants)
    out: list[list[list[int]]] = [[[] for _ in ids] for _ in variants]
    masks = HeadMasks(model, variants)
    budget = max(1, translator.max_tokens // copies)
    with masks.applied():
        for batch in longest_first_batches([len(x) for x in ids], budget):
            src = _padded([ids[j] for _ in variants for j in batch], model.config.pad_id,
                          translator.device)  # (copies * batch, src_len), copy-major
            masks.set_rows(torch.arange(copies, device=src.device).repeat_interleave(len(batch)))
            for row, tokens in enumerate(_search(translator, src, masks)):
                out[row // len(batch)][batch[row % len(batch)]] = tokens
    return out


def _search(translator: Translator, src: Tensor, masks: HeadMasks) -> list[list[int]]:
    """The best translation of each row of `src` (greedy at beam 1, else beam search)."""
    model, decode = translator.model, translator.decode
    strategy = make_strategy(model, src, decode, greedy=decode.beam == 1)
    cache = TrackedCache.of(model.new_cache(model.pad_mask(src)), masks)
    return [h[0].tokens if h else [] for h in run_search(model, src, strategy, cache=cache)]


# --- the whole analysis -----------------------------------------------------------------


def all_heads(model: Transformer) -> list[Head]:
    """Every head of `model`: encoder, decoder and cross attention, layer by layer."""
    c = model.config
    return [Head(k, l, h) for k in KINDS for l in range(c.n_layers) for h in range(c.n_heads)]


def analyse_heads(
    translator: Translator, sources: Sequence[str], references: Sequence[str] | None = None,
    group: int = 8,
) -> HeadReport:  # fmt: skip
    """Each head's statistics over the model's translations of `sources` and, with
    `references`, its importance: the sacreBLEU lost when it alone is masked (`group`
    masked copies of a batch searched at once)."""
    model, heads = translator.model, all_heads(translator.model)
    variants: list[Head | None] = [None, *heads] if references is not None else [None]
    eos = translator.src_vocab.eos_id  # a blank source: eos alone
    ids = [x or [eos] for x in translator.encode(sources)]  # as the Translator reads them
    found: dict[Head | None, list[list[int]]] = {}
    for start in range(0, len(variants), group):
        chunk = variants[start : start + group]
        found.update(zip(chunk, masked_translations(translator, ids, chunk)))
    limit = model.config.max_len - 1  # the decoder reads <s> too
    pairs = [(s, t[:limit]) for s, t in zip(ids, found[None])]
    stats = attention_statistics(model, translator.src_vocab, translator.tgt_vocab, pairs,
                                 translator.max_tokens)  # fmt: skip
    texts = {v: [translator.tgt_vocab.decode(t) for t in found[v]] for v in found}
    report = HeadReport(stats, sentences=len(sources), layers=model.config.n_layers,
                        heads=model.config.n_heads, translations=texts[None])  # fmt: skip
    if references is not None:
        bleu = {v: BLEU().corpus_score(texts[v], [list(references)]).score for v in texts}
        report.bleu = bleu[None]
        report.importance = {h: bleu[None] - bleu[h] for h in heads}
    return report
