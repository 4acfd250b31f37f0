"""`benchmarks/table3.py`: each row changes what the paper's row changes, by the paper's
factor; the noise interval; a tiny run of two rows and two seeds writes a row file per run,
skips the written ones when run again, and emits the table that `report.py` renders."""

import copy
import json
import sys
from argparse import Namespace
from dataclasses import asdict
from pathlib import Path

import pytest

from aiayn.config import PRESETS, preset
from aiayn.errors import ConfigError
from multi30k_raw import fake_multi30k
from tiny_run import one_thread  # noqa: F401 (autouse fixture)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import report  # noqa: E402
import table3  # noqa: E402
from conftest import as_committed  # noqa: E402


def flat(config) -> dict:
    return {f"{part}.{k}": v for part, values in asdict(config).items() for k, v in values.items()}


def used(config, key: str):
    return table3._value(config, key)


@pytest.mark.parametrize("name", table3.ROWS)
def test_each_row_scales_the_papers_changes_by_the_papers_factors(name, tmp_path):
    base = table3.row_config("base", 1, tmp_path, tmp_path, 1000, [])
    row = table3.row_config(name, 1, tmp_path, tmp_path, 1000, [])
    changed = {k for k, v in flat(row).items() if flat(base)[k] != v}
    paper = {k for k in PRESETS[name] if k not in table3.NOT_SCALED}
    assert changed - {"model.d_k", "model.d_v"} == paper - {"model.d_k", "model.d_v"}
    theirs, ours = preset("base"), preset(name)
    for key in paper:
        if key == "model.positional":
            assert row.model.positional == ours.model.positional
        elif key == "train.max_steps":
            assert row.train.max_steps == 3 * 1000  # big: 300K steps against 100K
        else:
            assert used(row, key) / used(base, key) == pytest.approx(
                used(ours, key) / used(theirs, key))  # fmt: skip
    if name.startswith("A-"):  # h * d_k = d_model: "the amount of computation constant"
        assert row.model.n_heads * row.model.key_dim == base.model.d_model


def test_a_base_whose_factors_give_fractions_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="n_layers"):
        table3.row_config("C-N2", 1, tmp_path, tmp_path, 100, ["model.n_layers=4"])  # 4 / 3


def test_the_noise_is_the_prediction_interval_of_one_more_run():
    spread = table3.noise([20.0, 21.0, 22.0])
    half = 4.303 * 1.0 * (1 + 1 / 3) ** 0.5  # t(0.975, 2) * sd * sqrt(1 + 1/n)
    assert (spread["mean"], spread["sd"]) == (21.0, 1.0)
    assert spread["interval"] == pytest.approx([21.0 - half, 21.0 + half], abs=1e-4)


def test_a_tiny_table_is_written_row_by_row_resumed_and_emitted(tmp_path, monkeypatch):
    args = Namespace(
        rows=["base", "C-N2"], seeds=2, updates=3, jobs=1, device="cpu",
        raw=fake_multi30k(tmp_path / "raw"), work=tmp_path / "work", vocab_size=400,
        dev_lines=4, note="", worker=None,
        overrides=["model.d_model=16", "model.d_ff=32", "data.max_tokens=300",
                   "train.update_tokens=300", "train.warmup=2", "decode.max_len_offset=3"],
    )  # fmt: skip
    result = table3.run_table(args)
    files = sorted(p.name for p in (args.work / "rows").iterdir())
    assert files == ["C-N2_seed1.json", "base_seed1.json", "base_seed2.json"]
    rows = {r["row"]: r for r in result["rows"]}
    assert set(rows) == {"base", "C-N2"} and len(result["base_seeds"]) == 2
    assert rows["C-N2"]["model"]["n_layers"] == 1 and rows["base"]["model"]["n_layers"] == 3
    assert rows["C-N2"]["params"] < rows["base"]["params"]
    assert all(r["updates"] == 3 and r["dev"]["lines"] == 4 and r["dev_ppl"] > 1
               for r in result["base_seeds"] + result["rows"])  # fmt: skip
    assert result["paper"]["C-N2"] == {"ppl": 6.11, "bleu": 23.7, "params_m": 36}
    assert not rows["base"]["outside_noise"]["dev_bleu"]  # the base is the noise

    ran = []
    monkeypatch.setattr(table3, "run_row", lambda a, name, seed: ran.append((name, seed)) or
                        json.loads(table3.row_file(args.work, name, 1).read_text()))  # fmt: skip
    (args.work / "rows" / "base_seed2.json").unlink()
    assert table3.run_table(args) is not None and ran == [("base", 2)]  # the others are kept
    args.seeds = 3
    (args.work / "rows" / "base_seed3.json").parent.mkdir(exist_ok=True)
    monkeypatch.setattr(table3, "run_row", lambda *a: (_ for _ in ()).throw(RuntimeError("cut")))
    with pytest.raises(RuntimeError):
        table3.run_table(args)  # a run that fails leaves no row file, and no table
    assert not table3.row_file(args.work, "base", 3).exists()


