"""`benchmarks/length_extrapolation.py`: its buckets, the two models' configs, its record."""

import dataclasses
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import length_extrapolation as bench  # noqa: E402

torch.set_num_threads(1)


def test_buckets_reach_three_times_the_training_length():
    assert bench.buckets(8) == [(1, 8), (9, 12), (13, 16), (17, 24)]
    assert bench.buckets(7) == [(1, 7), (8, 11), (12, 14), (15, 21)]


def test_the_two_models_differ_only_in_their_positions(tmp_path):
    sinus, learned = (bench.run_config(p, tmp_path, 72, 450) for p in bench.POSITIONS)
    assert (sinus.model.positional, learned.model.positional) == ("sinusoidal", "learned")
    assert sinus.model == dataclasses.replace(learned.model, positional="sinusoidal")
    assert sinus.data == learned.data and sinus.decode == learned.decode
    assert dataclasses.replace(sinus.train, out_dir="") == dataclasses.replace(
        learned.train, out_dir="")
    assert (sinus.model.max_len, sinus.train.max_steps, sinus.train.warmup) == (72, 450, 400)


def test_a_tiny_run_records_both_models_per_bucket(tmp_path, monkeypatch):
    # A budget of seconds: what is tested is the record, not the models.
    monkeypatch.setattr("aiayn.demo.DEMO_MODEL", ["model.d_model=32", "model.n_heads=2",
                                                  "model.d_ff=64", "model.n_layers=1"])
    monkeypatch.setattr(bench, "VOCAB_SIZE", 400)
    argv = ["--steps", "3", "--pool", "6000", "--train-pool", "4000", "--per-bucket", "3",
            "--out", str(tmp_path / "run"), "--results-dir", str(tmp_path / "res")]
    monkeypatch.setattr(sys, "argv", ["benchmarks/length_extrapolation.py", *argv])
    bench.main()
    [path] = (tmp_path / "res").iterdir()
    result = json.loads(path.read_text())["result"]
    assert path.name.startswith("length_extrapolation_")
    assert [b["tokens"] for b in result["buckets"]] == [[1, 8], [9, 12], [13, 16], [17, 24]]
    assert max(result["train_max_tokens"].values()) <= 8 and result["train_pairs"] > 0
    longest = max(b["longest"] for b in result["buckets"])
    assert result["model"]["max_len"] == longest + 1 + 50  # + eos, + the output offset
    for bucket in result["buckets"]:
        assert bucket["sentences"] == 3
        assert all(0.0 <= bucket[p]["bleu"] <= 100.0 for p in bench.POSITIONS)
