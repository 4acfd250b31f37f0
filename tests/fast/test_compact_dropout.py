"""Dropout (sec. 5.4): nn.Dropout's function, with a mask of 16 random bits per element on CPUs."""

from __future__ import annotations

import math

import pytest
import torch

from aiayn.fast.dropout import CompactDropout as Dropout, drop_probability, keep_mask


def _binomial_tolerance(n: int, p: float) -> float:
    return 6 * math.sqrt(p * (1 - p) / n)  # six standard deviations of a sample mean


@pytest.mark.parametrize("p", [0.1, 0.6])
def test_keep_fraction_is_one_minus_p_at_each_of_the_four_positions_of_a_draw(p: float) -> None:
    # Each int64 of random bits gives four int16 samples, at positions 4i .. 4i + 3. Were its
    # sign bit not random (plain `random_()`), the last of them would keep a different
    # fraction though the mean over all four might not show it.
    torch.manual_seed(0)
    keep = keep_mask(torch.Size([800_000]), p).double()
    tol = _binomial_tolerance(200_000, p)
    for position in range(4):
        assert keep[position::4].mean().item() == pytest.approx(1 - p, abs=tol)


def test_drop_probability_is_p_rounded_to_a_multiple_of_two_to_the_minus_16() -> None:
    # The documented resolution: below 2^-17, p rounds to 0 and nothing is dropped; within
    # 2^-17 of 1 it rounds to 1 and nothing survives; 2^-16 short of 1 keeps 1 in 65536.
    torch.manual_seed(4)
    shape = torch.Size([2_000_000])
    assert keep_mask(shape, 2**-18).all()
    assert not keep_mask(shape, 1 - 2**-18).any()
    kept = keep_mask(shape, 1 - 2**-16).sum().item()  # expected 30.5
    assert 10 <= kept <= 60


def test_a_float_mask_is_the_bool_mask_from_the_same_draw() -> None:
    shape = torch.Size([3, 1001])  # not a multiple of the four samples per draw
    torch.manual_seed(6)
    as_bool = keep_mask(shape, 0.3)
    torch.manual_seed(6)
    as_float = keep_mask(shape, 0.3, dtype=torch.float32)
    assert as_float.dtype == torch.float32 and torch.equal(as_float, as_bool.float())


def test_training_output_is_zero_or_the_input_scaled_by_one_over_keep() -> None:
    torch.manual_seed(1)
    x = torch.rand(64, 32) + 0.5  # no zeros, so a zero output means dropped
    out = Dropout(0.25).train()(x)
    kept = out != 0
    torch.testing.assert_close(out[kept], x[kept] / 0.75, rtol=0, atol=1e-6)
    assert 0 < kept.sum() < x.numel()


def test_gradient_is_the_mask_times_the_scale() -> None:
    torch.manual_seed(2)
    x = (torch.rand(16, 8) + 0.5).requires_grad_()
    g = torch.randn(16, 8)
    out = Dropout(0.3).train()(x)
    (out * g).sum().backward()
    kept = (out != 0).float()
    torch.testing.assert_close(x.grad, g * kept / (1 - drop_probability(0.3)))


@pytest.mark.parametrize("p", [0.3, 0.99999])
def test_survivors_are_scaled_by_one_over_the_keep_probability_actually_drawn(p: float) -> None:
    # 0.3 rounds to 19661 / 65536 and 0.99999 to 65535 / 65536: scaled by 1 / (1 - p), the
    # survivors of 0.99999 would be 100,000 and the expected output 1.53 times the input.
    assert drop_probability(p) == round(p * 2**16) / 2**16 != p
    torch.manual_seed(9)
    x = torch.ones(4, 65536, dtype=torch.float64)
    for out in (Dropout(p).train()(x), Dropout(p).train().add(torch.zeros_like(x), x)):
        survivors = out[out != 0]
        assert survivors.numel() > 0
        assert torch.all(survivors == 2**16 / (2**16 - round(p * 2**16)))


