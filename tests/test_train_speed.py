"""`benchmarks/train_speed.py`'s choice of systems: ratios only for the systems that ran, and
`--systems` refused without aiayn or with a name it does not know."""

import sys
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import train_speed  # noqa: E402


def test_ratios_cover_the_systems_that_ran():
    every = {"aiayn": 12.0, "aiayn_attention_bias": 9.0, "hf_marian": 6.0,
             "torch_nn_transformer": 4.0}  # fmt: skip
    assert train_speed.ratios(every) == {
        "ratio_aiayn_over_hf_marian": 2.0,
        "ratio_aiayn_over_torch": 3.0,
        "ratio_aiayn_attention_bias_over_hf_marian": 1.5,
    }
    assert train_speed.ratios({"aiayn": 12.0, "hf_marian": 6.0}) == {
        "ratio_aiayn_over_hf_marian": 2.0
    }
    assert train_speed.ratios({"aiayn": 12.0}) == {}


@pytest.mark.parametrize("systems", ["hf_marian", "aiayn,fairseq"])
def test_systems_without_aiayn_or_unknown_are_refused(systems, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["train_speed.py", "--systems", systems])
    with pytest.raises(SystemExit) as exit_info:
        train_speed.main()
    assert exit_info.value.code == 2
    assert "--systems: aiayn and any of" in capsys.readouterr().err


@pytest.mark.skipif(not hasattr(torch.ops.mkldnn, "_linear_pointwise"), reason="no oneDNN")
def test_flops_of_onednn_products_are_counted_as_for_mm(monkeypatch):
    """aiayn's FLOPs per token (and so its share of the peak) must not drop where its linear
    maps run on oneDNN, an op FlopCounterMode does not know by itself."""
    import aiayn.fast.linear as linear_module

    x, w = torch.randn(3, 5, 32), torch.randn(16, 32)
    counts = []
    for faster in (True, False):
        monkeypatch.setattr(linear_module, "onednn_faster_here", lambda: faster)
        with FlopCounterMode(display=False) as counter:
            linear_module.linear(x, w)
        counts.append(counter.get_total_flops())
    assert counts == [2 * 15 * 32 * 16] * 2
