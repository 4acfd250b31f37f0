"""`benchmarks/demo_base.py`: the demo's pipeline with another network, its length ratio
recorded beside BLEU."""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import demo_base  # noqa: E402
import report  # noqa: E402
from test_bench_demo import TINY, run_fast  # noqa: E402

torch.set_num_threads(1)


def test_base_demo_applies_its_changes_and_records_the_length_ratio(tmp_path, monkeypatch):
    monkeypatch.setattr("aiayn.demo.FAST", TINY)  # seconds; the changes then apply on top
    _, record = run_fast(demo_base, tmp_path, monkeypatch)
    result = record["result"]
    assert record["meta"]["script"] == "demo_base" and result["benchmark"] == "demo_base"
    assert result["model"]["n_layers"] == 2 and result["model"]["d_model"] == 32  # changes on TINY
    assert result["length_ratio"] > 0 and 0.0 <= result["bleu"] <= 100.0
    rows = dict(report.figures(record))
    assert rows["output length / reference length"] == f"{result['length_ratio']:.3f}"


def test_the_base_changes_are_table_3s_base_network():
    from aiayn.demo import demo_config

    config = demo_config(Path("data"), Path("out"), changes=demo_base.BASE)
    m = config.model
    assert (m.d_model, m.n_heads, m.d_ff, m.n_layers, m.norm) == (512, 8, 2048, 6, "pre")
    assert config.train.max_steps == demo_base.BASE_STEPS
