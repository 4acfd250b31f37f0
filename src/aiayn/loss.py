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

Training takes the loss over the real target positions only (`RealTokenLoss`): padding
gets no decoder projection and no loss. The fast path (`aiayn.fast.loss`) computes the same
sums a chunk of tokens at a time, without storing all the logits.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def row_losses(log_p: Tensor, target: Tensor, eps: float) -> tuple[Tensor, Tensor]:
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
    smoothed, nll = row_losses(z.log_softmax(dim=-1), target, eps)
    return smoothed.sum(), nll.sum()


def real_token_hidden(model: nn.Module, src: Tensor, tgt_in: Tensor, positions: Tensor) -> Tensor:
    """Teacher-forced decoder states at the real target positions only.

    src: (batch, src_len), tgt_in: (batch, tgt_len), positions: (n_tokens,) flat indices
    into (batch * tgt_len) -> (n_tokens, d_model). Selecting them before the pre-softmax
    projection skips the padding's share of the model's largest matrix product.
    """
    src_pad = model.pad_mask(src)  # (batch, src_len), True = padding
    memory = model.encode(src, src_pad)  # (batch, src_len, d_model)
    hidden = model.decode(tgt_in, memory, src_pad)  # (batch, tgt_len, d_model)
    return hidden.reshape(-1, hidden.size(-1)).index_select(0, positions)  # (n_tokens, d_model)


class RealTokenLoss(nn.Module):
    """The training objective: (smoothed sum, NLL sum) of the model over the real target
    positions. A module, so that DistributedDataParallel can wrap model and loss together
    and the fast path can swap in its chunked version."""

    def __init__(self, model: nn.Module, eps: float) -> None:
        super().__init__()
        self.model, self.eps = model, eps

    def forward(
        self, src: Tensor, tgt_in: Tensor, positions: Tensor, target: Tensor
    ) -> tuple[Tensor, Tensor]:
        """positions, target: (n_tokens,) flat indices into (batch * tgt_len) and their ids."""
        hidden = real_token_hidden(self.model, src, tgt_in, positions)  # (n_tokens, d_model)
        logits = self.model.project(hidden)  # (n_tokens, vocab)
        return label_smoothed_loss(logits, target, self.eps)
