"""`benchmarks/results.py`: a benchmark's JSON is printed and written with what, when, where
and from which code: the state of the code at the start and the end of the run, and the
files it exercised (temporary git repositories stand in for the checkout)."""

import argparse
import datetime
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import report  # noqa: E402
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


def test_a_second_result_of_the_same_minute_writes_over_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["benchmarks/train_speed.py"])
    args = argparse.Namespace(note="", results_dir=str(tmp_path), no_save=False)
    script = str(results.ROOT / "benchmarks" / "train_speed.py")
    fixed = {"utc": "2026-11-26T07:12:59Z"}
    real_meta = results.meta
    monkeypatch.setattr(results, "meta", lambda *a, **k: {**real_meta(*a, **k), **fixed})
    paths = [results.emit(script, {"run": n}, args) for n in range(3)]
    assert len(set(paths)) == 3
    assert paths[1].name == paths[0].name.replace(".json", "-2.json")
    assert [json.loads(p.read_text())["result"] for p in paths] == [{"run": 0}, {"run": 1}, {"run": 2}]


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
    provenance = meta["provenance"]
    assert provenance["start"] is results.START or provenance["start"] == results.START
    assert "benchmarks/results.py" in provenance["exercised"]  # this process loaded it
    assert meta["commit"] == (results.START["commit"] or "unknown")[:7]


def test_kernel_caps_are_the_capping_variables_set(monkeypatch, tmp_path):
    environ = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "CT2_FORCE_CPU_ISA": "",
               "OMP_NUM_THREADS": "1"}  # fmt: skip
    assert results.kernel_caps(environ) == {"ATEN_CPU_CAPABILITY": "avx2",
                                            "ONEDNN_MAX_CPU_ISA": "AVX2"}  # fmt: skip
    assert results.kernel_caps({}) == {}
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    monkeypatch.setattr(sys, "argv", ["benchmarks/x.py"])
    args = argparse.Namespace(no_save=False, note="", results_dir=str(tmp_path))
    record = json.loads(results.emit(str(results.ROOT / "benchmarks" / "x.py"), {}, args).read_text())
    assert record["meta"]["kernel_caps"]["ATEN_CPU_CAPABILITY"] == "avx2"


def test_no_save_only_prints(tmp_path, capsys):
    args = argparse.Namespace(no_save=True, note="", results_dir=str(tmp_path))
    assert results.emit("benchmarks/x.py", {"a": 1}, args) is None
    assert json.loads(capsys.readouterr().out) == {"a": 1}
    assert not list(tmp_path.iterdir())


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}  # fmt: skip
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True,
                          env=env).stdout.strip()  # fmt: skip


@pytest.fixture
def repo(tmp_path) -> Path:
    """A committed checkout: a module under src/, a benchmark, a config, a result file and
    an ignored cache."""
    root = tmp_path / "repo"
    files = {"src/probe_mod.py": "X = 1\n", "benchmarks/bench.py": "print(1)\n",
             "configs/c.yaml": "a: 1\n", "benchmarks/results/old.json": "{}\n",
             "README.md": "# r\n", ".gitignore": "__pycache__/\n"}  # fmt: skip
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "first")
    return root


def test_tree_state_sees_tracked_and_untracked_code_but_not_results_or_docs(repo):
    clean = results.tree_state(repo)
    assert clean == {"commit": git(repo, "rev-parse", "HEAD"), "dirty": False, "diff": None,
                     "changed": []}  # fmt: skip
    (repo / "benchmarks" / "results" / "new.json").write_text("{}")  # what a run writes
    (repo / "README.md").write_text("# changed\n")
    (repo / "src" / "__pycache__").mkdir()
    (repo / "src" / "__pycache__" / "probe_mod.pyc").write_bytes(b"x")  # ignored
    assert results.tree_state(repo) == clean
    (repo / "configs" / "c.yaml").write_text("a: 2\n")  # a tracked change
    changed = results.tree_state(repo)
    assert changed["dirty"] and changed["changed"] == ["configs/c.yaml"] and changed["diff"]
    (repo / "src" / "new.py").write_text("Y = 1\n")  # an untracked file counts too
    untracked = results.tree_state(repo)
    assert untracked["changed"] == ["configs/c.yaml", "src/new.py"]
    assert untracked["diff"] != changed["diff"]
    (repo / "src" / "new.py").write_text("Y = 2\n")  # ... and so does its content
    assert results.tree_state(repo)["diff"] != untracked["diff"]


def test_tree_state_outside_git_is_unknown_and_dirty(tmp_path):
    assert results.tree_state(tmp_path) == {"commit": None, "dirty": True, "diff": None,
                                            "changed": []}  # fmt: skip