def test_report_renders_the_table_and_marks_what_lies_outside_the_noise(tmp_path):
    def row(name: str, bleu: float, ppl: float, outside: bool) -> dict:
        model = {"n_layers": 3, "d_model": 128, "d_ff": 512, "n_heads": 8, "d_k": 16,
                 "d_v": 16, "p_drop": 0.1, "positional": "sinusoidal"}  # fmt: skip
        return {"row": name, "seed": 1, "updates": 1600, "model": model, "eps_ls": 0.1,
                "params": 2_500_000, "dev_ppl": ppl, "dev": {"bleu": bleu},
                "outside_noise": {"dev_bleu": outside, "dev_ppl": False}}  # fmt: skip

    result = {"updates": 1600, "base": ["model.d_model=128"],
              "rows": [row("base", 30.0, 6.0, False), row("C-N2", 25.5, 8.0, True)],
              "base_seeds": [row("base", b, 6.0, False) for b in (30.0, 30.4, 29.8)],
              "noise": {"dev_bleu": table3.noise([30.0, 30.4, 29.8]),
                        "dev_ppl": table3.noise([6.0, 6.1, 5.9])},
              "paper": {k: dict(zip(("ppl", "bleu", "params_m"), v))
                        for k, v in table3.PAPER.items()}}  # fmt: skip
    record = {"meta": {"script": "table3", "utc": "2026-01-01T00:00:00Z", "commit": "abc1234",
                       "dirty": False, "note": "",
                       "command": ".venv/bin/python benchmarks/table3.py run",
                       "cpu": {"name": "Test CPU", "family": "6", "model": "1", "logical_cpus": 2},
                       "gpu": None},
              "result": result, "file": "t.json"}  # fmt: skip
    record = as_committed(record)
    text = report.table3_text([record])
    assert "| C-N2 | 3 | 128 |" in text and "| **25.50** |" in text and "| 30.00 |" in text
    assert "| 6.11 | 23.7 | 36 |" in text  # the paper's figures beside
    assert "30.07 ± 0.31 (30.00, 30.40, 29.80)" in text
    assert report.table3_text([]).startswith("No `table3.py` result of committed code yet")
    uncommitted = copy.deepcopy(record)
    uncommitted["meta"]["provenance"]["start"]["dirty"] = True
    assert report.table3_text([uncommitted]).startswith("No `table3.py` result of committed")
    report.plot_table3([record], tmp_path / "a.png")
    report.plot_table3([copy.deepcopy(record)], tmp_path / "b.png")
    assert (tmp_path / "a.png").read_bytes() == (tmp_path / "b.png").read_bytes()


def test_the_updates_that_fit_a_budget_count_the_seeds_and_bigs_longer_run():
    cost = {"base": 1.0, "C-N2": 0.5, "big": 2.0}  # CPU seconds per update
    # per update of every run: base 3 seeds x 1.0 + C-N2 0.5 + big 3 x 2.0 = 9.5 s;
    # 5 runs keep 60 s each for their scores
    assert table3.updates_in_budget(cost, 3, 1.0) == int((3600 - 5 * 60) / 9.5)
    assert table3.updates_in_budget({"big": 2.0}, 3, 1.0) is None  # no base: no budget


