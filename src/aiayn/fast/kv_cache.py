"""The decoding cache, shared by a sentence's hypotheses (a speed-up of `model/cache.py`).

Rows and sentences. The search runs `rows` hypotheses for `sentences` sources; the rows
of each sentence form one contiguous block of `group` rows (1 in greedy search and at beam
search's first step, `beam` after it), and a beam reorder picks each row from its own
sentence's block. All hypotheses of a sentence attend to the same source, and beam
hypotheses share their target prefixes, so this cache stores keys and values per sentence:

- encoder-decoder: (sentences, heads, src_len, d), computed once from the encoder output;
- self-attention: (sentences, heads, length * group, d), append-only. Entry t * group + j
  holds what the hypothesis in row j of the sentence's block computed at position t.
  `slots` (rows, length) says which of a position's `group` entries belongs to each
  hypothesis's own history: the row of its ancestor at that step.

A beam reorder then rewrites `slots`, a few hundred integers, where the core's cache copies
every hypothesis's keys and values, tens of MB per layer per step on a base model.
`attention.GroupedAttention` runs the `group` queries of a sentence together over the
sentence's entries, with a mask admitting exactly each hypothesis's own history: the same
softmax over the same keys as the core's cache (tests/fast/test_kv_cache.py checks it in
float64), for 1/group of the memory reads and no copy.

The interface is the core cache's (`length`, `layers`, `src_pad_mask`, `reorder(rows)`),
so the core's search drives it unchanged: `src_pad_mask` is per sentence, and sentences
that leave the search are found from the rows that remain. With restricted self-attention
(`window` r) a step's queries read only the entries of the last r positions before them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from aiayn.fast.buffers import StoreBuffers

GROW = 32  # positions added to a full self-attention store at once


@dataclass
class SharedLayerCache:
    """One decoder layer's keys and values, laid out per sentence. `group`, `start` and
    `mask` are this step's (set by `SharedKVCache.prepare`): rows per sentence, the first
    position its queries see, and the self-attention mask of its queries. Stores take their
    memory from `buffers` (None: fresh memory); the encoder-decoder stores are contiguous,
    as `attention.decoding_attention` reads them at every step, in `cross_dtype` (None: the
    keys' own; the int8 model's bfloat16, `fast/int8.py`)."""

    shared: SharedKVCache = field(repr=False)
    index: int = 0  # the layer's place: its stores' key in `buffers`
    buffers: StoreBuffers | None = None
    cross_dtype: torch.dtype | None = None
    self_k: Tensor | None = None  # (sentences, heads, capacity * group, d_k), entries in front
    self_v: Tensor | None = None  # (sentences, heads, capacity * group, d_v)
    cross_k: Tensor | None = None  # (sentences, heads, src_len, d_k)
    cross_v: Tensor | None = None  # (sentences, heads, src_len, d_v)
    group: int = 1
    start: int = 0  # > 0 only with a window
    mask: Tensor | None = None  # (sentences, 1, group * new, (length + new - start) * group)

    def extend(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor | None]:
        """Store this step's self-attention keys and values, (rows, new, heads, d);
        -> the entries of positions start .. length + new - 1, (sentences, heads, (length +
        new - start) * group, d), and `mask`."""
        self.shared.prepare(k.size(0), k.size(1))
        length = self.shared.length
        self._append("self_k", k, length)
        self._append("self_v", v, length)
        start, end = self.start * self.group, (length + k.size(1)) * self.group
        return self.self_k[:, :, start:end], self.self_v[:, :, start:end], self.mask

    def store_cross(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store the encoder-decoder keys and values, (sentences, heads, src_len, d), once a
        search, contiguous and in `cross_dtype`; -> the stored pair."""
        dtype = self.cross_dtype or k.dtype
        self.cross_k, self.cross_v = (  # one copy does both
            t.contiguous() if t.dtype == dtype else t.new_empty(t.shape, dtype=dtype).copy_(t)
            for t in (k, v)
        )
        return self.cross_k, self.cross_v

    def keep(self, sentences: Tensor, length: int) -> None:
        """Drop the entries of the sentences not in `sentences` (which have left the batch);
        `length`: positions stored. Only the entries written are copied, not spare capacity."""
        for name in ("self_k", "self_v", "cross_k", "cross_v"):
            store = getattr(self, name)
            if store is None:
                continue
            end = length * self.group if name.startswith("self") else store.size(2)
            kept = self._empty(name, (sentences.numel(), *store.shape[1:]), store)
            torch.index_select(store[:, :, :end], 0, sentences, out=kept[:, :, :end])
            setattr(self, name, kept)

    def regroup(self, slots: Tensor, group: int) -> None:
        """Re-store the self-attention entries for `group` rows per sentence (the beam
        widens): row r's own history, picked by `slots` (rows, length), goes to slot
        r % group at every position."""
        rows, length = slots.shape
        sentence = torch.arange(rows, device=slots.device) // group  # (rows,)
        entry = slots + torch.arange(length, device=slots.device) * self.group  # (rows, length)
        for name in ("self_k", "self_v"):
            # The entries written so far, not the store's spare capacity.
            store = getattr(self, name)[:, :, : length * self.group]
            heads, d = store.size(1), store.size(3)
            index = entry[:, None, :, None].expand(rows, heads, length, d)
            own = store.index_select(0, sentence).gather(2, index)  # (rows, heads, length, d)
            own = own.view(rows // group, group, heads, length, d).permute(0, 2, 3, 1, 4)
            setattr(self, name, own.reshape(rows // group, heads, length * group, d))

    def _append(self, name: str, new: Tensor, length: int) -> None:
        """Write `new` (rows, q, heads, d) at positions length .. length + q - 1 of store
        `name` (sentences, heads, capacity * group, d), growing it when full."""
        rows, q, heads, d = new.shape
        sentences, store = rows // self.group, getattr(self, name)
        start, end = length * self.group, (length + q) * self.group
        if store is None or end > store.size(2):
            grown = self._empty(name, (sentences, heads, end + GROW * self.group, d), new)
            if store is not None:
                grown[:, :, :start] = store[:, :, :start]
            store = grown
            setattr(self, name, store)
        # Row j of a sentence at position length + a goes to entry (length + a) * group + j.
        place = store[:, :, start:end].view(sentences, heads, q, self.group, d)
        place.copy_(new.view(sentences, self.group, q, heads, d).permute(0, 3, 2, 1, 4))

    def _empty(self, name: str, shape: tuple[int, ...], like: Tensor) -> Tensor:
        """Memory for a store that replaces store `name`: kept buffers, or fresh memory."""
        if self.buffers is None:
            return like.new_empty(shape)
        return self.buffers.empty((self.index, name), shape, like, getattr(self, name))


class SharedKVCache:
    """The whole incremental state: one `SharedLayerCache` per decoder layer, the source
    padding mask per sentence, and the hypotheses' ancestry. `length` is advanced by
    `Transformer.decode` after each step, as in the core's cache."""

    def __init__(
        self, n_layers: int, src_pad_mask: Tensor, window: int = 0,
        buffers: StoreBuffers | None = None, cross_dtype: torch.dtype | None = None,
    ) -> None:  # fmt: skip
        self.layers = [SharedLayerCache(self, i, buffers, cross_dtype) for i in range(n_layers)]
        self.src_pad_mask = src_pad_mask  # (sentences, src_len), True = padding
        self.window = window  # restricted self-attention: positions seen before a query's own
        self.length = 0  # target positions already decoded
        self.slots: Tensor | None = None  # (rows, length): each position's entry in a row's history
        self.pending: Tensor | None = None  # (rows,) rows to keep, applied by the next step
        self.group = 1  # rows per sentence at the last step
        self.held: Tensor | None = None  # sentences of the last step still stored (after leaving)
        self._prepared = -1  # the `length` whose step `prepare` has set up

    def reorder(self, rows: Tensor) -> None:
        """Keep hypothesis rows `rows` (beam pruning: the surviving hypotheses, each from
        its own sentence's block; finished sentences leaving). Sentences none of whose rows
        remain leave the stores at once."""
        # Two reorders before the next step compose: pending[rows] of the stored rows.
        self.pending = rows if self.pending is None else self.pending.index_select(0, rows)
        kept = torch.unique_consecutive(self.pending // self.group)  # last step's sentences
        held = self.held if self.held is not None else torch.arange(
            self.src_pad_mask.size(0), device=rows.device
        )  # fmt: skip
        if kept.numel() < held.numel():
            where = torch.searchsorted(held, kept)  # positions in the stores, as held now
            self.src_pad_mask = self.src_pad_mask.index_select(0, where)
            for layer in self.layers:
                layer.keep(where, self.length)
            self.held = kept

    def prepare(self, rows: int, new: int) -> None:
        """Before the first layer of a step of `rows` hypotheses feeding `new` positions
        each: apply the pending reorder to the ancestry and give the layers this step's
        mask. Later layers of the same step find it done."""
        if self._prepared == self.length:
            return
        self._prepared = self.length
        sentences = self.src_pad_mask.size(0)
        group, device = rows // sentences, self.src_pad_mask.device
        own = (torch.arange(rows, device=device) % group)[:, None]  # (rows, 1) row in block
        slots = self.slots
        if slots is not None and self.pending is not None:
            slots = slots.index_select(0, self.pending)  # (rows, length)
        if slots is not None and group != self.layers[0].group:
            for layer in self.layers:
                layer.regroup(slots, group)
            slots = own.expand(rows, self.length)
        fresh = own.expand(rows, new)  # each row's new positions are its own entries
        self.slots = fresh if slots is None else torch.cat([slots, fresh], dim=1)  # (rows, total)
        start = max(0, self.length - self.window) if self.window else 0
        mask = self._mask(sentences, group, new, start)
        for layer in self.layers:
            layer.group, layer.start, layer.mask = group, start, mask
        self.pending, self.held, self.group = None, None, group

    def _mask(self, sentences: int, group: int, new: int, start: int) -> Tensor | None:
        """(sentences, 1, group * new, (length + new - start) * group), True = may attend:
        query (row j, position p = length + a) sees entry (t, i), t >= start, iff i is its
        ancestor's slot at t and t <= p (sec. 3.2.3), and t >= p - window with a window.
        None when one query per sentence sees all."""
        if group == 1 and new == 1:
            return None
        total, device = self.length + new, self.slots.device
        slot = torch.arange(group, device=device)
        mine = self.slots[:, None, start:, None] == slot  # (rows, 1, total - start, group)
        if new > 1:
            t = torch.arange(start, total, device=device)  # (total - start,)
            p = self.length + torch.arange(new, device=device)[:, None]  # (new, 1)
            seen = (t <= p) & (t >= p - self.window) if self.window else t <= p
            mine = mine & seen[None, :, :, None]  # (rows, new, total - start, group)
        return mine.reshape(sentences, 1, group * new, (total - start) * group)