def test_the_same_seed_gives_the_same_mask_and_later_calls_differ() -> None:
    x, drop = torch.ones(1000), Dropout(0.5).train()
    torch.manual_seed(3)
    first, second = drop(x), drop(x)
    torch.manual_seed(3)
    assert torch.equal(drop(x), first)
    assert not torch.equal(first, second)


def test_evaluation_and_p_zero_are_the_identity() -> None:
    x = torch.randn(5, 4)
    assert Dropout(0.5).eval()(x) is x
    assert Dropout(0.0).train()(x) is x


def test_p_one_drops_everything_without_nan() -> None:
    x = torch.randn(5, 4, requires_grad=True)
    out = Dropout(1.0).train()(x)
    out.sum().backward()
    assert torch.equal(out, torch.zeros_like(out))
    assert torch.equal(x.grad, torch.zeros_like(x))


def test_keeps_the_input_dtype_and_shape() -> None:
    x = torch.randn(3, 5, 7, dtype=torch.bfloat16)
    out = Dropout(0.1).train()(x)
    assert out.dtype == torch.bfloat16 and out.shape == x.shape


@pytest.mark.parametrize("p", [-0.1, 1.5])
def test_rejects_a_probability_outside_zero_one(p: float) -> None:
    with pytest.raises(ValueError, match="dropout probability"):
        Dropout(p)


def test_empty_and_non_contiguous_inputs() -> None:
    drop = Dropout(0.5).train()
    assert drop(torch.empty(0, 4)).shape == (0, 4)
    torch.manual_seed(5)
    x = (torch.rand(6, 9) + 0.5).t()  # a transposed view
    out = drop(x)
    kept = out != 0
    torch.testing.assert_close(out[kept], x[kept] * 2.0)


def test_the_mask_is_made_on_the_inputs_device_whatever_the_default() -> None:
    # Under another default device (e.g. `with torch.device("meta")`, as parameter counts are
    # taken), a CPU input still gets a CPU mask.
    x = torch.ones(10)
    with torch.device("meta"):
        out = Dropout(0.5).train()(x)
    assert out.device.type == "cpu"


def test_other_devices_use_pytorchs_dropout() -> None:
    out = Dropout(0.5).train()(torch.ones(10, device="meta"))  # meta: no data, F.dropout's path
    assert out.device.type == "meta" and out.shape == (10,)


def test_add_is_the_input_plus_the_dropout_of_the_other_and_so_are_its_gradients() -> None:
    drop = Dropout(0.3).train()
    x0, y0, g = torch.randn(7, 33), torch.rand(7, 33) + 0.5, torch.randn(7, 33)
    grads = []
    for fused in (False, True):
        x, y = x0.clone().requires_grad_(), y0.clone().requires_grad_()
        torch.manual_seed(8)  # the same draw: the same mask
        out = drop.add(x, y) if fused else x + drop(y)
        (out * g).sum().backward()
        grads.append((out.detach(), x.grad, y.grad))
    for plain, fused in zip(*grads):
        torch.testing.assert_close(fused, plain, rtol=0, atol=1e-6)
    assert 0 < (grads[1][2] == 0).sum() < y0.numel()  # some of y dropped, not all


def test_add_without_dropout_is_the_plain_sum() -> None:
    x, y = torch.randn(4, 5), torch.randn(4, 5)
    assert torch.equal(Dropout(0.5).eval().add(x, y), x + y)
    assert torch.equal(Dropout(0.0).train().add(x, y), x + y)


def test_add_keeps_each_inputs_dtype_in_its_gradient() -> None:
    x = torch.randn(3, 8, requires_grad=True)
    y = torch.randn(3, 8, dtype=torch.bfloat16, requires_grad=True)
    out = Dropout(0.1).train().add(x, y)
    out.sum().backward()
    assert out.dtype == torch.float32 and x.grad.dtype == torch.float32
    assert y.grad.dtype == torch.bfloat16
