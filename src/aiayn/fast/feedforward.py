"""Eq. 2 for CPU training as one autograd function, its ReLU applied in place.

Autograd's ReLU allocates a fresh (tokens, d_ff) tensor for its output and another for its
gradient; on a base model with a few thousand tokens each is larger than glibc's mmap
threshold, so it is mapped and page-faulted anew at every step. `_CpuFeedForward` computes
the same products (`fast/linear.py`'s) with the ReLU and its gradient written into the
function's own buffers.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from aiayn.fast.linear import OneDnnLinear, affine, input_grad
from aiayn.model.layers import PositionwiseFeedForward

_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")


class FusedFeedForward(PositionwiseFeedForward):
    """`PositionwiseFeedForward` with eq. 2's ReLU (the fast path keeps the core module for
    another `model.activation`) whose CPU training step (float32/64, no autocast, no active
    feed-forward dropout, plain linear maps) is `_CpuFeedForward`; elsewhere, and when
    `w_1` or `w_2` is not a plain linear map (a wrapper, or one with hooks), the modules run
    as written, so that whatever was put in their place is what runs."""

    @classmethod
    def from_core(cls, core: PositionwiseFeedForward) -> FusedFeedForward:
        with torch.device("meta"):  # placeholders, replaced below: no memory, no random draws
            fast = cls(1, 1, core.dropout.p)
        fast.w_1, fast.w_2, fast.dropout = core.w_1, core.w_2, core.dropout
        fast.train(core.training)
        return fast

    def forward(self, x: Tensor) -> Tensor:
        if not torch.is_grad_enabled():
            hidden = self.w_1(x).relu_()  # (batch, len, d_ff): in place, one tensor fewer
            return self.w_2(self.dropout(hidden))  # (batch, len, d_model)
        if (
            x.device.type == "cpu" and not torch.is_autocast_enabled("cpu")
            and x.dtype in (torch.float32, torch.float64)
            and (self.dropout.p == 0 or not self.training)
            and _plain_linear(self.w_1) and _plain_linear(self.w_2)
        ):  # fmt: skip
            w_1, w_2 = self.w_1, self.w_2
            rows = x.flatten(0, -2)  # (tokens, d_model)
            out = _CpuFeedForward.apply(rows, w_1.weight, w_1.bias, w_2.weight, w_2.bias)
            return out.view(x.shape)  # (batch, len, d_model)
        return super().forward(x)


def _plain_linear(module: nn.Module) -> bool:
    """Whether calling `module` would compute x W^T + b from its `weight` and `bias` and do
    nothing else: an `nn.Linear` itself, with no hooks of its own or global ones (the hook
    tables `nn.Module.__call__` consults; a table a PyTorch version lacks counts as empty)."""
    tables = nn.modules.module
    return type(module) in (nn.Linear, OneDnnLinear) and not any(
        getattr(module, name, None) or getattr(tables, "_global" + name, None) for name in _HOOKS
    )


class _CpuFeedForward(torch.autograd.Function):
    """Eq. 2 on (tokens, d_model) rows with its backward written out. The output is a tensor
    of its own, not a view made inside the function, which autograd would not let callers
    modify in place."""

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
