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
from aiayn.model.dropout import Dropout
from aiayn.model.linear import Linear, affine, input_grad


class PositionwiseFeedForward(nn.Module):
    """Eq. 2: FFN(x) = max(0, x W1 + b1) W2 + b2, applied to each position alike.

    Training on a CPU in float32/64 (no autocast) runs it as one autograd function,
    `_CpuFeedForward`, the same products with the ReLU and its gradient applied in place
    to the function's own (tokens, d_ff) buffers. Autograd's ReLU allocates a fresh tensor
    for its output and another for its gradient; on a base model (33 MB each for a
    4,000-token batch, above glibc's 32 MB mmap ceiling, so mapped and page-faulted anew
    each time) those two made the training step 3% slower on a 2-core Xeon (in-process A/B).
    Elsewhere, with `p_drop_ffn`, and when `w_1` or `w_2` is not a plain `nn.Linear` (a
    subclass or wrapper, say for adapters, or one with hooks) the modules run as written,
    so that whatever was put in their place is what runs.
    """

    def __init__(self, d_model: int, d_ff: int, p_drop_ffn: float = 0.0) -> None:
        super().__init__()
        self.w_1 = Linear(d_model, d_ff)
        self.w_2 = Linear(d_ff, d_model)
        self.dropout = Dropout(p_drop_ffn)  # not in the paper; 0 by default

    def forward(self, x: Tensor) -> Tensor:
        if (
            torch.is_grad_enabled() and x.device.type == "cpu"
            and not torch.is_autocast_enabled("cpu") and (self.dropout.p == 0 or not self.training)
            and _plain_linear(self.w_1) and _plain_linear(self.w_2)
        ):  # fmt: skip
            w_1, w_2 = self.w_1, self.w_2
            rows = x.flatten(0, -2)  # (tokens, d_model)
            out = _CpuFeedForward.apply(rows, w_1.weight, w_1.bias, w_2.weight, w_2.bias)
            return out.view(x.shape)  # (batch, len, d_model)
        hidden = self.w_1(x)  # (batch, len, d_ff)
        # Without autograd (decoding) the ReLU goes in place: one fresh tensor fewer a step.
        hidden = torch.relu(hidden) if torch.is_grad_enabled() else hidden.relu_()
        return self.w_2(self.dropout(hidden))  # (batch, len, d_model)


_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")


def _plain_linear(module: nn.Module) -> bool:
    """Whether calling `module` would compute x W^T + b from its `weight` and `bias` and do
    nothing else: an `nn.Linear` itself, with no hooks of its own or global ones (the hook
    tables `nn.Module.__call__` consults; a table a PyTorch version lacks counts as empty)."""
    tables = nn.modules.module
    return type(module) in (nn.Linear, Linear) and not any(
        getattr(module, name, None) or getattr(tables, "_global" + name, None) for name in _HOOKS
    )


class _CpuFeedForward(torch.autograd.Function):
    """Eq. 2 on (tokens, d_model) rows with its backward written out; see
    `PositionwiseFeedForward`. The products are `model/linear.py`'s (oneDNN's where that is
    the faster). The output is a tensor of its own, not a view made inside the function,
    which autograd would not let callers modify in place."""

    @staticmethod
    def forward(ctx, rows, w_1, b_1, w_2, b_2):  # type: ignore[override]
        hidden = affine(rows, w_1, b_1, relu=True)  # (tokens, d_ff)
        ctx.save_for_backward(rows, hidden, w_1, w_2)
        return affine(hidden, w_2, b_2)  # (tokens, d_model)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):  # type: ignore[override]
        rows, hidden, w_1, w_2 = ctx.saved_tensors
        grad_hidden = input_grad(grad, w_2)  # (tokens, d_ff): ours, so the ReLU's gradient
        relu_grad = torch.ops.aten.threshold_backward.grad_input  # goes in place
        relu_grad(grad_hidden, hidden, 0, grad_input=grad_hidden)  # 0 where hidden <= 0
        grad_rows = input_grad(grad_hidden, w_1)  # (tokens, d_model)
        grad_w_1 = grad_hidden.t() @ rows  # (d_ff, d_model)
        grad_w_2 = grad.t() @ hidden  # (d_model, d_ff)
        return grad_rows, grad_w_1, grad_hidden.sum(0), grad_w_2, grad.sum(0)


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
        self.dropout = Dropout(p_drop)  # residual dropout (sec. 5.4)
        self.pre_norm = pre_norm

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        if self.pre_norm:
            return self.dropout.add(x, sublayer(self.norm(x)))
        return self.norm(self.dropout.add(x, sublayer(x)))


def _attention(config: ModelConfig, cross: bool) -> MultiHeadAttention:
    c = config
    return MultiHeadAttention(
        c.d_model, c.n_heads, c.key_dim, c.value_dim, c.p_drop_attn, cross, c.attention_bias
    )


def _residual(config: ModelConfig) -> Residual:
    return Residual(config.d_model, config.p_drop, config.norm == "pre", config.ln_eps)


class EncoderLayer(nn.Module):
    """Sec. 3.1: self-attention, then feed-forward, each inside a residual connection."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.self_attn = _attention(config, cross=False)
        self.ffn = PositionwiseFeedForward(config.d_model, config.d_ff, config.p_drop_ffn)
        self.res_attn, self.res_ffn = _residual(config), _residual(config)

    def forward(self, x: Tensor, src_pad_mask: Tensor | None) -> Tensor:
        x = self.res_attn(x, lambda y: self.self_attn(y, key_pad_mask=src_pad_mask))
        return self.res_ffn(x, self.ffn)  # (batch, src_len, d_model)


class DecoderLayer(nn.Module):
    """Sec. 3.1: masked self-attention, encoder-decoder attention, feed-forward."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.self_attn = _attention(config, cross=False)
        self.cross_attn = _attention(config, cross=True)
        self.ffn = PositionwiseFeedForward(config.d_model, config.d_ff, config.p_drop_ffn)
        self.res_self, self.res_cross, self.res_ffn = (_residual(config) for _ in range(3))

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
