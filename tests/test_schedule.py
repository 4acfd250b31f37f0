"""Eq. 3 (sec. 5.3): warm-up then inverse-square-root decay; Adam with the paper's betas."""

from __future__ import annotations

import math

import pytest
from torch.optim.optimizer import register_optimizer_step_pre_hook

from aiayn.config import TrainConfig
from aiayn.train.schedule import make_optimizer, noam_lr
from aiayn.train.trainer import train
from tiny_run import one_thread, prepared_data, tiny_config  # noqa: F401 (autouse fixture)


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


def test_the_trainer_steps_adam_with_eq3_at_steps_1_warmup_and_4x_warmup(tmp_path) -> None:
    """The rate each Adam step actually used, read from the optimizer's param groups at the
    moment it steps (after the trainer has set it), against eq. 3 written out here: a
    trainer that set the rate of the wrong step, forgot to set it, or scaled it otherwise
    would pass the tests of `noam_lr` above and fail this one."""
    warmup, d_model = 10, 16  # tiny_config's model: d_model 16
    used: list[list[float]] = []  # per Adam step: the rate of each param group

    def record(optimizer, args, kwargs) -> None:
        used.append([group["lr"] for group in optimizer.param_groups])

    data = prepared_data(tmp_path / "data")
    hook = register_optimizer_step_pre_hook(record)
    try:
        train(tiny_config(data, tmp_path / "run", f"train.warmup={warmup}",
                          f"train.max_steps={4 * warmup}", "train.accum_steps=1"))  # fmt: skip
    finally:
        hook.remove()
    assert len(used) == 4 * warmup  # one Adam step per update
    for step in (1, warmup, 4 * warmup):
        eq3 = d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)
        assert used[step - 1] == [pytest.approx(eq3, rel=1e-12)] * len(used[step - 1]), step
    # the warm-up peak and the decay: 1 -> warmup grows 10x, warmup -> 4 x warmup halves
    assert used[warmup - 1][0] == pytest.approx(10 * used[0][0], rel=1e-12)
    assert used[4 * warmup - 1][0] == pytest.approx(used[warmup - 1][0] / 2, rel=1e-12)
