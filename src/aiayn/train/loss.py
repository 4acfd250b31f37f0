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
"""

from __future__ import annotations

import torch
from torch import Tensor


def label_smoothed_loss(
    scores: Tensor, target: Tensor, eps: float, pad_id: int | None = None, log_probs: bool = False
) -> tuple[Tensor, Tensor]:
    """(smoothed_sum, nll_sum): sums over the positions whose target is not `pad_id`.

    scores: (..., V) logits, or log-probabilities when `log_probs`; computed in float32
    whatever their dtype. target: (...) class ids. Positions where target == pad_id add
    nothing (None: every position counts; the trainer passes only real positions).
    """
    lprobs = scores.float() if log_probs else scores.float().log_softmax(dim=-1)  # (..., V)
    lprobs = lprobs.reshape(-1, lprobs.size(-1))  # (n, V)
    target = target.reshape(-1)  # (n,)
    if pad_id is not None:
        keep = target.ne(pad_id)
        lprobs, target = lprobs[keep], target[keep]
    nll = -lprobs.gather(1, target[:, None]).squeeze(1)  # (n,)  -log p(y)
    n_classes = lprobs.size(-1)
    if eps == 0.0 or n_classes == 1:
        return nll.sum(), nll.sum()
    # -sum_k q(k) log p(k) = (1 - eps) nll + eps/(V-1) * (sum over k != y of -log p(k))
    others = -lprobs.sum(dim=-1) - nll  # (n,)
    smoothed = (1.0 - eps) * nll + (eps / (n_classes - 1)) * others
    return smoothed.sum(), nll.sum()
