"""The model's linear maps, x W^T + b, on the faster of the CPU's two float32 products.

PyTorch multiplies float32 matrices on the CPU with Intel's MKL. MKL takes its fastest
(AVX-512) kernels only on Intel processors; on other x86 processors it runs slower code.
oneDNN, also inside PyTorch, picks its kernels by instruction set alone. Measured on a
2-vCPU AMD EPYC (Zen 4, AVX-512), float32, 2 threads, each product alone, medians
(GFLOP/s, oneDNN against MKL):

| product (tokens 3,760) | x W^T + b | g W | g^T x |
| --- | --- | --- | --- |
| d_model 256, d_ff 1,024 | 195 / 157 | 209 / 175 | 127 / 172 |
| d_model 512, d_ff 2,048 | 199 / 141 | 200 / 142 | 155 / 157 |

and while decoding, (128 x 512) x (512 x 2,048) in 1.46 ms against 1.77, the output
projection (32 x 512) x (512 x 8,000) in 2.1 ms against 4.0. So on x86 CPUs not made by
Intel the products x W^T + b (forward) and g W (the input's gradient) go through oneDNN's
linear. The weight's gradient g^T x stays with MKL: oneDNN's linear would first copy both
transposed operands, and is slower for it (last column). On Intel CPUs MKL is kept for
all three (there it measured 382 GFLOP/s against oneDNN's 366 for the largest product).

Both are float32 products, accumulated in float32 in different orders: they differ in
the last bits, as two block sizes of one library do. Float64, autocast and other devices
take PyTorch's own product, as does code that `torch.compile` traces (the compiler picks
its own kernels).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class Linear(nn.Linear):
    """`nn.Linear` whose product is `linear` below; the same parameters and state dict."""

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias)


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """x W^T + b: (..., in), weight (out, in), bias (out,) or None -> (..., out)."""
    if not onednn_products(x, weight):
        return F.linear(x, weight, bias)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias)):
        return _OneDnnLinear.apply(x, weight, bias)
    return _onednn_linear(x, weight, bias)


def affine(x: Tensor, weight: Tensor, bias: Tensor | None, relu: bool = False) -> Tensor:
    """x W^T + b, then max(0, .) with `relu`, outside autograd (for hand-written backward
    passes); (..., in) -> (..., out), a tensor of its own."""
    if onednn_products(x, weight):
        return _onednn_linear(x, weight, bias, "relu" if relu else "none")
    out = F.linear(x, weight, bias)
    return out.relu_() if relu else out


def input_grad(grad: Tensor, weight: Tensor) -> Tensor:
    """The gradient of x W^T + b with respect to x: grad W; (..., out) -> (..., in)."""
    if onednn_products(grad, weight):
        return _onednn_linear(grad, weight.t(), None)  # grad (W^T)^T, W^T a view
    return grad @ weight


def onednn_products(x: Tensor, weight: Tensor) -> bool:
    """Whether x's product with `weight` goes through oneDNN (see the module docstring)."""
    return (
        x.dtype == torch.float32 and weight.dtype == torch.float32
        and x.device.type == "cpu" and not torch.is_autocast_enabled("cpu")
        and not torch.compiler.is_compiling() and onednn_faster_here()
    )  # fmt: skip


@functools.cache
def onednn_faster_here() -> bool:
    """Whether this machine's float32 products run faster in oneDNN than in MKL: an x86 CPU
    of a vendor other than Intel, with PyTorch built with both libraries."""
    return (
        torch.backends.mkl.is_available() and torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkldnn, "_linear_pointwise")
        and cpu_vendor() not in ("GenuineIntel", "")
    )  # fmt: skip


def cpu_vendor(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The x86 vendor string ("GenuineIntel", "AuthenticAMD", ...), or "" where the system
    does not say (no /proc/cpuinfo, or a CPU that is not x86)."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as lines:
            for line in lines:
                key, _, value = line.partition(":")
                if key.strip() == "vendor_id":
                    return value.strip()
    except OSError:
        pass
    return ""


def _onednn_linear(x: Tensor, weight: Tensor, bias: Tensor | None, attr: str = "none") -> Tensor:
    # oneDNN's inner product; takes any leading dims, like F.linear. attr: a fused
    # element-wise op on the output ("none" or "relu").
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, attr, [], "")


class _OneDnnLinear(torch.autograd.Function):
    """x W^T + b with oneDNN's products forward and for the input's gradient, MKL's for the
    weight's (see the module docstring)."""

    @staticmethod
    def forward(ctx, x, weight, bias):  # type: ignore[override]
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return _onednn_linear(x, weight, bias)  # (..., out)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):  # type: ignore[override]
        x, weight = ctx.saved_tensors
        grad_x = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_x = input_grad(grad, weight)  # (..., in)
        rows = grad.reshape(-1, grad.size(-1))  # (tokens, out)
        if ctx.needs_input_grad[1]:
            grad_weight = rows.t() @ x.reshape(-1, x.size(-1))  # (out, in)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_bias = rows.sum(0)  # (out,)
        return grad_x, grad_weight, grad_bias
