"""Dropout (sec. 5.4), with a cheaper random mask on CPUs.

The function is `nn.Dropout`'s: in training each element is zeroed with probability p and
the survivors are scaled by 1 / (1 - p), so the expected output is the input (p as
rounded below, on a CPU); in evaluation it is the identity.

Why not `nn.Dropout` itself: on a CPU, PyTorch draws the mask with `bernoulli_`, one
floating-point sample per element, which on a 2-core Xeon takes ~5 ns per element: more
than the rest of a residual sub-layer's elementwise work, and ~10% of a small model's
training step (17 dropouts per step). Here the mask comes from 16 random bits per element,
drawn from the same generator (PyTorch's CPU generator, so `torch.manual_seed` and the
trainer's saved RNG state govern it as before) with `random_` over the full int64 range,
and one integer comparison: a mask of 1M elements in ~1.2 ms against `bernoulli_`'s ~5 ms.
An element survives when its bits, read as a signed int16 b, satisfy
b >= -2^15 + round(p * 2^16), so its drop probability is
round(p * 2^16) / 2^16 (`drop_probability`): p to within 2^-17 (0.1 becomes 0.100006).
The survivors are scaled by one over the keep probability of that rounded p, not of p, so
the expected output is exactly the input for every p (p = 0.99999 keeps 1 element in
65,536 instead of 1 in 100,000; scaled by 1 / (1 - p) = 100,000, the expected output would
be 1.53 times the input).
Why 16 bits and not 32:
drawing the bits is most of the mask's cost, and 32 bits per element made a small model's
training step 3% slower (in-process A/B on the 2-core Xeon) for a precision of p that no
training run can tell from 2^-17. It uses the random stream differently from `bernoulli_`,
so a run resumed across a change of this code does not retrace the masks the old code
would have drawn.

The mask is saved for backward as floats, 0 or 1 / (1 - p) (in float32 for a float32 or
lower-precision input, float64 for float64), not as bools: PyTorch multiplies a float
tensor by a bool one through a conversion pass, both forward and backward, and the
float mask made a small model's training step 2.6% faster (in-process A/B on the 2-core
Xeon). The price is 3 bytes more per element of each dropout's input while the step runs,
~50 MB on a small model with 4,000-token batches, ~190 MB on a base one.

`Dropout.add(x, y)` is x + Dropout(y), the residual connection's sum (sec. 3.1, 5.4), in one
pass on a CPU: `addcmul(x, y, mask)` instead of a product and then a sum. It draws the same
mask as `Dropout(y)` would, so the two agree exactly; it saves writing and re-reading one
(tokens, d_model) tensor per sub-layer. In-process A/B runs on the 2-core Xeon put a small
model's training step at +2.0%, +0.7%, +0.9% and -0.5% (so about +1%, near the noise) and a
base one's at +0.7%.

On other devices `F.dropout` is used: a GPU draws its mask in a fused kernel.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class Dropout(nn.Module):
    """`nn.Dropout(p)`'s function; see the module docstring for the CPU mask."""

    def __init__(self, p: float) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability must be in [0, 1], got {p}")
        self.p = p

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

    def extra_repr(self) -> str:
        return f"p={self.p}"


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