def _table(updates: int, bleus: dict[str, float], seeds=(30.0, 30.4, 29.8)) -> dict:
    """A table3 result of `updates` with these rows' dev BLEU (perplexity 6 throughout)."""
    spread = table3.noise(list(seeds))
    low, high = spread["interval"]
    model = {"n_layers": 3, "d_model": 128, "d_ff": 512, "n_heads": 8, "d_k": 16, "d_v": 16,
             "p_drop": 0.1, "positional": "sinusoidal"}  # fmt: skip

    def row(name: str, bleu: float) -> dict:
        return {"row": name, "seed": 1, "updates": updates, "model": model, "eps_ls": 0.1,
                "params": 2_500_000, "dev_ppl": 6.0, "dev": {"bleu": bleu},
                "outside_noise": {"dev_bleu": name != "base" and not low <= bleu <= high,
                                  "dev_ppl": False}}  # fmt: skip

    return {"updates": updates, "base": [], "rows": [row(n, b) for n, b in bleus.items()],
            "base_seeds": [row("base", b) for b in seeds],
            "noise": {"dev_bleu": spread, "dev_ppl": table3.noise([6.0, 6.1, 5.9])},
            "paper": {k: dict(zip(("ppl", "bleu", "params_m"), v))
                      for k, v in table3.PAPER.items()}}  # fmt: skip


def test_each_claim_is_held_or_not_by_the_rows_against_the_base_noise():
    # the base's interval is 30.07 +- 2.0: 25 lies outside below, 35 above, 30.5 inside
    result = _table(800, {"base": 30.0, "A-h1": 25.0, "A-h16": 25.0, "A-h32": 30.5,
                          "C-N8": 25.0, "C-d1024": 35.0, "E-learned-pe": 35.0})  # fmt: skip
    assert report.claim_verdict(result, ("A-h1",), "lower") == "held: A-h1 -5.07"
    assert report.claim_verdict(result, ("A-h16", "A-h32"), "lower") == \
        "held for some: A-h16 -5.07, A-h32 +0.43 (noise)"
    assert report.claim_verdict(result, ("A-h32",), "lower").startswith("not shown")
    assert report.claim_verdict(result, ("C-N8",), "higher").startswith("contradicted")
    assert report.claim_verdict(result, ("C-N8", "C-d1024"), "higher").startswith("mixed")
    assert report.claim_verdict(result, ("C-d1024", "A-h32"), "higher").startswith(
        "held for some")
    assert report.claim_verdict(result, ("E-learned-pe",), "same").startswith("contradicted")
    assert report.claim_verdict(result, ("A-h32",), "same").startswith("consistent")
    assert report.claim_verdict(result, ("B-dk16",), "lower") == "not run"


def test_the_longest_budget_is_the_table_and_each_other_budget_a_column(tmp_path):
    def record(updates: int, utc: str, bleus: dict) -> dict:
        return as_committed({
            "meta": {"script": "table3", "utc": utc, "commit": "abc1234", "dirty": False,
                     "note": "", "command": ".venv/bin/python benchmarks/table3.py run",
                     "cpu": {"name": "Test CPU", "family": "6", "model": "1",
                             "logical_cpus": 2}, "gpu": None},
            "result": _table(updates, bleus), "file": f"t{updates}_{utc[:4]}.json"})  # fmt: skip

    older_long = record(2400, "2025-01-01T00:00:00Z", {"base": 30.0, "C-N2": 1.0})
    long = record(2400, "2026-01-01T00:00:00Z", {"base": 30.0, "C-N2": 25.0})
    short = record(800, "2026-02-01T00:00:00Z", {"base": 30.0, "C-N2": 31.0})
    assert report.table3_budgets([older_long, short, long]) == [long, short]
    text = report.table3_text([older_long, short, long])
    assert "| dev BLEU | BLEU, 800 updates | params" in text
    assert "| C-N2 | 3 | 128 |" in text and "| **25.00** | 31.00 | 2.50 |" in text
    assert "/t2400_2026.json)" in text and "t2400_2025.json" not in text
    assert "| the paper's claim | 2,400 updates | 800 updates |" in text
    assert ("| C: smaller models are worse | held: C-N2 -5.07 | not shown: C-N2 +0.93 (noise) |"
            in text)  # fmt: skip
    report.plot_table3([older_long, short, long], tmp_path / "t.png")
    assert (tmp_path / "t.png").stat().st_size > 0
