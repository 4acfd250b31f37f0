"""Eq. 3 (sec. 5.3): warm-up then inverse-square-root decay; Adam with the paper's betas."""

from __future__ import annotations

import math

import pytest

from aiayn.config import TrainConfig
from aiayn.train.schedule import make_optimizer, noam_lr


@pytest.mark.parametrize("step", [1, 4000, 16000])
def test_equals_eq3(step: int) -> None:
    expected = 512**-0.5 * min(step**-0.5, step * 4000**-1.5)
    assert noam_lr(step, 512, 4000) == pytest.approx(expected, rel=1e-12)


def test_peak_at_warmup_for_the_base_model() -> None:
    peak = noam_lr(4000, 512, 4000)
    assert peak == pytest.approx(512**-0.5 * 4000**-0.5) and peak == pytest.approx(6.99e-4, rel=1e-3)
    assert noam_lr(3999, 512, 4000) < peak and noam_lr(4001, 512, 4000) < peak


def test_linear_warmup_then_inverse_sqrt_decay_and_scale() -> None:
    assert noam_lr(2000, 512, 4000) == pytest.approx(noam_lr(1000, 512, 4000) * 2)
    assert noam_lr(16000, 512, 4000) == pytest.approx(noam_lr(4000, 512, 4000) / 2)
    assert noam_lr(10, 512, 4000, scale=2.0) == pytest.approx(2 * noam_lr(10, 512, 4000))
    with pytest.raises(ValueError):
        noam_lr(0, 512, 4000)


def test_adam_uses_the_papers_betas_and_eps() -> None:
    import torch

    group = make_optimizer([torch.nn.Parameter(torch.zeros(2))], TrainConfig()).param_groups[0]
    assert group["betas"] == (0.9, 0.98) and group["eps"] == 1e-9
    assert not math.isnan(group["lr"])
