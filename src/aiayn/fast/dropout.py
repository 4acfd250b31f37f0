"""Dropout (sec. 5.4) with a cheaper random mask on CPUs, and the residual sum with it.

The function is `nn.Dropout`'s: in training each element is zeroed with probability p and
the survivors are scaled, so the expected output is the input; in evaluation it is the
identity. On a CPU PyTorch draws the mask with `bernoulli_`, one floating-point sample per
element, which costs more than the rest of a residual sub-layer's element-wise work. Here
the mask comes from 16 random bits per element, drawn from the same generator (so
`torch.manual_seed` and the trainer's saved RNG state govern it) with `random_` over the
full int64 range, and one integer comparison. An element survives when its bits, read as
a signed int16 b, satisfy b >= -2^15 + round(p * 2^16), so its drop probability is
round(p * 2^16) / 2^16 (`drop_probability`): p to within 2^-17. The survivors are scaled by
one over the keep probability of that rounded p, so the expected output is exactly the
input for every p. It draws other masks than `bernoulli_` from the same seed.

The mask is saved for backward as floats, 0 or 1 / (1 - p), not as bools: PyTorch
multiplies a float tensor by a bool one through a conversion pass, forward and backward.

`CompactDropout.add(x, y)` is x + Dropout(y), the residual connection's sum (sec. 3.1,
5.4), in one pass (`addcmul`); `FastResidual` uses it. On other devices `F.dropout` is used.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from aiayn.model.layers import Residual


class CompactDropout(nn.Dropout):
    """`nn.Dropout(p)`'s function; see the module docstring for the CPU mask."""

    @classmethod
    def from_core(cls, core: nn.Dropout) -> CompactDropout:
        fast = cls(core.p)
        fast.train(core.training)
        return fast

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        if x.device.type != "cpu":
            return F.dropout(x, self.p, training=True)
        return _CpuDropout.apply(x, self.p)

    def add(self, x: Tensor, y: Tensor) -> Tensor:
        """x + self(y): the residual sum, in one pass on a CPU (see the module docstring)."""
        if not self.training or self.p == 0.0:
            return x + y
        if y.device.type != "cpu":
            return x + F.dropout(y, self.p, training=True)
        return _CpuDropoutAdd.apply(x, y, self.p)


class FastResidual(Residual):
    """`Residual` (sec. 3.1) with the sum x + Dropout(y) in one pass (`CompactDropout.add`)."""

    @classmethod
    def from_core(cls, core: Residual) -> FastResidual:
        with torch.device("meta"):  # a placeholder norm, replaced below
            fast = cls(core.norm.normalized_shape[0], core.dropout.p, core.pre_norm, core.norm.eps)
        fast.norm, fast.dropout = core.norm, CompactDropout.from_core(core.dropout)
        fast.train(core.training)
        return fast

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        if self.pre_norm:
            return self.dropout.add(x, sublayer(self.norm(x)))
        return self.norm(self.dropout.add(x, sublayer(x)))


def _dropping_values(p: float) -> int:
    """How many of the 2^16 values of an element's 16 random bits drop it: p * 2^16, rounded."""
    return round(p * 2**16)


def drop_probability(p: float) -> float:
    """The probability with which `keep_mask` drops an element: p rounded to a multiple of
    2^-16, the resolution of its 16 random bits."""
    return _dropping_values(p) / 2**16


def keep_mask(
    shape: torch.Size, p: float, device: torch.device | str = "cpu", dtype: torch.dtype = torch.bool
) -> Tensor:
    """Mask, 1 (True) with probability 1 - drop_probability(p), else 0, from 16 bits per
    element; in `dtype`."""
    threshold = -(2**15) + _dropping_values(p)
    if threshold > 2**15 - 1:  # p (rounded) is 1: nothing survives
        return torch.zeros(shape, dtype=dtype, device=device)
    n = shape.numel()
    # random_(-2**63, None) fills every one of an int64's 64 bits (plain random_() leaves the
    # sign bit 0); each int64 is read as four int16 samples.
    bits = torch.empty((n + 3) // 4, dtype=torch.int64, device=device).random_(-(2**63), None)
    bits = bits.view(torch.int16)[:n].view(shape)  # uniform over [-2^15, 2^15)
    return torch.ge(bits, threshold, out=torch.empty(shape, dtype=dtype, device=device))


def _scaled_mask(like: Tensor, p: float) -> Tensor:
    """A mask for `like`: 0 or 1 / (1 - q), q = drop_probability(p) (so that the expected
    output is the input), in float32 (float64 for a float64 `like`)."""
    q = drop_probability(p)
    scale = 1.0 / (1.0 - q) if q < 1.0 else 0.0
    dtype = torch.promote_types(like.dtype, torch.float32)
    return keep_mask(like.shape, p, like.device, dtype).mul_(scale)


class _CpuDropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, p: float) -> Tensor:  # type: ignore[override]
        mask = _scaled_mask(x, p)
        ctx.save_for_backward(mask)
        return x.mul(mask).to(x.dtype)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:  # type: ignore[override]
        (mask,) = ctx.saved_tensors
        return grad.mul(mask).to(grad.dtype), None


class _CpuDropoutAdd(torch.autograd.Function):
    """x + y * mask in one pass; d/dx is the incoming gradient, d/dy that times the mask."""

    @staticmethod
    def forward(ctx, x: Tensor, y: Tensor, p: float) -> Tensor:  # type: ignore[override]
        mask = _scaled_mask(y, p)
        ctx.save_for_backward(mask)
        ctx.dtypes = x.dtype, y.dtype
        return torch.addcmul(x, y, mask).to(torch.promote_types(x.dtype, y.dtype))

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, Tensor, None]:  # type: ignore[override]
        (mask,) = ctx.saved_tensors
        x_dtype, y_dtype = ctx.dtypes
        return grad.to(x_dtype), grad.mul(mask).to(y_dtype), None
