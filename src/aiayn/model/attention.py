"""Scaled dot-product and multi-head attention (sec. 3.2) and their masks. The decoding
cache that attention reads during search is in `model/cache.py`.

Mask convention, everywhere in aiayn: `pad_mask` is a bool tensor (batch, len) with
True = padding. PyTorch's `scaled_dot_product_attention` wants the opposite (True = attend); the
conversion happens in exactly one place, `attend_mask`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from aiayn.model.cache import LayerCache
from aiayn.model.window import band_mask, windowed_attention


def attend_mask(
    key_pad_mask: Tensor | None, causal: bool, q_len: int, k_len: int, device: torch.device,
    window: int = 0,
) -> Tensor | None:  # fmt: skip
    """The boolean mask (True = may attend) of eq. 1 (`MultiHeadAttention.attend`).

    key_pad_mask: (batch, k_len), True = padding. With `causal`, query i (the last q_len of
    k_len positions) sees keys j <= i + (k_len - q_len): the decoder's masking (sec. 3.2.3)
    also when a cache holds k_len - q_len earlier positions. A `window` > 0 also keeps keys
    farther than that from the query out (`model/window.py`). None when nothing is masked.
    """
    mask = None
    if key_pad_mask is not None:
        mask = ~key_pad_mask[:, None, None, :]  # (batch, 1, 1, k_len)
    if causal and q_len > 1:
        offset = k_len - q_len
        tri = torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril(diagonal=offset)
        mask = tri if mask is None else mask & tri  # (batch | 1, 1, q_len, k_len)
    if window:
        band = band_mask(q_len, k_len, window, causal, device)  # (q_len, k_len)
        mask = band if mask is None else mask & band
    return mask


def attention_weights(q: Tensor, k: Tensor, mask: Tensor | None) -> Tensor:
    """The softmax weights of eq. 1, (batch, heads, q_len, k_len): for plots and tests."""
    scores = q @ k.transpose(-2, -1) / q.size(-1) ** 0.5  # (batch, heads, q_len, k_len)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(dim=-1)


class MultiHeadAttention(nn.Module):
    """Sec. 3.2.2: h heads, each projecting to d_k (queries, keys) and d_v (values).

    Self-attention uses one fused projection for Q, K and V (one matmul instead of three);
    encoder-decoder attention projects queries from the decoder and fuses K and V from the
    encoder output. The weights are those of the paper's W^Q_i, W^K_i, W^V_i stacked by head.
    Like the paper's matrices they have no biases unless `bias` (`ModelConfig.attention_bias`).
    Self-attention with a `window` r > 0 is restricted to keys within r positions (sec. 4,
    `model/window.py`); encoder-decoder attention never is (the paper restricts only
    self-attention).
    """

    def __init__(
        self, d_model: int, n_heads: int, d_k: int, d_v: int, p_drop_attn: float, cross: bool,
        bias: bool = False, window: int = 0,
    ) -> None:  # fmt: skip
        super().__init__()
        self.n_heads, self.d_k, self.d_v, self.cross = n_heads, d_k, d_v, cross
        self.window = 0 if cross else window
        self.p_drop_attn = p_drop_attn
        if cross:
            self.w_q = nn.Linear(d_model, n_heads * d_k, bias=bias)
            self.w_kv = nn.Linear(d_model, n_heads * (d_k + d_v), bias=bias)
        else:
            self.w_qkv = nn.Linear(d_model, n_heads * (2 * d_k + d_v), bias=bias)
        self.w_o = nn.Linear(n_heads * d_v, d_model, bias=bias)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Xavier-uniform for each of W^Q, W^K, W^V and W^O (sec. 3.2.2's matrices), biases
        zero. The fused projections are initialised block by block, as the separate
        (heads * d_k, d_model) matrices they stack: Xavier over the fused (3 * heads * d_k,
        d_model) matrix would draw from a narrower range (std 0.031 instead of 0.044 at
        d_model 512), and cross-attention's W^Q would differ in scale from its W^K and W^V.
        """
        h_dk, h_dv = self.n_heads * self.d_k, self.n_heads * self.d_v
        blocks = [(self.w_q, [h_dk]), (self.w_kv, [h_dk, h_dv])] if self.cross else [
            (self.w_qkv, [h_dk, h_dk, h_dv])
        ]
        for linear, sizes in [*blocks, (self.w_o, [self.w_o.out_features])]:
            for weight in linear.weight.split(sizes, dim=0):  # views: initialised in place
                nn.init.xavier_uniform_(weight)
            if linear.bias is not None:
                nn.init.zeros_(linear.bias)

    def _heads(self, x: Tensor, dim: int) -> Tensor:
        # (batch, len, heads * dim) -> (batch, heads, len, dim)
        return x.unflatten(-1, (self.n_heads, dim)).transpose(1, 2)

    def project_kv(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Encoder-decoder keys and values from the encoder output (batch, src_len, d_model)."""
        k, v = self.w_kv(memory).split([self.n_heads * self.d_k, self.n_heads * self.d_v], dim=-1)
        return self._heads(k, self.d_k), self._heads(v, self.d_v)

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        key_pad_mask: Tensor | None = None,
        causal: bool = False,
        cache: LayerCache | None = None,
    ) -> Tensor:
        """x: (batch, q_len, d_model) -> (batch, q_len, d_model).

        Self-attention attends over x; encoder-decoder attention (`cross`) over `memory`.
        With a cache (the decoder during search) self-attention also sees the positions of
        earlier steps, and encoder-decoder attention computes its keys and values once.
        """
        if self.cross:
            q = self._heads(self.w_q(x), self.d_k)  # (batch, heads, q_len, d_k)
            if cache is not None and cache.cross_k is not None:
                k, v = cache.cross_k, cache.cross_v  # projected at the first step
            else:
                k, v = self.project_kv(memory)  # (batch, heads, src_len, d_k | d_v)
                if cache is not None:
                    cache.cross_k, cache.cross_v = k, v
        else:
            h_dk = self.n_heads * self.d_k
            q, k, v = self.w_qkv(x).split([h_dk, h_dk, self.n_heads * self.d_v], dim=-1)
            q, k, v = self._heads(q, self.d_k), self._heads(k, self.d_k), self._heads(v, self.d_v)
            if cache is not None:
                k, v = cache.extend(k, v)  # (batch, heads, earlier + q_len, d_k | d_v)
        p = self.p_drop_attn if self.training else 0.0
        out = self.attend(q, k, v, key_pad_mask, causal, p)  # (batch, heads, q_len, d_v)
        return self.w_o(out.transpose(1, 2).flatten(2))  # (batch, q_len, heads * d_v) -> d_model

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, key_pad_mask: Tensor | None, causal: bool,
        p_drop: float,
    ) -> Tensor:  # fmt: skip
        """Eq. 1 for each head: q (batch, heads, q_len, d_k), k and v (batch, heads, k_len,
        d_k | d_v), the queries the last q_len of the k_len positions -> (batch, heads, q_len,
        d_v). PyTorch's fused kernel computes exactly this formula (its scale is 1/sqrt(d_k))."""
        q_len, k_len = q.size(2), k.size(2)
        if 0 < self.window < q_len == k_len:  # restricted (sec. 4): O(window * len), not O(len^2)
            return windowed_attention(q, k, v, self.window, key_pad_mask, causal, p_drop)
        if causal and key_pad_mask is None and q_len == k_len:
            # A whole target at once (training): the kernel's own causal path, no mask tensor.
            return F.scaled_dot_product_attention(q, k, v, dropout_p=p_drop, is_causal=True)
        mask = attend_mask(key_pad_mask, causal, q_len, k_len, q.device, self.window)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p_drop)
