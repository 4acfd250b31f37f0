"""The decoder's incremental state during search (sec. 3.2.3, 6.1): the keys and values of
the steps already taken, so that each step feeds only its new token.

One row per hypothesis. Each layer keeps its self-attention keys and values, appended at
every step, and its encoder-decoder keys and values, computed once from the encoder output.
When the beam reorders (or drops) hypotheses, every stored tensor is `index_select`ed by
the surviving rows: the textbook cache of fairseq, OpenNMT and HF transformers.

    cache = model.new_cache(src_pad_mask)     # filled by model.decode(..., cache=cache)
    cache.reorder(rows)                       # the rows that survive a search step

With restricted self-attention (`window` r, `model/window.py`) a layer keeps only its last
r positions: no later query can see further back. (`aiayn.fast.kv_cache` shares the stores
among a sentence's hypotheses instead of copying them: a speed-up, tested equal to this.)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class LayerCache:
    """One decoder layer's stored keys and values, (rows, heads, positions, d_k | d_v)."""

    window: int = 0  # keep only the last `window` positions (0: all)
    self_k: Tensor | None = None
    self_v: Tensor | None = None
    cross_k: Tensor | None = None  # (rows, heads, src_len, d_k)
    cross_v: Tensor | None = None

    def extend(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append this step's keys and values, (rows, heads, new, d); -> every stored
        position a query of this step may see, earlier ones first."""
        if self.self_k is not None:
            k, v = torch.cat([self.self_k, k], dim=2), torch.cat([self.self_v, v], dim=2)
        keep = slice(-self.window, None) if self.window else slice(None)
        self.self_k, self.self_v = k[:, :, keep], v[:, :, keep]
        return k, v

    def reorder(self, rows: Tensor) -> None:
        """Keep the hypotheses `rows` (rows,): index into the rows stored now."""
        for name in ("self_k", "self_v", "cross_k", "cross_v"):
            stored = getattr(self, name)
            if stored is not None:
                setattr(self, name, stored.index_select(0, rows))


@dataclass
class KVCache:
    """The whole incremental state: one `LayerCache` per decoder layer, the source padding
    mask of each row, and the number of target positions decoded. Created by
    `Transformer.new_cache`, filled by `Transformer.decode`, reordered by the search."""

    layers: list[LayerCache]
    src_pad_mask: Tensor  # (rows, src_len), True = padding
    length: int = 0  # target positions already decoded

    def reorder(self, rows: Tensor) -> None:
        """Keep the hypotheses `rows` (beam pruning, finished sentences leaving)."""
        self.src_pad_mask = self.src_pad_mask.index_select(0, rows)
        for layer in self.layers:
            layer.reorder(rows)
