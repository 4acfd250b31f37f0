"""The optimizer of sec. 5.3: Adam (beta1 0.9, beta2 0.98, eps 1e-9) and the learning rate
of eq. 3, a linear warm-up followed by inverse-square-root decay:

    lrate = d_model^-0.5 * min(step_num^-0.5, step_num * warmup_steps^-1.5)

Steps count from 1: the first update uses `noam_lr(1, ...)`. The rate is a pure function of
the step, so resuming needs only the step number; the trainer writes it into the
optimizer's param groups before each update.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

from aiayn.config import TrainConfig
from aiayn.data.batching import TokenBatchSampler
from aiayn.train import distributed


def noam_lr(step: int, d_model: int, warmup: int, scale: float = 1.0) -> float:
    """Eq. 3 times `scale`; peaks at step == warmup with scale * (d_model * warmup)^-0.5."""
    if step < 1:
        raise ValueError(f"steps count from 1, got {step}")
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def make_optimizer(params: Iterable[torch.nn.Parameter], train: TrainConfig) -> torch.optim.Adam:
    """Adam with the paper's betas and eps (sec. 5.3); the rate is set per step by the trainer.

    `fused`: PyTorch's one-kernel Adam, the same update as the per-parameter loop in fewer
    passes over the weights on a CPU and fewer launches on a GPU.
    """
    return torch.optim.Adam(
        params, lr=0.0, betas=tuple(train.betas), eps=train.adam_eps, fused=True
    )


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


def adam_step(
    optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler, params: list,
    factor: float, clip_norm: float, lr: float,
) -> tuple[str, float]:  # fmt: skip
    """One update of the summed gradients: scaled by `factor` (to a per-token mean), clipped
    to `clip_norm` (0: not), then Adam at rate `lr`. -> ("ok" | "bad" (a non-finite gradient:
    no step) | "overflow" (fp16: the scaler skipped the step and lowered its scale), the
    gradient norm)."""
    scaler.unscale_(optimizer)
    for p in params:
        if p.grad is not None:
            p.grad.mul_(factor)
    norm = torch.nn.utils.clip_grad_norm_(params, clip_norm or math.inf).item()
    if not math.isfinite(norm) and not scaler.is_enabled():
        return "bad", norm
    set_lr(optimizer, lr)
    scale = scaler.get_scale() if scaler.is_enabled() else 1.0
    scaler.step(optimizer)
    scaler.update()
    if scaler.is_enabled() and scaler.get_scale() < scale:
        return "overflow", norm
    return "ok", norm


def derive_accum_steps(
    sampler: TokenBatchSampler, update_tokens: int, env: distributed.DistEnv
) -> int:
    """Micro-batches per rank so that an update holds about `update_tokens` real target
    tokens (sec. 5.1: about 25000 per batch), from the mean of the first epoch's batches
    (padding does not count). Every rank must call it (a sum over ranks)."""
    batches = sampler.epoch_batches(0)
    tokens = sum(int(sampler.tgt_sizes[b].sum()) for b in batches)
    tokens, count = distributed.all_reduce_sum([float(tokens), float(len(batches))], env)
    per_batch = tokens / max(count, 1.0)
    return max(1, round(update_tokens / (env.world_size * per_batch)))
