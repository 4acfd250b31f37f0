"""`benchmarks/noisy_corpus.py` in miniature (seconds, not its hours): the labelled noise is
what it says, the filter scores follow from the labels and `prepare --removed`, and the
three trainings run and are scored."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

from aiayn.data.clean import normalized
from aiayn.data.demo_corpus import demo_splits
from tiny_run import one_thread  # noqa: F401 (autouse fixture)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import noisy_corpus as bench  # noqa: E402


def test_noise_is_added_in_the_shares_and_labels_it_says() -> None:
    clean = demo_splits(n_train=700, n_valid=0, n_test=0, seed=5).train
    pairs, labels = bench.inject_noise(clean, 0.3, seed=2)
    assert len(pairs) == 1000 and len(labels) == 1000
    rest = iter(pairs)
    assert all(any(pair == other for other in rest) for pair in clean)  # all kept, in order
    key = lambda pair: (normalized(pair[0]), normalized(pair[1]))  # noqa: E731
    labelled_clean = [key(p) for p, label in zip(pairs, labels) if label == "clean"]
    assert sorted(labelled_clean) == sorted(map(key, clean))  # an added copy may come first
    counts = {kind: labels.count(kind) for kind in bench.KINDS}
    assert counts == dict.fromkeys(bench.KINDS, 50)
    english = {en for en, _ in clean}
    seen = set()
    for (src, tgt), label in zip(pairs, labels):
        if label in ("clean", "duplicate"):  # of two equal pairs the later is the duplicate
            assert (label == "duplicate") == (key((src, tgt)) in seen)
            seen.add(key((src, tgt)))
        if label == "untranslated":
            assert src == tgt
        if label == "wrong_language":
            assert tgt in english and (src, tgt) not in clean
        if label == "markup":
            assert "<" in src + tgt or "&" in src + tgt
        if label == "truncated":
            whole = next(p for p in clean if src in p or tgt in p)
            cut = min((src, tgt), key=lambda side: len(side.split()))
            longer = whole[0] if whole[0].startswith(cut) else whole[1]
            n = len(longer.split())
            assert 0.2 * n - 1 <= len(cut.split()) <= 0.4 * n + 1


def test_filter_scores_count_precision_and_recall_from_the_removed_lines() -> None:
    labels = ["clean", "duplicate", "clean", "markup", "misaligned", "markup"]
    scores = bench.filter_scores(labels, {2: "duplicate", 4: "markup", 3: "markup"})
    assert scores["filters"]["markup"] == {"removed": 2, "kinds": {"markup": 1, "clean": 1},
                                           "precision": 0.5}  # fmt: skip
    assert scores["kinds"]["markup"] == {"pairs": 2, "removed": 1, "share_removed": 0.5}
    assert scores["kinds"]["clean"]["share_removed"] == 0.5
    assert scores["kinds"]["misaligned"]["removed"] == 0


def fake_multi30k(raw: Path) -> Path:
    """Multi30k's six raw files, filled with demo pairs."""
    raw.mkdir()
    sizes = {"train": (300, 1), "val": (12, 2), "test_2016_flickr": (10, 3)}
    for stem, (n, seed) in sizes.items():
        pairs = demo_splits(n_train=n, n_valid=0, n_test=0, seed=seed).train
        for side, lang in enumerate(("en", "de")):
            text = "".join(pair[side] + "\n" for pair in pairs)
            (raw / f"{stem}.{lang}.gz").write_bytes(gzip.compress(text.encode("utf-8")))
    return raw


