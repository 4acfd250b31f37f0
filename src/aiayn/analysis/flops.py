"""Training FLOPs counted from what an update computes (Table 2's "Training Cost (FLOPs)").

The paper estimated its training costs as training time x number of GPUs x each GPU's
sustained single-precision capacity (sec. 6.1, footnote 5). Here they are counted from the
computation itself, per real target token:

- matrix products: every product of the teacher-forced forward pass (attention's
  projections, Q K^T and the weighted sum of the values of eq. 1, the feed-forward layers of
  eq. 2, the pre-softmax projection of the real target positions), 2 FLOPs per multiply-add;
  the backward pass does twice as many, a gradient for each of a product's two operands;
- the network's element-wise work (attention's softmax, LayerNorm, residual sums, dropout,
  ReLU, the embedding scale and the positions): an estimate per element, times 3 for
  forward and backward as for the products;
- the loss: log-softmax and label smoothing over the vocabulary (sec. 5.4), forward and
  backward;
- the optimizer: the gradient's scaling and norm, Adam's two moments and its step
  (sec. 5.3), per parameter and update, shared by the update's target tokens.

Sequence lengths enter only through attention (eq. 1 is quadratic in them); a count per
token assumes sentences of `length` target tokens and `src_per_tgt` source tokens per
target token (the paper's batches held about as many of each, sec. 5.1).
`torch.utils.flop_counter.FlopCounterMode` counts the products alone (mm, addmm, bmm and
the fused attention kernels); `tests/test_flops.py` checks the products against it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from aiayn.config import Config, ModelConfig
from aiayn.model.transformer import parameter_count

# Target tokens per sentence assumed for the length-dependent (attention) terms: about the
# mean of WMT14 En-De in 37k BPE pieces; attention is a small part at the paper's sizes.
DEFAULT_LENGTH = 25.0
# Forward FLOPs per element of the network's element-wise operations.
SOFTMAX_PER_SCORE = 5  # max, subtract, exp, sum, divide; and the 1/sqrt(d_k) scale below
LAYER_NORM_PER_ELEMENT = 8  # mean, subtract, square, sum, normalise, gain, bias, residual sum
DROPOUT_PER_ELEMENT = 2  # mask and rescale, where p_drop > 0
# Loss per logit: log-softmax (max, subtract, exp, sum), the smoothing sum, and backward:
# exp of the log-probabilities, minus the smoothed target, scaled.
LOSS_PER_LOGIT = 8
# Optimizer per parameter and update: the gradient's per-token scaling (1), its norm (2),
# Adam's first moment (3), second moment (3), sqrt, bias correction and eps (3), step (2).
OPTIMIZER_PER_PARAMETER = 14


@dataclass(frozen=True)
class FlopCount:
    """FLOPs by part (per target token, or per run: see `scaled`)."""

    matmul_forward: float
    matmul_backward: float
    elementwise: float
    loss: float
    optimizer: float

    @property
    def total(self) -> float:
        return sum(getattr(self, f.name) for f in fields(self))

    def scaled(self, factor: float) -> FlopCount:
        return FlopCount(*(getattr(self, f.name) * factor for f in fields(self)))


def forward_matmul_flops(
    model: ModelConfig, batch: int, src_len: float, tgt_len: float, tgt_tokens: float | None = None
) -> float:
    """FLOPs of the matrix products in one teacher-forced forward pass over `batch` sentence
    pairs padded to `src_len` and `tgt_len` positions, with the pre-softmax projection
    taken at `tgt_tokens` real target positions (None: all batch * tgt_len)."""
    d, h, dk, dv = model.d_model, model.n_heads, model.key_dim, model.value_dim
    src, tgt = batch * src_len, batch * tgt_len  # positions
    self_proj = 2 * d * h * (2 * dk + dv) + 2 * h * dv * d  # per position: W^{Q,K,V}, W^O
    ffn = 2 * 2 * d * model.d_ff  # per position: eq. 2's two products

    def scores(q_len: float, k_len: float) -> float:  # Q K^T and the weights times V
        return 2 * batch * h * q_len * k_len * (dk + dv)

    encoder = src * (self_proj + ffn) + scores(src_len, src_len)
    cross_proj = tgt * 2 * d * h * (dk + dv) + src * 2 * d * h * (dk + dv)  # W^Q, W^O; W^{K,V}
    decoder = tgt * (self_proj + ffn) + scores(tgt_len, tgt_len) + cross_proj
    decoder += scores(tgt_len, src_len)
    projected = tgt if tgt_tokens is None else tgt_tokens
    return model.n_layers * (encoder + decoder) + 2 * projected * d * model.vocab_size


def _elementwise_forward(model: ModelConfig, src_len: float, tgt_len: float) -> float:
    """Forward FLOPs of the network's element-wise work for one pair of these lengths."""
    d, h = model.d_model, model.n_heads
    dropout = DROPOUT_PER_ELEMENT * d if model.p_drop > 0 else 0.0
    sublayer = LAYER_NORM_PER_ELEMENT * d + dropout  # per position, per residual sub-layer
    ffn = 2 * model.d_ff + d  # ReLU and the first bias, the second bias

    def softmax(q_len: float, k_len: float) -> float:
        return q_len * h * (SOFTMAX_PER_SCORE * k_len + model.key_dim)

    encoder = src_len * (2 * sublayer + ffn) + softmax(src_len, src_len)
    decoder = tgt_len * (3 * sublayer + ffn) + softmax(tgt_len, tgt_len)
    decoder += softmax(tgt_len, src_len)
    embed = (src_len + tgt_len) * (2 * d + dropout)  # the sqrt(d_model) scale, the positions
    return model.n_layers * (encoder + decoder) + embed


def training_flops_per_token(
    config: Config, length: float = DEFAULT_LENGTH, src_per_tgt: float = 1.0
) -> FlopCount:
    """FLOPs of training per real target token, by part, for sentences of `length` target
    tokens and `src_per_tgt` source tokens per target token (see the module's docstring)."""
    model = config.model
    src_len = length * src_per_tgt
    forward = forward_matmul_flops(model, 1, src_len, length) / length
    elementwise = 3 * _elementwise_forward(model, src_len, length) / length
    per_update = OPTIMIZER_PER_PARAMETER * parameter_count(model)
    return FlopCount(
        matmul_forward=forward, matmul_backward=2 * forward, elementwise=elementwise,
        loss=float(LOSS_PER_LOGIT * model.vocab_size),
        optimizer=per_update / config.train.update_tokens,
    )  # fmt: skip


def training_flops(config: Config, target_tokens: float, length: float = DEFAULT_LENGTH) -> float:
    """Total FLOPs of training on `target_tokens` real target tokens."""
    return training_flops_per_token(config, length).total * target_tokens
