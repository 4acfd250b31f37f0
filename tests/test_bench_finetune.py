"""`benchmarks/finetune.py` at tiny sizes (seconds, not its 1.5 hours): a base checkpoint,
the demo corpus prepared with its vocabulary, a fine-tuning run and a random-start run each
saving in the middle, the scores of all five models; and `report.py`'s paragraph on the export page,
written from the result file alone."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

from aiayn.data.demo_corpus import demo_splits
from aiayn.train.trainer import train
from conftest import as_committed
from tiny_run import one_thread, prepared_data, tiny_config  # noqa: F401 (autouse fixture)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import finetune as bench  # noqa: E402
import report  # noqa: E402


def fake_multi30k(raw: Path) -> Path:
    """Multi30k's six raw files, filled with demo pairs (the real ones are not needed)."""
    raw.mkdir()
    for stem, seed in (("train", 1), ("val", 2), ("test_2016_flickr", 3)):
        pairs = demo_splits(n_train=8, n_valid=0, n_test=0, seed=seed).train
        for side, lang in enumerate(("en", "de")):
            text = "".join(pair[side] + "\n" for pair in pairs)
            (raw / f"{stem}.{lang}.gz").write_bytes(gzip.compress(text.encode("utf-8")))
    return raw


def test_the_benchmark_measures_five_models_and_the_readme_paragraph_is_its_figures(
    tmp_path, monkeypatch
):
    config = tiny_config(prepared_data(tmp_path / "m30k"), tmp_path / "base",
                         "decode.max_len_offset=4", "decode.beam=2")  # fmt: skip
    base = train(config).final_checkpoint
    argv = ["finetune.py", "--base", str(base), "--raw", str(fake_multi30k(tmp_path / "raw")),
            "--out", str(tmp_path / "out"), "--minutes", "0.06", "--save-at", "0.03",
            "--demo-train", "300", "--demo-test", "8", "--results-dir", str(tmp_path / "res"),
            "train.warmup=10", "train.max_steps=100000"]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    bench.main()
    (path,) = (tmp_path / "res").glob("finetune_*.json")
    record = as_committed({**json.loads(path.read_text()), "file": path.name})
    result = record["result"]
    models = result["models"]
    assert [m["start"] for m in models] == ["base", "base", "base", "random", "random"]
    assert models[0]["minutes"] == 0 and models[0]["steps"] == 0
    for run in (models[1:3], models[3:5]):  # the save in the middle, then the end
        assert 0 < run[0]["minutes"] < run[1]["minutes"] and 0 < run[0]["steps"] < run[1]["steps"]
    assert all({"demo_test", "multi30k_val"} <= m.keys() for m in models)
    assert result["decode"]["beam"] == 2 and result["demo"]["test_pairs"] == 8
    text = report.finetune_text([record])
    base_demo, base_val = models[0]["demo_test"]["bleu"], models[0]["multi30k_val"]["bleu"]
    assert f"The Multi30k model scores {base_demo:.2f} sacreBLEU" in text
    assert f"and {base_val:.2f} on Multi30k's val" in text
    tuned = models[1:3]
    first = tuned[0]
    assert f"reaches {first['demo_test']['bleu']:.2f} after {first['minutes']:g} minutes" in text
    scratch = " and ".join(f"{m['demo_test']['bleu']:.2f}" for m in models[3:])
    assert f"same minutes reaches {scratch} (" in text
    assert f"(../benchmarks/results/{path.name})" in text  # the page is docs/export.md
    assert text.count("| random weights |") == 2 and text.count("| Multi30k model |") == 3
    assert report.finetune_text([]).startswith("No `finetune.py` result of committed code yet")
    dirty = {**record["meta"]["provenance"]["start"], "dirty": True, "changed": ["src/aiayn/x.py"]}
    uncommitted = {**record, "meta": {**record["meta"], "provenance": {
        **record["meta"]["provenance"], "start": dirty}}}  # fmt: skip
    assert report.finetune_text([uncommitted]).startswith("No ")
