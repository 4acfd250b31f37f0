"""bfloat16 training (`train.precision: bf16`, or `auto` on a CPU that multiplies bfloat16):
the fast path under autocast computes the reference path's float32 loss and gradients to
within bfloat16's rounding.

Stated tolerance: bfloat16 keeps 8 significant bits (a relative step of 2^-8 = 0.4%); the
products round their inputs to it and accumulate in float32. On a d_model-64 model the
loss agrees to 1% and each parameter's gradient to 5% of its norm (the float32 master
weights and Adam state are unchanged by autocast, so only the forward and backward round).
"""

from __future__ import annotations

import torch

from aiayn import fast
from aiayn.data.batching import collate
from aiayn.model.transformer import Transformer
from aiayn.loss import RealTokenLoss
from aiayn.train.validate import real_positions
from conftest import tiny_model_config


def _loss_and_grads(objective, batch, bf16: bool):
    positions, target = real_positions(batch.tgt_out, 0, torch.device("cpu"))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        smoothed, _ = objective(batch.src, batch.tgt_in, positions, target)
    params = list(objective.model.parameters())
    return smoothed.float(), torch.autograd.grad(smoothed, params)


def test_fast_path_in_bf16_matches_the_reference_in_float32():
    torch.manual_seed(0)
    config = tiny_model_config(vocab_size=50, d_model=64, d_ff=128)
    model = Transformer(config).train()
    g = torch.Generator().manual_seed(1)
    pairs = [(torch.randint(4, 50, (n,), generator=g).tolist(),
              torch.randint(4, 50, (n + 2,), generator=g).tolist()) for n in (5, 9, 12, 7)]  # fmt: skip
    batch = collate(pairs)
    ref_loss, ref_grads = _loss_and_grads(RealTokenLoss(model, 0.1), batch, bf16=False)
    fast_loss, fast_grads = _loss_and_grads(fast.for_training(RealTokenLoss(model, 0.1)), batch, bf16=True)
    assert fast_loss != ref_loss  # bfloat16 did round: the comparison below is not vacuous
    assert abs(fast_loss - ref_loss) <= 0.01 * abs(ref_loss)
    for ref, got in zip(ref_grads, fast_grads):
        assert got.dtype == torch.float32  # gradients land on the float32 master weights
        assert (got - ref).norm() <= 0.05 * ref.norm() + 1e-6
