"""Restricted self-attention (sec. 4, Table 1's "self-attention (restricted)"): each position
attends only to the positions within distance r of it, O(r·n·d) per layer instead of
O(n²·d). The paper proposes it for very long sequences and leaves it to future work; aiayn
has it as `model.attention_window` = r, 0 (the paper's models: full attention) by default.

Encoder self-attention sees |i - j| <= r, decoder self-attention i - r <= j <= i (still
causal). Encoder-decoder attention is not restricted: the paper restricts self-attention,
"a neighborhood of size r in the input sequence centered around the respective output
position", and a target position has no centre in the source.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def band_mask(q_len: int, k_len: int, window: int, causal: bool, device: torch.device) -> Tensor:
    """(q_len, k_len), True = within the window: query i, the position i + k_len - q_len
    (the last q_len of k_len positions), sees key j with |j - position| <= window, and only
    j <= position if `causal`. For plots, tests, and as the definition the code must meet."""
    offset = k_len - q_len
    ones = torch.ones(q_len, k_len, dtype=torch.bool, device=device)
    return ones.tril(offset + (0 if causal else window)).triu(offset - window)


def windowed_attention(
    q: Tensor, k: Tensor, v: Tensor, window: int, key_pad_mask: Tensor | None = None,
    causal: bool = False, p_drop: float = 0.0,
) -> Tensor:  # fmt: skip
    """Eq. 1 over the keys within `window` of each query, without the n x n matrix: q (batch,
    heads, n, d_k), k, v (batch, heads, n, d_k | d_v), key_pad_mask (batch, n), True =
    padding -> (batch, heads, n, d_v), the result of eq. 1 with mask `band_mask` & not padding.

    The queries are cut into blocks of `window` positions; a block's keys are the positions
    from `window` before its first query to `window` after its last (to its last: causal),
    so each block is one small product, (block, span) instead of (n, n). A query with no key
    at all (padding farther than `window` from any word) gets zero weights, as PyTorch's
    attention kernel gives it.
    """
    batch, heads, n, d_k = q.shape
    block, before, after = window, window, 0 if causal else window
    blocks = -(-n // block)  # ceil(n / block)
    extra = blocks * block - n  # positions added after the last to fill the last block
    span = before + block + after  # keys of one block

    def key_blocks(x: Tensor) -> Tensor:
        # (batch, heads, n, d) -> (batch, heads, blocks, span, d): overlapping views, padded
        return F.pad(x, (0, 0, before, extra + after)).unfold(2, span, block).transpose(-1, -2)

    q = F.pad(q, (0, 0, 0, extra)).unflatten(2, (blocks, block))  # (batch, heads, blocks, block, d)
    scores = q @ key_blocks(k).transpose(-1, -2) / d_k**0.5  # (batch, heads, blocks, block, span)
    # Query a of a block and its key s are s - before - a positions apart.
    offset = torch.arange(span, device=q.device) - torch.arange(block, device=q.device)[:, None]
    near = (offset >= 0) & (offset <= before + after)  # (block, span)
    if key_pad_mask is None:
        key_pad_mask = torch.zeros(batch, n, dtype=torch.bool, device=q.device)
    # (batch, blocks, span): keys that are padding, or lie before the first or after the last
    outside = F.pad(key_pad_mask, (before, extra + after), value=True).unfold(1, span, block)
    allowed = near & ~outside[:, None, :, None, :]  # (batch, 1, blocks, block, span)
    weights = scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1)
    weights = F.dropout(weights.masked_fill(~allowed, 0.0), p_drop)  # no key: 0, not NaN
    out = weights @ key_blocks(v)  # (batch, heads, blocks, block, d_v)
    return out.flatten(2, 3)[:, :, :n]  # (batch, heads, n, d_v)
