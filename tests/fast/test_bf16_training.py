"""bfloat16 training (`train.precision: bf16`, or `auto` on a CPU that multiplies bfloat16):
the fast path under autocast rounds as the core does under autocast, and both compute the
float32 loss and gradients to within bfloat16's rounding.

Two comparisons, each with its own tolerance:
- fast path against core, both in bfloat16: the same roundings, so the same values up to
  the order of float32 sums (a sum that lands on the other side of a rounding boundary moves
  one element by one bfloat16 step). Bound: half a bfloat16 step, 2^-9, of each gradient's
  norm; a piece rounding anything the core does not round would move every element.
- bfloat16 against float32: bfloat16 keeps 8 significant bits, so each rounding errs by up
  to u = 2^-9 (0.2%). A parameter's gradient comes through 20-odd rounded products (forward
  and back, 2 + 2 layers), and the gradients of LayerNorm gains and of biases are sums over
  every token, whose cancellation raises their relative error. Measured in this setting over
  4 seeds on a CPU that emulates bfloat16 (it rounds the inputs as native bfloat16 dot
  products do; the two differ only in the order of float32 sums): loss within 0.03%, all
  gradients together within 2.0-3.1% of their norm, the worst single parameter 4.1-7.5%.
  Bounds, twice the worst measured: the loss 1%, all gradients 2^-4 (6.25%), each
  parameter 2^-3 (12.5%). A bug errs by far more: a gradient left in bfloat16 on the
  float32 master weights, a missing cast or scale, a piece run in the wrong dtype.
"""

from __future__ import annotations

import copy

import torch

from aiayn import fast
from aiayn.data.batching import collate
from aiayn.model.transformer import Transformer
from aiayn.loss import RealTokenLoss
from aiayn.train.validate import real_positions
from conftest import tiny_model_config

HALF_STEP = 2.0**-9  # half a bfloat16 step: 8 significant bits


def _loss_and_grads(objective, batch, bf16: bool):
    positions, target = real_positions(batch.tgt_out, 0, torch.device("cpu"))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        smoothed, _ = objective(batch.src, batch.tgt_in, positions, target)
    params = list(objective.model.parameters())
    return smoothed.float(), torch.autograd.grad(smoothed, params)


def _model_and_batch():
    torch.manual_seed(0)
    model = Transformer(tiny_model_config(vocab_size=50, d_model=64, d_ff=128)).train()
    g = torch.Generator().manual_seed(1)
    pairs = [(torch.randint(4, 50, (n,), generator=g).tolist(),
              torch.randint(4, 50, (n + 2,), generator=g).tolist()) for n in (5, 9, 12, 7)]  # fmt: skip
    return model, collate(pairs)


def _relative(got: tuple, ref: tuple) -> float:
    """|got - ref| / |ref| over all the gradients together."""
    diff = sum((a - b).norm() ** 2 for a, b in zip(got, ref)) ** 0.5
    return (diff / sum(b.norm() ** 2 for b in ref) ** 0.5).item()


def test_fast_path_in_bf16_rounds_as_the_core_in_bf16():
    model, batch = _model_and_batch()
    core_loss, core_grads = _loss_and_grads(RealTokenLoss(model, 0.1), batch, bf16=True)
    objective = fast.for_training(RealTokenLoss(copy.deepcopy(model), 0.1))
    fast_loss, fast_grads = _loss_and_grads(objective, batch, bf16=True)
    assert abs(fast_loss - core_loss) <= HALF_STEP * abs(core_loss)
    for ref, got in zip(core_grads, fast_grads):
        assert got.dtype == torch.float32  # gradients land on the float32 master weights
        assert (got - ref).norm() <= HALF_STEP * ref.norm() + 1e-6


def test_fast_path_in_bf16_matches_the_reference_in_float32():
    model, batch = _model_and_batch()
    ref_loss, ref_grads = _loss_and_grads(RealTokenLoss(model, 0.1), batch, bf16=False)
    objective = fast.for_training(RealTokenLoss(copy.deepcopy(model), 0.1))
    fast_loss, fast_grads = _loss_and_grads(objective, batch, bf16=True)
    assert fast_loss != ref_loss  # bfloat16 did round: the comparison below is not vacuous
    assert abs(fast_loss - ref_loss) <= 0.01 * abs(ref_loss)
    assert _relative(fast_grads, ref_grads) <= 2.0**-4
    for ref, got in zip(ref_grads, fast_grads):
        assert got.dtype == torch.float32
        assert (got - ref).norm() <= 2.0**-3 * ref.norm() + 1e-6
