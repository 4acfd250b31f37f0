"""`benchmarks/parse_demo.py`: the parse demo's strict and EVALB F1 are written as a result file."""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import parse_demo  # noqa: E402
from test_bench_demo import run_fast  # noqa: E402

torch.set_num_threads(1)

# A budget of seconds: what is tested is the record, not the model
# (tests/parsing/test_parsing_cli.py is).
TINY = ["model.d_model=32", "model.n_heads=2", "model.d_ff=64", "model.n_layers=1",
        "train.max_steps=6", "train.save_every_steps=2", "train.valid_every_steps=3",
        "train.warmup=2", "decode.beam=1", "decode.max_len_offset=20"]  # fmt: skip


def test_parse_demo_result_records_strict_and_evalb_f1(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("aiayn.parsing.demo.FAST", TINY)
    monkeypatch.setattr("aiayn.parsing.demo.FAST_SIZES", dict(n_train=600, n_valid=10, n_test=12))
    path, record = run_fast(parse_demo, tmp_path, monkeypatch)
    result = record["result"]
    assert path.name.startswith("parse_demo_") and record["meta"]["script"] == "parse_demo"
    assert result["evalb"]["sentences"] == 12 and "12 trees" in result["test_set"]
    evalb = result["evalb"]
    assert evalb["valid_sentences"] + evalb["error_sentences"] + evalb["skip_sentences"] == 12
    assert 0.0 <= result["strict_f1"] <= 100.0 and result["model"]["d_model"] == 32
    assert result["train_steps"] == 6  # TINY's
    assert f"F1 {result['strict_f1']:.2f}" in capsys.readouterr().out
