"""The label-smoothed loss of `loss.py` without storing the (tokens, V) logits: the
pre-softmax projection and the loss a chunk of tokens at a time, each chunk's gradient
computed with its loss (the fast path's replacement for `RealTokenLoss`).

    loss = ChunkedRealTokenLoss.from_core(RealTokenLoss(model, eps))  # in fast.for_training
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from aiayn.fast.attention import kernel_preference
from aiayn.fast.linear import affine, input_grad, onednn_products
from aiayn.loss import RealTokenLoss, row_losses, real_token_hidden

# Logits per chunk: on a CPU a chunk of 1M-4M logits is read several times while it is
# still in cache; on a GPU a chunk only bounds memory, and fewer chunks launch fewer kernels.
CPU_CHUNK_ELEMENTS = 1 << 22
GPU_CHUNK_ELEMENTS = 1 << 28


class ChunkedRealTokenLoss(RealTokenLoss):
    """`RealTokenLoss` through `projected_label_smoothed_loss`; with `compiled`
    (`train.compile`) the network runs through `torch.compile` (one graph with dynamic
    shapes for the trainer's many batch shapes), and so does each chunk's work between its
    two products, so that element-wise ops run as fused kernels. On a CUDA GPU the network
    runs with `attention_kernel` as PyTorch's first choice (`attention.kernel_preference`)."""

    def __init__(self, model, eps: float, compiled: bool = False, attention_kernel: str = "auto") -> None:
        super().__init__(model, eps)
        self.compiled, self.attention_kernel = compiled, attention_kernel

    @classmethod
    def from_core(
        cls, core: RealTokenLoss, compiled: bool = False, attention_kernel: str = "auto"
    ) -> ChunkedRealTokenLoss:
        return cls(core.model, core.eps, compiled, attention_kernel)

    def forward(self, src, tgt_in, positions, target):  # -> (smoothed sum, NLL sum)
        hidden_of = _compiled_real_token_hidden() if self.compiled else real_token_hidden
        with kernel_preference(self.attention_kernel, src.device):
            hidden = hidden_of(self.model, src, tgt_in, positions)  # (n_tokens, d_model)
        return projected_label_smoothed_loss(
            hidden, self.model.output_weight, target, self.eps, compiled=self.compiled
        )


@functools.cache
def _compiled_real_token_hidden():
    """`real_token_hidden` compiled once per process, dynamic=True (a graph for every
    (batch, length) shape instead of a recompilation for each)."""
    return torch.compile(real_token_hidden, dynamic=True)


def projected_label_smoothed_loss(
    hidden: Tensor, weight: Tensor, target: Tensor, eps: float, chunk_rows: int | None = None,
    compiled: bool = False,
) -> tuple[Tensor, Tensor]:
    """(smoothed_sum, nll_sum) of the logits hidden @ weight^T, which are never all stored.

    hidden: (n, d_model) decoder states of real target positions; weight: (V, d_model) the
    pre-softmax projection (sec. 3.4); target: (n,). The smoothed sum is differentiable
    with respect to hidden and weight; the NLL is for reporting and is not.

    Why: the logits and their log-softmax are the largest tensors of a training step
    (tokens x V floats each, 3.7 GB apiece for the paper's 25k-token batches and 37k
    vocabulary), and the passes over them in the loss and its backward cost more time
    than the rest of the loss. Since the gradient of H(q, p) with respect to the logits is
    simply p - q, each chunk of rows computes its logits, its loss and that gradient at
    once, and turns the gradient straight into the gradients of hidden and weight (the two
    matrix products autograd would do). Backward then only scales them by the incoming
    gradient. Same matrix products as `label_smoothed_loss(hidden @ weight.T, ...)`; only
    a chunk of logits at a time. Under autocast the products run in the autocast dtype,
    as `Transformer.project` would; the loss and the gradient of the logits in float32
    (float64 for a float64 model).

    `compiled`: the work between a chunk's two products (log-softmax, the loss, p - q) runs
    as one `torch.compile`d function, `_chunk_terms`, which reads the logits once and writes
    p - q once; eagerly it is five passes over (rows, V) tensors, most of them in float32.
    """
    if chunk_rows is None:
        budget = CPU_CHUNK_ELEMENTS if hidden.device.type == "cpu" else GPU_CHUNK_ELEMENTS
        chunk_rows = max(1, budget // weight.size(0))
    if torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad):
        return _ProjectedLoss.apply(hidden, weight, target, eps, chunk_rows, compiled)
    smoothed, nll, _, _ = _projected_sums(
        hidden, weight, target, eps, chunk_rows, (False, False), compiled
    )
    return smoothed, nll


class _ProjectedLoss(torch.autograd.Function):
    """The loss whose gradients `_projected_sums` computes during the forward pass."""

    @staticmethod
    def forward(ctx, hidden, weight, target, eps, chunk_rows, compiled):  # type: ignore[override]
        smoothed, nll, grad_hidden, grad_weight = _projected_sums(
            hidden, weight, target, eps, chunk_rows, ctx.needs_input_grad[:2], compiled
        )
        ctx.save_for_backward(grad_hidden, grad_weight)
        ctx.mark_non_differentiable(nll)
        return smoothed, nll

    @staticmethod
    @torch.autograd.function.once_differentiable  # the saved gradients are constants
    def backward(ctx, grad_smoothed, _grad_nll):  # type: ignore[override]
        grads = [None if g is None else g * grad_smoothed for g in ctx.saved_tensors]
        return *grads, None, None, None, None


def _eager_p_minus_q(
    log_p: Tensor, target: Tensor, eps: float, off: float, z_buf: Tensor | None,
    dtype: torch.dtype,
) -> Tensor:
    """d H(q, p) / d z = p - q for a chunk's log_p (rows, V), over log_p's own buffer. In
    float32 / float64 (log_p's dtype = `dtype`) the uniform -off is left to the rank-one
    correction after the products; else it is subtracted as p - q is rounded to `dtype`,
    into the spent logits buffer `z_buf` (None only where dtype is float32)."""
    g = log_p.exp_()  # (rows, V) p, over log_p in place: it is not needed again
    g[torch.arange(g.size(0), device=g.device), target] -= 1.0 - eps - off
    if dtype != g.dtype:
        g = torch.sub(g, off, out=z_buf[: g.size(0)])
    return g


def _chunk_terms(
    z: Tensor, target: Tensor, eps: float, off: float, acc: torch.dtype, with_grad: bool
) -> tuple[Tensor, Tensor, Tensor | None]:
    """One chunk's (smoothed sum, NLL sum, p - q or None): z (rows, V) logits, target
    (rows,); the sums in `acc`, p - q in z's dtype, with q's -off in every entry (no
    rank-one correction). What `_projected_sums` computes eagerly between the products,
    written for `torch.compile` to fuse (no in-place ops, no `out=`)."""
    log_p = torch.log_softmax(z.to(acc), dim=-1)  # (rows, V)
    smoothed, nll = (t.sum() for t in row_losses(log_p, target, eps))
    if not with_grad:
        return smoothed, nll, None
    classes = torch.arange(z.size(-1), device=z.device)  # (V,)
    q = torch.where(classes == target[:, None], 1.0 - eps, off)  # (rows, V)
    return smoothed, nll, (log_p.exp() - q).to(z.dtype)


@functools.cache
def _compiled_chunk_terms():
    """`_chunk_terms` compiled once per process, for every chunk shape (dynamic=True)."""
    return torch.compile(_chunk_terms, dynamic=True)


@torch.no_grad()
def _projected_sums(
    hidden: Tensor, weight: Tensor, target: Tensor, eps: float, chunk_rows: int,
    grads: tuple[bool, bool], compiled: bool = False,
) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:  # fmt: skip
    """Loss sums and d(smoothed_sum)/d hidden and d/d weight where `grads` asks for them
    (None where not), chunk by chunk.

    d H(q, p) / d z = p - q, with q = off everywhere plus c = 1 - eps - off at the target.
    The chunk's gradient is p with c taken from its target entries (one entry per row).
    In float32 / float64 the uniform -off is not subtracted from every logit but applied
    once to the products: (p - off) @ W = p @ W - off * sum_k W_k, and (p - off)^T H =
    p^T H - off * sum_rows H, which saves a pass over the logits. Under autocast it is
    subtracted while p - q is rounded to the autocast dtype (the pass that rounding makes
    anyway): a low-precision p @ W would lose the small difference to the rank-one term.
    """
    device = hidden.device.type
    # Autocast leaves float64 alone (as it would `Transformer.project`'s product).
    autocast = torch.is_autocast_enabled(device) and hidden.dtype != torch.float64
    dtype = torch.get_autocast_dtype(device) if autocast else hidden.dtype
    acc = torch.promote_types(dtype, torch.float32)  # the loss's and gradients' dtype
    w = weight.to(dtype)  # (V, d_model), cast once rather than once per chunk
    n_rows, n_classes = hidden.size(0), weight.size(0)
    eps = eps if n_classes > 1 else 0.0  # one class: q = p = 1, as in `row_losses`
    off = eps / (n_classes - 1) if n_classes > 1 else 0.0  # q(k) for k != y
    # Two tensors, not views of one: callers may divide the sums in place.
    smoothed_sum, nll_sum = (torch.zeros((), dtype=acc, device=hidden.device) for _ in range(2))
    grad_hidden = torch.empty_like(hidden) if grads[0] else None
    grad_weight = torch.zeros(weight.shape, dtype=acc, device=hidden.device) if grads[1] else None
    # Else -off goes into the rounding to dtype, or into the compiled chunk's p - q.
    rank_one = dtype == acc and off != 0.0 and not compiled
    with torch.autocast(device, enabled=False):
        # oneDNN's product, where it is the faster (fast/linear.py), writes fresh logits;
        # it runs in float32 only, so no rounding to dtype needs the logits buffer then.
        onednn = onednn_products(w, w)  # w: the products' dtype and device
        # Else one logits buffer, and always one log-probabilities buffer, for every chunk
        # (not a fresh allocation, and its page faults, per chunk).
        rows = min(chunk_rows, n_rows)
        z_buf = None if onednn else hidden.new_empty((rows, n_classes), dtype=dtype)
        log_p_buf = None if compiled else hidden.new_empty((rows, n_classes), dtype=acc)
        for start in range(0, n_rows, chunk_rows):
            h = hidden[start : start + chunk_rows].to(dtype)  # (rows, d_model)
            y = target[start : start + chunk_rows]  # (rows,)
            if onednn:
                z = affine(h, w, None)  # (rows, V) logits
            else:
                z = torch.mm(h, w.t(), out=z_buf[: h.size(0)])  # (rows, V) logits
            if compiled:
                smoothed, nll, g = _compiled_chunk_terms()(z, y, eps, off, acc, any(grads))
            else:
                log_p = torch.log_softmax(z, -1, dtype=acc, out=log_p_buf[: h.size(0)])  # (rows, V)
                smoothed, nll = (t.sum() for t in row_losses(log_p, y, eps))
                g = _eager_p_minus_q(log_p, y, eps, off, z_buf, dtype) if any(grads) else None
            smoothed_sum += smoothed
            nll_sum += nll
            if g is None:
                continue
            if grad_hidden is not None:
                grad_hidden[start : start + chunk_rows] = input_grad(g, w)  # (rows, d_model)
            if grad_weight is None:
                continue
            if dtype == acc:
                # (V, d_model), no temporary. (`addmm_` would do the same, but torch's
                # FlopCounterMode, which the benchmarks use, does not count it.)
                torch.addmm(grad_weight, g.t(), h, out=grad_weight)
            else:
                grad_weight += (g.t() @ h).to(acc)
    if rank_one and grad_hidden is not None:
        grad_hidden -= off * w.sum(dim=0)  # (d_model,)
    if grad_weight is not None:
        if rank_one:
            grad_weight -= off * hidden.sum(dim=0)  # (d_model,)
        grad_weight = grad_weight.to(weight.dtype)
    return smoothed_sum, nll_sum, grad_hidden, grad_weight