def _import_probe(repo: Path, monkeypatch) -> None:
    """Load repo/src/probe_mod.py as a module of this process, as a benchmark's imports are."""
    spec = importlib.util.spec_from_file_location("probe_mod", repo / "src" / "probe_mod.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, "probe_mod", module)


def test_a_run_records_its_commit_the_files_it_exercised_and_a_change_during_it(
    repo, monkeypatch
):
    monkeypatch.setattr(results, "ROOT", repo)
    monkeypatch.setattr(results, "START", results.tree_state(repo))  # as at import
    _import_probe(repo, monkeypatch)
    script = str(repo / "benchmarks" / "bench.py")
    # This process's aiayn is another checkout's: the result would not describe `repo`.
    foreign = {"meta": results.meta(script), "file": "f.json"}
    assert report.provenance_problem(foreign).startswith("aiayn was imported from outside")
    monkeypatch.delitem(sys.modules, "aiayn")
    record = {"meta": results.meta(script, result={"config": "configs/c.yaml"}), "file": "r.json"}
    m, p = record["meta"], record["meta"]["provenance"]
    head = git(repo, "rev-parse", "HEAD")
    assert m["commit"] == head[:7] and not m["dirty"]
    assert p["start"]["commit"] == p["end"]["commit"] == head and not p["changed_during_run"]
    assert p["exercised"] == {
        "src/probe_mod.py": git(repo, "hash-object", "src/probe_mod.py"),
        "configs/c.yaml": git(repo, "hash-object", "configs/c.yaml"),  # named in the result
    }
    assert report.provenance_problem(record) is None
    assert report.stale_files(record, repo) == []
    # The exercised module changes and is committed: the result no longer describes HEAD.
    (repo / "src" / "probe_mod.py").write_text("X = 2\n")
    git(repo, "commit", "-qam", "second")
    assert report.stale_files(record, repo) == ["src/probe_mod.py"]
    # A run during which the code changed says so, and is not a result of committed code.
    (repo / "src" / "probe_mod.py").write_text("X = 3\n")
    during = {"meta": results.meta(script), "file": "d.json"}
    assert during["meta"]["dirty"] and during["meta"]["provenance"]["changed_during_run"]
    assert report.provenance_problem(during) == "the code changed during the run"
    monkeypatch.setattr(results, "START", results.tree_state(repo))  # started dirty
    dirty = {"meta": results.meta(script), "file": "e.json"}
    assert report.provenance_problem(dirty) == (
        "uncommitted changes to code when it started: src/probe_mod.py"
    )


def test_also_loads_counts_the_modules_a_child_command_runs(repo, monkeypatch):
    """For a child process that does not import results.py (`aiayn serve`), `also_loads`
    imports the modules it runs, so that their files count as exercised."""
    monkeypatch.setattr(results, "ROOT", repo)
    monkeypatch.syspath_prepend(str(repo / "src"))
    monkeypatch.delitem(sys.modules, "probe_mod", raising=False)
    assert "src/probe_mod.py" not in results.exercised_files(None, root=repo)
    assert "src/probe_mod.py" in results.exercised_files(None, ("probe_mod",), root=repo)
    sys.modules.pop("probe_mod", None)


def test_child_processes_that_import_results_report_the_files_they_loaded():
    """A benchmark's workers (the same script in a fresh process) list the modules they
    loaded for the parent, whose `emit` counts them as exercised."""
    module = results.ROOT / "src" / "aiayn" / "parsing" / "evalb.py"
    child = ("import sys; sys.path.insert(0, 'benchmarks'); import results; "
             "import aiayn.parsing.evalb")  # fmt: skip
    assert os.environ[results.LOADED_ENV] == str(results._own_list())
    subprocess.run([sys.executable, "-c", child], cwd=results.ROOT, check=True)
    assert module in results._children_files()
    assert "src/aiayn/parsing/evalb.py" in results.exercised_files(None)


def test_annotate_adds_a_note_beside_meta_and_result(tmp_path, capsys):
    args = argparse.Namespace(no_save=False, note="quiet", results_dir=str(tmp_path))
    path = results.emit("benchmarks/x.py", {"a": 1}, args)
    before = json.loads(path.read_text())
    results.annotate(path, "the README change was text only")
    assert results.main(["annotate", str(path), "measured again later"]) == 0
    after = json.loads(path.read_text())
    assert after["meta"] == before["meta"] and after["result"] == before["result"]
    assert after["annotation"] == "the README change was text only; measured again later"
