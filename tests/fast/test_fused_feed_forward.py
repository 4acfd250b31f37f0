"""The fused feed-forward (`fast/feedforward.py`) against eq. 2 through the core's modules:
values and every gradient, in-place safety, and the cases where it must run the modules."""

import pytest
import torch

from aiayn.fast.feedforward import FusedFeedForward
from aiayn.model.layers import PositionwiseFeedForward

# oneDNN's products wherever the CPU runs them (conftest), not only where they are chosen.
pytestmark = pytest.mark.usefixtures("onednn")


def fused(core: PositionwiseFeedForward) -> FusedFeedForward:
    return FusedFeedForward.from_core(core)


def _ffn_as_written(ffn: PositionwiseFeedForward, x: torch.Tensor) -> torch.Tensor:
    return ffn.w_2(torch.relu(ffn.w_1(x)))  # eq. 2 through the modules


def _fast_path(out: torch.Tensor) -> bool:
    """Whether `out` came from the layer's own autograd function (seen through the view
    that gives its rows x's shape back)."""
    fn = out.grad_fn
    while fn is not None and type(fn).__name__.startswith("View"):
        fn = fn.next_functions[0][0]
    return fn is not None and "FeedForward" in type(fn).__name__


@pytest.mark.parametrize("shape", [(3, 5), (2, 3, 5)])
def test_feed_forward_in_training_equals_eq_2_with_every_gradient(shape):
    # On a CPU with gradients the layer runs its own autograd function (ReLU in place);
    # value and the gradients of input, weights and biases must be autograd's for eq. 2.
    ffn = fused(PositionwiseFeedForward(d_model=5, d_ff=7)).double()
    x = torch.randn(*shape, dtype=torch.float64, requires_grad=True)
    with torch.no_grad():
        ffn.w_1.bias.uniform_(-1, 1)  # some ReLU inputs on either side of 0
    out = ffn(x)
    assert _fast_path(out)
    upstream = torch.randn(*shape, dtype=torch.float64)
    inputs = [x, *ffn.parameters()]
    grads = torch.autograd.grad(out, inputs, upstream)
    expected = torch.autograd.grad(_ffn_as_written(ffn, x), inputs, upstream)
    torch.testing.assert_close(out, _ffn_as_written(ffn, x))
    for got, want in zip(grads, expected):
        torch.testing.assert_close(got, want)


@torch.no_grad()
def test_feed_forward_without_autograd_equals_eq_2_and_leaves_its_input():
    # Decoding: the ReLU runs in place on the layer's own hidden tensor, never on x.
    ffn = fused(PositionwiseFeedForward(d_model=5, d_ff=7)).eval()
    x = torch.randn(2, 3, 5)
    before = x.clone()
    out = ffn(x)
    assert torch.equal(x, before)
    hidden = torch.maximum(x @ ffn.w_1.weight.t() + ffn.w_1.bias, torch.zeros(()))
    torch.testing.assert_close(out, hidden @ ffn.w_2.weight.t() + ffn.w_2.bias)


def test_feed_forward_with_dropout_inside_or_under_autocast_runs_the_modules():
    x = torch.randn(2, 3, 4, requires_grad=True)
    with_dropout = fused(PositionwiseFeedForward(4, 6, p_drop_ffn=0.5)).train()
    assert not _fast_path(with_dropout(x))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = fused(PositionwiseFeedForward(4, 6))(x)
    assert out.dtype == torch.bfloat16 and not _fast_path(out)


def test_feed_forward_output_may_be_modified_in_place():
    ffn = fused(PositionwiseFeedForward(4, 6)).train()
    x = torch.randn(2, 3, 4, requires_grad=True)
    out = ffn(x)
    assert _fast_path(out)  # the fast path's own output
    out.mul_(2.0)
    out.sum().backward()
    expected = torch.autograd.grad((2.0 * _ffn_as_written(ffn, x)).sum(), x)[0]
    torch.testing.assert_close(x.grad, expected)


class _ShiftedLinear(torch.nn.Linear):
    """A replaced projection (as an adapter would be): the fast path must not skip it."""

    def forward(self, x):
        return super().forward(x) + 1.0


def test_feed_forward_runs_replaced_or_hooked_projections_as_written():
    torch.manual_seed(0)
    ffn = fused(PositionwiseFeedForward(4, 6)).train()
    x = torch.randn(2, 3, 4, requires_grad=True)
    shifted = _ShiftedLinear(4, 6)
    shifted.load_state_dict(ffn.w_1.state_dict())
    ffn.w_1 = shifted
    torch.testing.assert_close(ffn(x), _ffn_as_written(ffn, x))
    ffn.w_1 = torch.nn.Linear(4, 6)
    calls = []
    ffn.w_2.register_forward_hook(lambda *_: calls.append(1))
    out = ffn(x)
    assert calls == [1] and not _fast_path(out)
    plain = fused(PositionwiseFeedForward(4, 6)).train()
    handle = torch.nn.modules.module.register_module_forward_hook(lambda *_: calls.append(2))
    try:
        out = plain(x)
    finally:
        handle.remove()
    assert 2 in calls and not _fast_path(out)
    assert _fast_path(plain(x))  # no hook left: the fast path
