"""The Transformer's building blocks: feed-forward (sec. 3.3), embeddings (3.4), positional
encoding (3.5), the residual sub-layer connection (3.1) and the encoder / decoder layers."""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import Tensor, nn

from aiayn.config import ModelConfig
from aiayn.model.attention import MultiHeadAttention
from aiayn.model.cache import LayerCache


class PositionwiseFeedForward(nn.Module):
    """Eq. 2: FFN(x) = max(0, x W1 + b1) W2 + b2, at each position (`act`: or swish, gelu)."""

    def __init__(self, d_model: int, d_ff: int, p_drop_ffn: float = 0.0, act: str = "relu") -> None:
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(p_drop_ffn)  # not in the paper; 0 by default
        self.activation = {"relu": nn.ReLU, "swish": nn.SiLU, "gelu": nn.GELU}[act]()

    def forward(self, x: Tensor) -> Tensor:
        hidden = self.activation(self.w_1(x))  # (batch, len, d_ff)
        return self.w_2(self.dropout(hidden))  # (batch, len, d_model)


class Embedding(nn.Module):
    """Token embedding multiplied by sqrt(d_model) (sec. 3.4).

    The same `weight` serves as the pre-softmax projection when embeddings are tied; the
    scaling applies to the embedding lookup only, not to the projection.
    """

    def __init__(self, vocab_size: int, d_model: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab_size, d_model))
        self.scale = math.sqrt(d_model)

    def forward(self, tokens: Tensor) -> Tensor:
        return nn.functional.embedding(tokens, self.weight) * self.scale  # (batch, len, d_model)


def sinusoid_table(n_positions: int, d_model: int) -> Tensor:
    """Sec. 3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(same).

    Sines on even dimensions and cosines on odd ones, interleaved as the formula says (not
    the concatenated halves some implementations use). -> (n_positions, d_model) float64,
    cast to the activations' dtype when added, so float64 models get exact positions.
    """
    pos = torch.arange(n_positions, dtype=torch.float64)[:, None]  # (n_positions, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (d_model / 2,)
    angle = pos / torch.pow(10000.0, two_i / d_model)  # (n_positions, d_model / 2)
    table = torch.zeros(n_positions, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle)[:, : d_model // 2]
    return table


class PositionalEncoding(nn.Module):
    """Adds position information: fixed sinusoids (sec. 3.5) or, as Table 3 row E, learned
    embeddings. Sinusoids extend to any length; learned positions stop at `max_len`."""

    def __init__(self, d_model: int, max_len: int, learned: bool) -> None:
        super().__init__()
        self.d_model, self.max_len, self.learned = d_model, max_len, learned
        if learned:
            self.weight = nn.Parameter(torch.empty(max_len, d_model))
        else:
            # Not a parameter and not saved: it is a function of the config.
            self.register_buffer("table", sinusoid_table(max_len, d_model), persistent=False)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """x: (batch, len, d_model) at positions offset .. offset + len - 1."""
        end = offset + x.size(1)
        if self.learned:
            if end > self.max_len:
                raise ValueError(
                    f"sequence of {end} positions exceeds the learned positional embedding's "
                    f"max_len={self.max_len}; truncate the input or train with a larger model.max_len"
                )
            return x + self.weight[offset:end]
        if end > self.table.size(0):
            self.table = sinusoid_table(max(end, 2 * self.table.size(0)), self.d_model).to(x.device)
        return x + self.table[offset:end].to(x.dtype)


class Residual(nn.Module):
    """The sub-layer connection of sec. 3.1: LayerNorm(x + Dropout(Sublayer(x))).

    That is post-LN, the paper's form. With `pre_norm`, x + Dropout(Sublayer(LayerNorm(x))):
    the later pre-LN variant, which then needs a final LayerNorm after the stack.
    """

    def __init__(self, d_model: int, p_drop: float, pre_norm: bool, eps: float) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d_model, eps=eps)
        self.dropout = nn.Dropout(p_drop)  # residual dropout (sec. 5.4)
        self.pre_norm = pre_norm

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        if self.pre_norm:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))


def _attention(config: ModelConfig, cross: bool) -> MultiHeadAttention:
    c = config
    return MultiHeadAttention(c.d_model, c.n_heads, c.key_dim, c.value_dim, c.p_drop_attn,
                              cross, c.attention_bias, c.attention_window)  # fmt: skip


def _residual(config: ModelConfig) -> Residual:
    return Residual(config.d_model, config.p_drop, config.norm == "pre", config.ln_eps)


class EncoderLayer(nn.Module):
    """Sec. 3.1: self-attention, then feed-forward, each inside a residual connection."""

    def __init__(self, c: ModelConfig) -> None:
        super().__init__()
        self.self_attn = _attention(c, cross=False)
        self.ffn = PositionwiseFeedForward(c.d_model, c.d_ff, c.p_drop_ffn, c.activation)
        self.res_attn, self.res_ffn = _residual(c), _residual(c)

    def forward(self, x: Tensor, src_pad_mask: Tensor | None) -> Tensor:
        x = self.res_attn(x, lambda y: self.self_attn(y, key_pad_mask=src_pad_mask))
        return self.res_ffn(x, self.ffn)  # (batch, src_len, d_model)


class DecoderLayer(nn.Module):
    """Sec. 3.1: masked self-attention, encoder-decoder attention, feed-forward."""

    def __init__(self, c: ModelConfig) -> None:
        super().__init__()
        self.self_attn = _attention(c, cross=False)
        self.cross_attn = _attention(c, cross=True)
        self.ffn = PositionwiseFeedForward(c.d_model, c.d_ff, c.p_drop_ffn, c.activation)
        self.res_self, self.res_cross, self.res_ffn = (_residual(c) for _ in range(3))

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None,
        src_pad_mask: Tensor | None,
        cache: LayerCache | None = None,
    ) -> Tensor:
        # Target padding needs no mask: it sits after the real tokens, and the causal mask
        # already keeps every real position from seeing later ones.
        x = self.res_self(x, lambda y: self.self_attn(y, causal=True, cache=cache))
        x = self.res_cross(
            x, lambda y: self.cross_attn(y, memory, key_pad_mask=src_pad_mask, cache=cache)
        )
        return self.res_ffn(x, self.ffn)  # (batch, tgt_len, d_model)
