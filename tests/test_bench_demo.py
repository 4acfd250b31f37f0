"""`benchmarks/demo.py`: the demo's BLEU and its model are written as a result file."""

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import demo  # noqa: E402

torch.set_num_threads(1)


# A budget of seconds: what is tested is the record, not the model (tests/test_demo.py is).
TINY = ["model.d_model=32", "model.n_heads=2", "model.d_ff=64", "model.n_layers=1",
        "train.max_steps=6", "train.save_every_steps=2", "train.valid_every_steps=3",
        "train.warmup=2"]  # fmt: skip


def run_fast(script, tmp_path: Path, monkeypatch) -> tuple[Path, dict]:
    """`script.main()` (a demo benchmark's module) with `--fast`, its run and result under
    `tmp_path`; -> the one result file and its record."""
    argv = ["--fast", "--out", str(tmp_path / "demo"), "--results-dir", str(tmp_path / "res")]
    monkeypatch.setattr(sys, "argv", [script.__file__, *argv])
    script.main()
    [path] = (tmp_path / "res").iterdir()
    return path, json.loads(path.read_text())


def test_demo_result_records_bleu_and_model(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("aiayn.demo.FAST", TINY)
    path, record = run_fast(demo, tmp_path, monkeypatch)
    result = record["result"]
    assert path.name.startswith("demo_") and record["meta"]["script"] == "demo"
    assert 0.0 <= result["bleu"] <= 100.0 and "nrefs:1" in result["signature"]
    assert result["model"]["d_model"] == 32 and result["train_steps"] == 6  # TINY's
    assert f"BLEU {result['bleu']:.2f}" in capsys.readouterr().out
