"""The fast path: speed-ups beside the core, each a module swapped in for one core piece and
tested equal to it (tests/fast/). The core (`model/`, `train/loss.py`, `decode/`) is the
paper in stock PyTorch; `apply` gives a model (or the training loss with its model) the
fast pieces, over the same parameters:

    model = fast.apply(Transformer(config))                 # inference, search
    loss = fast.apply(RealTokenLoss(model, eps), compiled)  # training: the model's too

| core piece (what it computes) | fast piece | why |
| --- | --- | --- |
| `nn.Linear` | `linear.OneDnnLinear` | oneDNN's float32 products where MKL's are slower |
| `Projection` (sec. 3.4) | `linear.OneDnnProjection` | the same, for the output layer |
| `PositionwiseFeedForward` (eq. 2) | `feedforward.FusedFeedForward` | no fresh ReLU buffers |
| `nn.Dropout` (sec. 5.4) | `dropout.CompactDropout` | a 16-bit random mask on CPUs |
| `Residual` (sec. 3.1) | `dropout.FastResidual` | x + dropout(y) in one pass |
| `ScaledDotProductAttention` (eq. 1) | `attention.DecodingAttention` | decoding steps on CPUs |
| `RealTokenLoss` (sec. 5.4) | `loss.ChunkedRealTokenLoss` | no (tokens, vocab) logits |

The feed-forward swap is for eq. 2's ReLU and the chunked loss for logits without a bias:
a model with another `model.activation` or with `model.output_bias` keeps those core pieces.

Beside the swaps: `search.FastSearch` (a faster top-k and cache memory kept between
searches), `int8.quantize_int8` (int8 weights for CPU decoding) and
`attention.kernel_preference` (the GPU attention kernel). `--reference` (`train.fast:
false`) runs the core alone. Restricted self-attention (`model/window.py`) has no fast
piece: it stays the core's, and decoding keeps to its window through the cache's entries,
which the fast path's cache shares.
"""

from __future__ import annotations

from torch import nn

from aiayn.fast.attention import DecodingAttention
from aiayn.fast.dropout import CompactDropout, FastResidual
from aiayn.fast.feedforward import FusedFeedForward
from aiayn.fast.linear import OneDnnLinear, OneDnnProjection
from aiayn.fast.loss import ChunkedRealTokenLoss
from aiayn.model.attention import ScaledDotProductAttention
from aiayn.model.layers import PositionwiseFeedForward, Residual
from aiayn.model.transformer import Projection
from aiayn.train.loss import RealTokenLoss


def apply(module: nn.Module, compiled: bool = False) -> nn.Module:
    """Swap every core piece in `module` (itself included) for its fast one; -> the module
    (a new one only where `module` itself is a core piece, as `RealTokenLoss` is).
    `compiled`: the training loss runs through `torch.compile` (`train.compile`).
    Applying twice changes nothing more: fast pieces are not swapped again."""
    _swap_children(module, compiled)
    fast = _fast_piece(module, compiled)
    return module if fast is None else fast


def _swap_children(module: nn.Module, compiled: bool) -> None:
    for name, child in list(module.named_children()):
        fast = _fast_piece(child, compiled)
        if fast is not None:
            setattr(module, name, fast)
            child = fast
        _swap_children(child, compiled)


def _fast_piece(module: nn.Module, compiled: bool) -> nn.Module | None:
    """The fast counterpart of a core piece (exact types: a subclass is someone's own
    module, kept as it is), or None."""
    kind = type(module)
    if kind is nn.Linear:
        return OneDnnLinear.from_core(module)
    if kind is Projection:
        return OneDnnProjection()
    if kind is PositionwiseFeedForward and type(module.activation) is nn.ReLU:  # its fused ReLU
        return FusedFeedForward.from_core(module)
    if kind is nn.Dropout:
        return CompactDropout.from_core(module)
    if kind is Residual:
        return FastResidual.from_core(module)
    if kind is ScaledDotProductAttention:
        return DecodingAttention()
    if kind is RealTokenLoss and module.model.output_bias is None:  # its logits have none
        return ChunkedRealTokenLoss.from_core(module, compiled)
    return None
