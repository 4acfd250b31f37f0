"""The decoder's incremental state during search: keys and values of the steps already
taken, so that each step feeds one new token (sec. 3.2.3, 6.1).

Rows and sentences. The search runs `rows` hypotheses for `sentences` sources; the rows
of each sentence form one contiguous block of `group` rows (1 in greedy search and at beam
search's first step, `beam` after it), and a beam reorder picks each row from its own
sentence's block. All hypotheses of a sentence attend to the same source, and beam
hypotheses share their target prefixes, so the cache stores keys and values per sentence:

- encoder-decoder: (sentences, heads, src_len, d), computed once from the encoder output;
- self-attention: (sentences, heads, length * group, d), append-only. Entry t * group + j
  holds what the hypothesis in row j of the sentence's block computed at position t.
  `slots` (rows, length) says which of a position's `group` entries belongs to each
  hypothesis's own history: the row of its ancestor at that step.

A beam reorder then rewrites `slots`, a few hundred integers, where the usual cache
(fairseq, OpenNMT, CTranslate2, HF) copies every hypothesis's keys and values, tens of MB
per layer per step on a base model. Attention runs the `group` queries of a sentence
together over the sentence's entries, with `mask` admitting exactly each hypothesis's own
history: the same softmax over the same keys as with copied histories (the test suite
checks cached against recomputed decoding), for 1/group of the memory reads and no copy.

    cache = model.new_cache(src_pad_mask)            # filled by model.decode(..., cache=cache)
    cache.reorder(rows)                              # hypotheses that survive a beam step
    cache.reorder(rows, sentences)                   # ... when finished sentences leave

With restricted self-attention (`window` r, `model/window.py`) a step's queries read only
the entries of the last r positions before them and their own: O(r) per step, not O(length).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


GROW = 32  # positions added to a full self-attention store at once


@dataclass
class LayerCache:
    """One decoder layer's keys and values. `group`, `length`, `start` and `mask` are this
    step's (set by `KVCache.advance`): rows per sentence, positions stored before this step,
    the first position its queries see, and the self-attention mask for its queries."""

    self_k: Tensor | None = None  # (sentences, heads, capacity * group, d_k), entries in front
    self_v: Tensor | None = None  # (sentences, heads, capacity * group, d_v)
    cross_k: Tensor | None = None  # (sentences, heads, src_len, d_k)
    cross_v: Tensor | None = None  # (sentences, heads, src_len, d_v)
    group: int = 1
    length: int = 0
    start: int = 0  # > 0 only with a window
    mask: Tensor | None = None  # (sentences, 1, group * new, (length + new - start) * group)

    def extend(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor | None]:
        """Store this step's self-attention keys and values, (rows, new, heads, d);
        -> the entries of positions start .. length + new - 1, (sentences, heads, (length +
        new - start) * group, d), and `mask`."""
        self._append("self_k", k)
        self._append("self_v", v)
        start, end = self.start * self.group, (self.length + k.size(1)) * self.group
        return self.self_k[:, :, start:end], self.self_v[:, :, start:end], self.mask

    def store_cross(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store the encoder-decoder keys and values, (sentences, heads, src_len, d), once a
        search; -> the stored pair."""
        self.cross_k, self.cross_v = k, v
        return k, v

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

    def _append(self, name: str, new: Tensor) -> None:
        """Write `new` (rows, q, heads, d) at positions length .. length + q - 1 of store
        `name` (sentences, heads, capacity * group, d), growing it when full."""
        rows, q, heads, d = new.shape
        sentences, store = rows // self.group, getattr(self, name)
        start, end = self.length * self.group, (self.length + q) * self.group
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
        """Memory for a store that replaces store `name` (the fast path may recycle it)."""
        return like.new_empty(shape)


@dataclass
class KVCache:
    """The whole incremental state: one `LayerCache` per decoder layer, the source padding
    mask, and the hypotheses' ancestry. Created by `Transformer.new_cache`, advanced and
    filled by `Transformer.decode`, reordered by the search."""

    layers: list[LayerCache]
    src_pad_mask: Tensor  # (sentences, src_len), True = padding
    length: int = 0  # target positions already decoded
    slots: Tensor | None = None  # (rows, length): each position's entry in a row's history
    pending: Tensor | None = None  # (rows,) rows to keep, applied by the next `advance`
    window: int = 0  # restricted self-attention: positions seen before a query's own

    def reorder(self, rows: Tensor, sentences: Tensor | None = None) -> None:
        """Keep hypothesis rows `rows` (beam pruning: the surviving hypotheses, each from
        its own sentence's block) and, when some sentences have left the batch, the state
        of `sentences` (the kept ones, in the order of their rows in `rows`)."""
        # Two reorders before the next step compose: pending[rows] of the stored rows.
        self.pending = rows if self.pending is None else self.pending.index_select(0, rows)
        if sentences is not None:
            self.src_pad_mask = self.src_pad_mask.index_select(0, sentences)
            for layer in self.layers:
                layer.keep(sentences, self.length)

    def advance(self, rows: int, new: int) -> None:
        """Before a decoding step of `rows` hypotheses feeding `new` positions each: apply
        the pending reorder to the ancestry and give the layers this step's mask."""
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
            layer.group, layer.length, layer.start, layer.mask = group, self.length, start, mask
        self.pending, self.length = None, self.length + new

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
