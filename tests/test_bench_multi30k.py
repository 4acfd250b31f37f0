"""`benchmarks/multi30k.py`'s last stage: the model and length penalty are chosen on the dev
set, among every candidate, and the test set plays no part in the choice."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import multi30k as bench  # noqa: E402


def test_the_dev_set_chooses_among_every_average_and_alpha(tmp_path, monkeypatch):
    averaged = []
    monkeypatch.setattr(bench, "average_checkpoints",
                        lambda paths, out: averaged.append(len(paths)) or Path(out))  # fmt: skip
    dev_bleu = {("avg3x1", 1.0): 40.0}  # the best; every other candidate scores 30

    def fake_bleu(path, sources, refs, alpha=None, device="cpu"):
        assert (sources, refs) == (["dev source"], ["dev reference"])  # the dev set only
        return {"bleu": dev_bleu.get((Path(path).name, alpha), 30.0), "bp": 1.0}

    monkeypatch.setattr(bench, "bleu_of", fake_bleu)
    saved = [(step, tmp_path / f"step-{step}") for step in (100, 200, 300, 400)]  # four saved
    tried, best, chosen = bench.choose_on_dev(saved, tmp_path, (["dev source"], ["dev reference"]))
    # 5 averaged needs 5 checkpoints (9 when two apart): the last alone, 2 and 3 averaged,
    # each at every alpha
    assert [(t["average_last"], t["alpha"]) for t in tried] == [
        (k, a) for k in (1, 2, 3) for a in bench.ALPHAS
    ]
    assert averaged == [2, 3]
    assert (best["average_last"], best["alpha"], chosen) == (3, 1.0, tmp_path / "avg3x1")


def test_averages_taken_apart_skip_every_other_checkpoint(tmp_path, monkeypatch):
    averaged = {}
    monkeypatch.setattr(bench, "average_checkpoints",
                        lambda paths, out: averaged.setdefault(Path(out).name, paths) and Path(out))  # fmt: skip
    monkeypatch.setattr(bench, "bleu_of", lambda *a, **k: {"bleu": 30.0, "bp": 1.0})
    saved = [(step, tmp_path / f"step-{step}") for step in range(100, 1001, 100)]  # ten saved
    bench.choose_on_dev(saved, tmp_path, ([], []), averages=((5, 1), (5, 2)), alphas=(1.0,))
    names = {k: [p.name for p in v] for k, v in averaged.items()}
    assert names == {"avg5x1": [f"step-{s}" for s in (600, 700, 800, 900, 1000)],
                     "avg5x2": [f"step-{s}" for s in (200, 400, 600, 800, 1000)]}
