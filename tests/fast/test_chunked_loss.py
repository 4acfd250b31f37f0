"""The chunked projection + label-smoothed loss (`fast/loss.py`) against the core's loss of
the full logits (`loss.py: label_smoothed_loss`): values and gradients."""

from __future__ import annotations

import pytest
import torch

from aiayn.fast.loss import projected_label_smoothed_loss
from aiayn.loss import label_smoothed_loss

# oneDNN's products wherever the CPU runs them (conftest), not only where they are chosen.
pytestmark = pytest.mark.usefixtures("onednn")


def _reference(hidden, weight, target, eps):
    """The loss of the full logits, and autograd's gradients of its smoothed sum."""
    hidden, weight = hidden.detach().requires_grad_(), weight.detach().requires_grad_()
    smoothed, nll = label_smoothed_loss(hidden @ weight.t(), target, eps)
    smoothed.backward()
    return smoothed, nll, hidden.grad, weight.grad


@pytest.mark.parametrize("eps", [0.0, 0.1])
@pytest.mark.parametrize("chunk_rows", [1, 4, 7, 100])  # 7 does not divide the 23 rows
def test_projected_loss_and_its_gradients_equal_those_of_the_full_logits(eps, chunk_rows):
    torch.manual_seed(0)
    hidden, weight = torch.randn(23, 6, dtype=torch.float64), torch.randn(11, 6, dtype=torch.float64)
    target = torch.randint(0, 11, (23,))
    expected = _reference(hidden, weight, target, eps)
    h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    smoothed, nll = projected_label_smoothed_loss(h, w, target, eps, chunk_rows=chunk_rows)
    (3.0 * smoothed).backward()  # backward scales the gradients by what flows in
    for got, want in zip((smoothed, nll, h.grad / 3, w.grad / 3), expected):
        torch.testing.assert_close(got, want)
    assert not nll.requires_grad  # reported, not trained on


def test_projected_loss_without_gradients_is_the_same_sum():
    hidden, weight, target = torch.randn(9, 5), torch.randn(13, 5), torch.randint(0, 13, (9,))
    with torch.no_grad():
        got = projected_label_smoothed_loss(hidden, weight, target, 0.1, chunk_rows=2)
    for a, b in zip(got, label_smoothed_loss(hidden @ weight.t(), target, 0.1)):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_projected_loss_under_autocast_projects_in_the_autocast_dtype(dtype):
    """As the full path under autocast: logits from a low-precision product, loss in float32."""
    torch.manual_seed(0)
    hidden, weight = torch.randn(8, 16), torch.randn(10, 16)
    target = torch.randint(0, 10, (8,))
    h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    with torch.autocast("cpu", dtype=dtype):
        smoothed, _ = projected_label_smoothed_loss(h, w, target, 0.1, chunk_rows=3)
    smoothed.backward()
    assert smoothed.dtype == torch.float32
    assert h.grad.dtype == w.grad.dtype == torch.float32
    ref_h, ref_w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    with torch.autocast("cpu", dtype=dtype):
        logits = ref_h @ ref_w.t()  # what project() gives under autocast
    assert logits.dtype == dtype
    expected = label_smoothed_loss(logits, target, 0.1)[0]
    expected.backward()
    torch.testing.assert_close(smoothed, expected)
    # p - q is rounded to `dtype` before the products in both paths (under autocast the
    # chunked path subtracts eps/(V-1) before rounding, not after): equal up to rounding.
    tol = {"atol": 2e-2, "rtol": 1e-2} if dtype == torch.bfloat16 else {"atol": 2e-3, "rtol": 1e-3}
    torch.testing.assert_close(h.grad, ref_h.grad, **tol)
    torch.testing.assert_close(w.grad, ref_w.grad, **tol)


def test_projected_loss_of_float64_under_autocast_stays_float64():
    """Autocast leaves float64 products alone; so does the chunked path."""
    torch.manual_seed(1)
    hidden = torch.randn(8, 16, dtype=torch.float64)
    weight = torch.randn(10, 16, dtype=torch.float64)
    target = torch.randint(0, 10, (8,))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        smoothed, nll = projected_label_smoothed_loss(hidden, weight, target, 0.1, chunk_rows=3)
        expected = label_smoothed_loss(hidden @ weight.t(), target, 0.1)
    assert smoothed.dtype == nll.dtype == torch.float64
    torch.testing.assert_close((smoothed, nll), expected)


