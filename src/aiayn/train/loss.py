"""Label-smoothed cross-entropy (sec. 5.4: "we employed label smoothing of value eps_ls = 0.1").

How the smoothing mass is spread — the choice, pinned by `tests/test_loss.py`:

    q(y) = 1 - eps                 for the target class y
    q(k) = eps / (V - 1)           for each of the V - 1 other classes (padding included)

This is tensor2tensor's `smoothing_cross_entropy` (the code the paper's results came from:
`low_confidence = (1 - confidence) / (vocab_size - 1)`), and fairseq's
`label_smoothed_nll_loss` gives the same distribution. The Annotated Transformer instead
spreads eps over V - 2 classes, putting no mass on padding; we keep the paper's code.

The smoothed loss returned is the cross-entropy H(q, p) = -sum_k q(k) log p(k), summed
over real target positions. tensor2tensor also subtracts the constant H(q) (the minimum
reachable) for display; it does not change gradients, and we do not subtract it, so with
eps = 0 the smoothed loss is exactly the NLL. The NLL, -log p(y), is returned beside it:
it is the true per-token loss, exp(NLL / tokens) the perplexity.

Training does not build the (tokens, V) logits at once: `projected_label_smoothed_loss`
takes the decoder's hidden states and the pre-softmax weight and works through the tokens a
chunk at a time, computing each chunk's loss and its gradient together (see its docstring).
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from aiayn.model.linear import affine, input_grad, onednn_products

# Logits per chunk in `projected_label_smoothed_loss`. On a 2-core Xeon, chunks of 1M-4M
# logits (128-512 rows of an 8k vocabulary) made a small-model step ~4% faster than one
# chunk of the whole batch: a chunk is read several times while it is still in cache. On a
# GPU a chunk only bounds memory, and fewer, larger chunks launch fewer kernels.
CPU_CHUNK_ELEMENTS = 1 << 22
GPU_CHUNK_ELEMENTS = 1 << 28


def _row_losses(log_p: Tensor, target: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """(smoothed, nll) per row of log-probabilities log_p: (n, V) float32 or float64;
    target: (n,).

    nll = -log p(y), and -sum_k q(k) log p(k) = (1 - eps) nll + eps / (V - 1) * (the sum
    over k != y of -log p(k)).
    """
    n_classes = log_p.size(-1)
    nll = -log_p.gather(1, target[:, None]).squeeze(1)  # (n,)
    if eps == 0.0 or n_classes == 1:
        return nll, nll
    others = -log_p.sum(dim=-1) - nll  # (n,)  sum over k != y of -log p_k
    return (1.0 - eps) * nll + (eps / (n_classes - 1)) * others, nll


def label_smoothed_loss(
    scores: Tensor, target: Tensor, eps: float, pad_id: int | None = None
) -> tuple[Tensor, Tensor]:
    """(smoothed_sum, nll_sum) of given scores: sums over the positions whose target is not
    `pad_id`.

    scores: (..., V) logits (log-probabilities are logits too: softmax leaves them as they
    are), computed in float32 (float64 if they are). target: (...) class ids. Positions
    where target == pad_id add nothing (None: every position counts).
    """
    z = scores.to(torch.promote_types(scores.dtype, torch.float32))
    z = z.reshape(-1, z.size(-1))  # (n, V)
    target = target.reshape(-1)  # (n,)
    if pad_id is not None:
        keep = target.ne(pad_id)
        z, target = z[keep], target[keep]
    smoothed, nll = _row_losses(z.log_softmax(dim=-1), target, eps)
    return smoothed.sum(), nll.sum()


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
    On an H100 with a 37k vocabulary those passes were 13% of a base step.
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
    smoothed, nll = (t.sum() for t in _row_losses(log_p, target, eps))
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
    eps = eps if n_classes > 1 else 0.0  # one class: q = p = 1, as in `_row_losses`
    off = eps / (n_classes - 1) if n_classes > 1 else 0.0  # q(k) for k != y
    # Two tensors, not views of one: callers may divide the sums in place.
    smoothed_sum, nll_sum = (torch.zeros((), dtype=acc, device=hidden.device) for _ in range(2))
    grad_hidden = torch.empty_like(hidden) if grads[0] else None
    grad_weight = torch.zeros(weight.shape, dtype=acc, device=hidden.device) if grads[1] else None
    # Else -off goes into the rounding to dtype, or into the compiled chunk's p - q.
    rank_one = dtype == acc and off != 0.0 and not compiled
    with torch.autocast(device, enabled=False):
        # oneDNN's product, where it is the faster (model/linear.py), writes fresh logits;
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
                smoothed, nll = (t.sum() for t in _row_losses(log_p, y, eps))
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
