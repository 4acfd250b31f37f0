"""`benchmarks/step_breakdown.py`'s op timer: the product calls it keeps for the replay hold
no tensor memory (holding it made the measured step slower than it is), and replay."""

import gc
import sys
import weakref
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import step_breakdown  # noqa: E402


def test_kept_products_are_meta_tensors_and_free_the_step_memory():
    a, b = torch.randn(64, 32), torch.randn(16, 32)
    refs = [weakref.ref(a), weakref.ref(b)]
    timer = step_breakdown.OpTimer()
    timer.keep = True
    with timer:
        torch.mm(a, b.t())  # b.t(): a transposed view, as nn.Linear's product has
        torch.addmm(torch.zeros(16), a, b.t())
    assert [p[0] for p in timer.products] == ["mm", "addmm"]
    for _, _, args, _, seconds in timer.products:
        tensors = [x for x in args if isinstance(x, torch.Tensor)]
        assert tensors and all(t.device.type == "meta" for t in tensors)
        assert seconds > 0
    mm_args = timer.products[0][2]
    assert mm_args[1].shape == (32, 16) and mm_args[1].stride() == (1, 32)  # still transposed
    assert step_breakdown.product_dims("mm", mm_args) == (1, 64, 32, 16)
    del a, b
    gc.collect()
    assert all(ref() is None for ref in refs)  # the timer kept no step tensor alive
    assert step_breakdown.replay(timer.products, reps=1) > 0


@pytest.mark.skipif(not hasattr(torch.ops.mkldnn, "_linear_pointwise"), reason="no oneDNN")
def test_onednn_linear_counts_as_a_product_with_its_dims(monkeypatch):
    """aiayn's linear maps run on oneDNN on x86 CPUs not made by Intel (aiayn.fast.linear):
    the breakdown counts, sizes and replays them as products."""
    import aiayn.fast.linear as linear_module

    monkeypatch.setattr(linear_module, "onednn_faster_here", lambda: True)
    x, w = torch.randn(4, 6, 32), torch.randn(16, 32)  # (batch, len, K), (N, K)
    timer = step_breakdown.OpTimer()
    timer.keep = True
    with timer:
        linear_module.linear(x, w)
    assert [p[0] for p in timer.products] == ["_linear_pointwise"]
    assert step_breakdown.product_dims("_linear_pointwise", timer.products[0][2]) == (1, 24, 32, 16)
    assert step_breakdown.replay(timer.products, reps=1) > 0
