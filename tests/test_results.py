"""`benchmarks/results.py`: a benchmark's JSON is printed and written with what, when and where."""

import argparse
import datetime
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import results  # noqa: E402

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 26
model\t\t: 2
model name\t: AMD EPYC 9R45 64-Core Processor

processor\t: 1
model name\t: Some Other CPU
"""


def test_cpu_model_is_the_first_processors():
    cpu = results.cpu_model(CPUINFO)
    assert (cpu["name"], cpu["family"], cpu["model"]) == ("AMD EPYC 9R45 64-Core Processor",
                                                          "26", "2")  # fmt: skip


def test_file_name_says_script_date_commit_and_machine():
    record = {"meta": {"script": "train_speed", "utc": "2026-11-26T07:12:59Z", "commit": "abc1234",
                       "gpu": None, "cpu": {"name": "AMD EPYC 9R45 64-Core Processor"}}}
    assert results.file_name(record) == (
        "train_speed_2026-11-26T0712Z_abc1234_amd-epyc-9r45-64-core-processor.json"
    )
    record["meta"]["gpu"] = "NVIDIA H100 80GB HBM3"
    assert results.file_name(record).endswith("_abc1234_nvidia-h100-80gb-hbm3.json")


def test_emit_prints_and_writes_the_result_with_its_command_and_versions(
    tmp_path, monkeypatch, capsys
):
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int)
    results.add_arguments(parser)
    argv = ["--steps", "3", "--note", "loaded machine", "--results-dir", str(tmp_path)]
    monkeypatch.setattr(sys, "argv", ["benchmarks/train_speed.py", *argv])
    args = parser.parse_args(argv)
    script = str(results.ROOT / "benchmarks" / "train_speed.py")
    path = results.emit(script, {"ratio": 1.5}, args)
    assert json.loads(capsys.readouterr().out) == {"ratio": 1.5}
    record = json.loads(path.read_text())
    assert record["result"] == {"ratio": 1.5}
    meta = record["meta"]
    assert meta["command"].startswith(".venv/bin/python benchmarks/train_speed.py --steps 3")
    assert meta["note"] == "loaded machine" and meta["script"] == "train_speed"
    assert meta["versions"]["python"] and meta["cpu"]["name"]
    assert path.name == results.file_name(record)
    stamp = datetime.datetime.strptime(meta["utc"], "%Y-%m-%dT%H:%M:%SZ")
    assert path.name.startswith(f"train_speed_{stamp:%Y-%m-%dT%H%M}Z_{meta['commit']}_")
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left


def test_no_save_only_prints(tmp_path, capsys):
    args = argparse.Namespace(no_save=True, note="", results_dir=str(tmp_path))
    assert results.emit("benchmarks/x.py", {"a": 1}, args) is None
    assert json.loads(capsys.readouterr().out) == {"a": 1}
    assert not list(tmp_path.iterdir())