def test_the_benchmark_scores_filters_and_three_trainings(tmp_path, monkeypatch) -> None:
    tiny = ["model.d_model=16", "model.n_heads=2", "model.d_ff=32", "model.n_layers=1",
            "data.max_tokens=300", "train.update_tokens=300", "train.warmup=5",
            "train.save_every_minutes=0", "train.valid_every_steps=0", "train.device=cpu",
            "decode.beam=2", "decode.max_len_offset=4"]  # fmt: skip
    argv = ["noisy_corpus.py", "--raw", str(fake_multi30k(tmp_path / "raw")), "--out",
            str(tmp_path / "out"), "--updates", "3", "--seeds", "1", "--vocab-size", "400",
            "--results-dir", str(tmp_path / "res"), *tiny]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    bench.main()
    (path,) = (tmp_path / "res").glob("noisy_corpus_*.json")
    result = json.loads(path.read_text())["result"]
    assert result["noise"]["pairs"] == 429 and result["noise"]["labels"]["clean"] == 300
    kinds = result["filters"]["kinds"]
    assert sum(k["pairs"] for k in kinds.values()) == 429
    removed = sum(f["removed"] for f in result["filters"]["filters"].values())
    assert removed == sum(k["removed"] for k in kinds.values()) > 0
    assert set(result["filters"]["targeted_recall"]) == set(bench.TARGETED)
    runs = result["runs"]
    assert runs["clean"]["pairs"] == 300 and runs["noisy"]["pairs"] == 429
    assert runs["cleaned"]["pairs"] == 429 - removed
    for run in runs.values():
        (seed,) = run["seeds"]
        assert seed["steps"] == 3
        assert {"bleu", "signature"} <= seed["dev"].keys() & seed["test"].keys()
        # the length penalty best on dev, then the test set once with it
        assert [t["alpha"] for t in seed["dev_tried"]] == [0.6, 1.0, 1.5]
        assert seed["dev"]["bleu"] == max(t["bleu"] for t in seed["dev_tried"])
        assert seed["alpha"] == next(t["alpha"] for t in seed["dev_tried"]
                                     if t["bleu"] == seed["dev"]["bleu"])
    summary = result["summary"]
    assert summary["seed_spread_test"] is None  # one seed: no spread to compare with
    gap = summary["mean_bleu"]["noisy"]["test"] - summary["mean_bleu"]["clean"]["test"]
    assert summary["test_gaps"]["noisy_minus_clean"] == round(gap, 2)


def test_resume_scores_the_finished_trainings_and_trains_the_rest(tmp_path, monkeypatch) -> None:
    """An interrupted run goes on: trainings that ran to their end with the same config are
    scored, not trained again; one cut short (or of another config) is trained anew."""
    tiny = ["model.d_model=16", "model.n_heads=2", "model.d_ff=32", "model.n_layers=1",
            "data.max_tokens=300", "train.update_tokens=300", "train.warmup=5",
            "train.save_every_minutes=0", "train.valid_every_steps=0", "train.device=cpu",
            "decode.beam=2", "decode.max_len_offset=4"]  # fmt: skip
    out = tmp_path / "out"
    argv = ["noisy_corpus.py", "--raw", str(fake_multi30k(tmp_path / "raw")), "--out", str(out),
            "--updates", "3", "--seeds", "1", "--vocab-size", "400", "--results-dir",
            str(tmp_path / "res"), *tiny]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    bench.main()
    first = json.loads(next((tmp_path / "res").glob("noisy_corpus_*.json")).read_text())["result"]
    log = out / "noisy-seed1" / "train_log.jsonl"
    lines = log.read_text(encoding="utf-8").splitlines()
    log.write_text("\n".join(l for l in lines if '"end"' not in l) + "\n", encoding="utf-8")
    trained = []
    real_train = bench.train
    monkeypatch.setattr(bench, "train", lambda config: trained.append(config) or real_train(config))
    monkeypatch.setattr(sys, "argv", [*argv, "--resume"])
    for old in (tmp_path / "res").glob("*.json"):
        old.unlink()
    manifest = out / "data-cleaned" / "manifest.json"  # as if prepared with other options
    other = json.loads(manifest.read_text())
    other["cleaning"]["options"]["min_copy_words"] = 99
    manifest.write_text(json.dumps(other))
    bench.main()
    result = json.loads(next((tmp_path / "res").glob("noisy_corpus_*.json")).read_text())["result"]
    assert result["resumed"] is True
    assert json.loads(manifest.read_text())["cleaning"]["options"]["min_copy_words"] == 4  # again
    assert [Path(c.train.out_dir).name for c in trained] == ["noisy-seed1"]  # cut short
    reused = {name: run["seeds"][0]["reused"] for name, run in result["runs"].items()}
    assert reused == {"clean": True, "noisy": False, "cleaned": True}
    for name in ("clean", "cleaned"):  # the same checkpoints, scored again alike
        assert result["runs"][name]["seeds"][0]["test"] == first["runs"][name]["seeds"][0]["test"]
    monkeypatch.setattr(sys, "argv", argv)  # without --resume: everything anew
    trained.clear()
    bench.main()
    assert len(trained) == 3
    # a training on other data than the condition's now (e.g. cleaned otherwise) is not
    # reused, nor one that does not say what it trained on
    (out / "clean-seed1" / bench.DATA_PRINT).write_text(bench.data_print(out / "data-noisy"))
    (out / "noisy-seed1" / bench.DATA_PRINT).unlink()
    monkeypatch.setattr(sys, "argv", [*argv, "--resume"])
    trained.clear()
    bench.main()
    assert [Path(c.train.out_dir).name for c in trained] == ["clean-seed1", "noisy-seed1"]