def test_projected_loss_sums_may_be_divided_in_place():
    h, w = torch.randn(5, 8, requires_grad=True), torch.randn(11, 8, requires_grad=True)
    target = torch.randint(0, 11, (5,))
    smoothed, nll = projected_label_smoothed_loss(h, w, target, 0.1, chunk_rows=2)
    smoothed /= 5
    nll /= 5
    smoothed.backward()
    ref_h = h.detach().clone().requires_grad_()
    (label_smoothed_loss(ref_h @ w.detach().t(), target, 0.1)[0] / 5).backward()
    torch.testing.assert_close(h.grad, ref_h.grad)


def test_projected_loss_computes_only_the_gradients_asked_for():
    hidden, weight, target = torch.randn(6, 5), torch.randn(7, 5), torch.randint(0, 7, (6,))
    w = weight.clone().requires_grad_()  # hidden frozen
    projected_label_smoothed_loss(hidden, w, target, 0.1, chunk_rows=4)[0].backward()
    torch.testing.assert_close(w.grad, _reference(hidden, weight, target, 0.1)[3])
    assert hidden.grad is None


def test_projected_loss_edge_cases_no_tokens_and_one_class():
    w = torch.randn(7, 5, requires_grad=True)
    empty = torch.zeros(0, 5, requires_grad=True)
    smoothed, nll = projected_label_smoothed_loss(empty, w, torch.zeros(0, dtype=torch.long), 0.1)
    smoothed.backward()
    assert smoothed.item() == nll.item() == 0.0 and not w.grad.any()
    # One class: p = q = 1 whatever eps says, so loss and gradient are 0 (as the full path).
    hidden, one = torch.randn(3, 5, requires_grad=True), torch.randn(1, 5, requires_grad=True)
    smoothed, _ = projected_label_smoothed_loss(hidden, one, torch.zeros(3, dtype=torch.long), 0.1)
    smoothed.backward()
    assert smoothed.item() == 0.0 and not hidden.grad.any() and not one.grad.any()


def test_projected_loss_second_derivatives_raise_rather_than_come_out_zero():
    """The gradients are formed in the forward pass, as constants: a second derivative
    must be refused, not silently zero."""
    h, w = torch.randn(4, 3, requires_grad=True), torch.randn(5, 3, requires_grad=True)
    smoothed, _ = projected_label_smoothed_loss(h, w, torch.tensor([0, 1, 2, 3]), 0.1)
    (grad_h,) = torch.autograd.grad(smoothed, h, create_graph=True)
    with pytest.raises(RuntimeError, match="does not require grad"):
        torch.autograd.grad(grad_h.sum(), w)


def test_compiled_projected_loss_equals_the_full_logits_path():
    """`compiled=True` (`train.compile`): the chunk's work through torch.compile gives the
    loss and gradients of the full logits (float64, chunks that do not divide the rows),
    and without gradients the same sums."""
    torch.manual_seed(2)
    hidden = torch.randn(23, 6, dtype=torch.float64)
    weight = torch.randn(11, 6, dtype=torch.float64)
    target = torch.randint(0, 11, (23,))
    expected = _reference(hidden, weight, target, 0.1)
    h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    smoothed, nll = projected_label_smoothed_loss(h, w, target, 0.1, chunk_rows=7, compiled=True)
    smoothed.backward()
    for got, want in zip((smoothed, nll, h.grad, w.grad), expected):
        torch.testing.assert_close(got, want)
    with torch.no_grad():
        got = projected_label_smoothed_loss(hidden, weight, target, 0.1, 7, compiled=True)
    torch.testing.assert_close(got, expected[:2])


def test_compiled_projected_loss_under_autocast_rounds_p_minus_q_as_the_eager_one():
    """Under bf16 autocast both paths round p - q (with its -eps/(V-1)) to bf16 before the
    products: the same loss, and gradients equal up to that rounding."""
    torch.manual_seed(3)
    hidden, weight = torch.randn(20, 16), torch.randn(10, 16)
    target = torch.randint(0, 10, (20,))
    results = []
    for compiled in (False, True):
        h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            smoothed, nll = projected_label_smoothed_loss(h, w, target, 0.1, 6, compiled)
        smoothed.backward()
        results.append((smoothed, nll, h.grad, w.grad))
    eager, compiled = results
    torch.testing.assert_close(compiled[:2], eager[:2])
    for got, want in zip(compiled[2:], eager[2:]):
        assert got.dtype == torch.float32
        torch.testing.assert_close(got, want, atol=1e-2, rtol=1e-2)
