"""`benchmarks/report.py`: the committed READMEs are what it makes of the committed results;
it is deterministic; its tables show the latest result of each command per machine, and the
README's BLEU rows only from result files. The plots' bytes are compared run against run
on this installation only (they depend on matplotlib's and FreeType's versions)."""

import copy
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import report  # noqa: E402


def _record(script: str, utc: str, result: dict, command: str = "", note: str = "") -> dict:
    return {
        "meta": {"script": script, "utc": utc, "commit": "abc1234", "dirty": False, "note": note,
                 "command": f".venv/bin/python benchmarks/{script}.py {command}".strip(),
                 "cpu": {"name": "Test CPU", "family": "6", "model": "1", "logical_cpus": 2},
                 "gpu": None},
        "result": result,
    }  # fmt: skip


def _speed(ratio: float) -> dict:
    return {"results": {"small": {"tokens_per_s_median": {"aiayn": 100.0},
                                  "ratio_aiayn_over_hf_marian": ratio}}}  # fmt: skip


MULTI30K = {"final_avg_last5": {"bleu": 37.04}, "steps": 2299, "total_minutes": 55.8,
            "curve": [{"minutes": 10.0, "bleu": 30.0}, {"minutes": 20.0, "bleu": 35.0}]}


def _write(directory: Path, records: list[dict]) -> None:
    directory.mkdir()
    for k, record in enumerate(records):
        (directory / f"{k}.json").write_text(json.dumps(record))


def test_committed_readmes_are_what_report_makes_of_the_committed_results():
    assert report.main(["--check"]) == 0, "run .venv/bin/python benchmarks/report.py"


def test_every_committed_result_is_listed_with_its_file():
    records = report.load()
    summary = report.READMES["summary"].read_text(encoding="utf-8")
    for record in report.latest(records):
        assert f"(results/{record['file']})" in summary


def test_report_is_deterministic(tmp_path):
    records = report.load()
    assert report.readmes(records) == report.readmes(copy.deepcopy(records))
    sample = [_record("train_speed", "2026-01-01T00:00:00Z", _speed(1.5)),
              _record("multi30k", "2026-01-01T00:00:00Z", MULTI30K)]  # fmt: skip
    for draw in (report.plot_bleu, report.plot_ratios):
        draw(sample, tmp_path / "a.png")
        draw(sample, tmp_path / "b.png")
        assert (tmp_path / "a.png").read_bytes() == (tmp_path / "b.png").read_bytes()
        assert (tmp_path / "a.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_latest_result_of_each_command_per_machine_and_its_note(tmp_path):
    records = [
        _record("train_speed", "2026-01-01T00:00:00Z", _speed(1.11), "--sizes small"),
        _record("train_speed", "2026-01-02T00:00:00Z", _speed(1.22),
                "--sizes small --note x --out /tmp/y", note="loaded machine"),
        _record("train_speed", "2026-01-01T12:00:00Z", _speed(1.33), "--sizes small --steps 9"),
    ]  # fmt: skip
    _write(tmp_path / "results", records)
    table = report.summary_tables(report.load(tmp_path / "results"))
    assert "1.11" not in table  # the same command, later, on the same machine replaces it
    assert "1.22" in table and "loaded machine" in table and "(results/1.json)" in table
    assert "1.33" in table  # another command stays
    assert "#### Test CPU (family 6, model 1), 2 logical CPUs" in table


def test_a_result_without_headline_figures_is_still_listed(tmp_path):
    _write(tmp_path / "results", [_record("attention_backends", "2026-01-01T00:00:00Z", {})])
    assert "(results/0.json)" in report.summary_tables(report.load(tmp_path / "results"))


def test_attention_window_rows_set_each_length_full_against_the_window(tmp_path):
    def case(ms_256, mib_256, ms_1024, mib_1024):
        return {"256": {"ms": ms_256, "peak_growth_mib": mib_256},
                "1024": {"ms": ms_1024, "peak_growth_mib": mib_1024}}  # fmt: skip

    result = {"window": 16,
              "results": {"full": case(76.2, 17.0, 375.9, 49.6),
                          "window_16": case(86.4, 13.1, 250.4, 47.1)},
              "growth_per_step": {"full": {"1024": {"ms": 4.93}},
                                  "window_16": {"1024": {"ms": 2.9}}}}  # fmt: skip
    _write(tmp_path / "results", [_record("attention_window", "2026-01-01T00:00:00Z", result)])
    table = report.summary_tables(report.load(tmp_path / "results"))
    assert "| n=1024: ms, full / window 16 | 375.9 / 250.4 |" in table
    assert "| n=256: peak MiB, full / window 16 | 17 / 13.1 |" in table
    assert "| window 16: time growth from the previous n | 2.9 |" in table


def test_bleu_rows_only_from_result_files():
    assert "Multi30k" not in report.results_table([])
    assert "offline demo" not in report.results_table([])
    record = {**_record("multi30k", "2026-01-01T00:00:00Z", MULTI30K), "file": "m.json"}
    row = report.results_table([record])
    assert "| Multi30k En→De |" in row and "**37.04**" in row and "2,299 updates" in row
    assert "(benchmarks/results/m.json)" in row


def test_readme_without_markers_is_a_clear_error(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# no markers\n")
    with pytest.raises(report.ReportError, match="report:begin results"):
        report.readmes([], {"results": readme})
    marked = "a\n<!-- report:begin results -->\nold\n<!-- report:end results -->\nb\n"
    readme.write_text(marked)
    text = report.readmes([], {"results": readme})[readme]
    assert text.startswith("a\n<!-- report:begin results -->\n| task |") and text.endswith(
        "<!-- report:end results -->\nb\n"
    )


def test_a_file_that_is_not_a_result_is_named(tmp_path):
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(report.ReportError, match="bad.json"):
        report.load(tmp_path)
