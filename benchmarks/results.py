"""Where a benchmark's JSON goes: printed, and written to `benchmarks/results/` with what,
when and where it was measured.

Every script in `benchmarks/` ends with `emit(__file__, result, args)`. The file is named
`<script>_<UTC date and time>_<commit>_<machine>.json`, e.g.
`train_speed_2026-11-26T0712Z_5a80f2a_amd-epyc-9r14.json`, and holds the script's own result
under "result" beside a "meta" record: the exact command line, the commit (and whether the
working tree had uncommitted changes), the versions of torch and of the peers the script
imported, the thread count, the CPU model from /proc/cpuinfo (model name, family, model), the
GPU where one was used, and a free-text `--note` (e.g. "machine loaded by other jobs").

`benchmarks/report.py` builds the READMEs' tables and plots from these files only.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PEERS = ("torch", "transformers", "ctranslate2", "numpy", "sentencepiece", "sacrebleu")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options every benchmark shares: `--note`, `--results-dir`, `--no-save`."""
    parser.add_argument("--note", default="",
                        help="recorded with the result, e.g. 'machine loaded by other jobs'")
    parser.add_argument("--results-dir", default=str(RESULTS),
                        help="where the result file is written (default benchmarks/results)")
    parser.add_argument("--no-save", action="store_true",
                        help="print the result only; write no file")  # fmt: skip


def cpu_model(cpuinfo: str | None = None) -> dict:
    """The first processor's 'model name', 'cpu family' and 'model' from /proc/cpuinfo
    (the platform's processor name where there is no /proc/cpuinfo)."""
    if cpuinfo is None:
        path = Path("/proc/cpuinfo")
        cpuinfo = path.read_text(errors="replace") if path.exists() else ""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            if fields:  # a blank line ends the first processor's block
                break
            continue
        fields.setdefault(key.strip(), value.strip())
    return {
        "name": fields.get("model name") or platform.processor() or platform.machine(),
        "family": fields.get("cpu family", ""),
        "model": fields.get("model", ""),
        "logical_cpus": os.cpu_count(),
    }


def gpu_model() -> str | None:
    """The GPU's name if this process used CUDA (torch imported and initialised), else None."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return None
    return torch.cuda.get_device_name()


def slug(text: str) -> str:
    """'AMD EPYC 9R14 96-Core Processor' -> 'amd-epyc-9r14-96-core-processor'."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:48] or "unknown"


def git_commit(root: Path = ROOT) -> tuple[str, bool]:
    """(short commit id, whether tracked files differ from it); ("unknown", True) outside git."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                              check=True).stdout.strip()  # fmt: skip

    try:
        return git("rev-parse", "--short=7", "HEAD"), bool(git("status", "--porcelain", "-uno"))
    except (OSError, subprocess.CalledProcessError):
        return "unknown", True


def versions() -> dict[str, str]:
    """Versions of python and of the libraries this process imported (peers included)."""
    found = {"python": platform.python_version()}
    for name in PEERS:
        if name in sys.modules:
            try:
                found[name] = importlib.metadata.version(name)
            except importlib.metadata.PackageNotFoundError:
                found[name] = getattr(sys.modules[name], "__version__", "unknown")
    return found


def command_line(script: str, argv: list[str]) -> str:
    """The command that reproduces the run, from the repository root."""
    path = Path(script).resolve()
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    return shlex.join([".venv/bin/python", str(shown), *argv])


def meta(script: str, note: str = "", now: datetime.datetime | None = None) -> dict:
    now = now or datetime.datetime.now(datetime.timezone.utc)
    commit, dirty = git_commit()
    torch = sys.modules.get("torch")
    return {
        "script": Path(script).stem,
        "command": command_line(script, sys.argv[1:]),
        "utc": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": commit,
        "dirty": dirty,
        "cpu": cpu_model(),
        "gpu": gpu_model(),
        "threads": torch.get_num_threads() if torch is not None else None,
        "versions": versions(),
        "note": note,
    }


def file_name(record: dict) -> str:
    m = record["meta"]
    stamp = m["utc"].replace(":", "")[: len("2026-01-01T0000")] + "Z"
    machine = slug(m["gpu"] or m["cpu"]["name"])
    return f"{m['script']}_{stamp}_{m['commit']}_{machine}.json"


def emit(script: str, result: dict, args: argparse.Namespace | None = None) -> Path | None:
    """Print `result` as JSON and write it with its `meta` to the results directory.

    `script` is the calling script's `__file__`; `args` its parsed options, if it took
    `add_arguments`' (without them the note is empty and the file goes to benchmarks/results).
    Returns the file written (None with `--no-save`)."""
    print(json.dumps(result, indent=1), flush=True)
    if getattr(args, "no_save", False):
        return None
    record = {"meta": meta(script, getattr(args, "note", "")), "result": result}
    out_dir = Path(getattr(args, "results_dir", RESULTS))
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / file_name(record)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    tmp.replace(path)  # a run cut short leaves no half-written result
    print(f"result written to {path}", file=sys.stderr)
    return path


def publisher(report: dict, json_out: str | None):
    """`publish(part, value)`: sets `report[part]` and the seconds since this call, prints the
    part as one JSON line, and writes the whole report to `json_out` (if given), so that a run
    cut short (a device's time limit) keeps every part it measured."""
    import time

    began = time.perf_counter()

    def publish(part: str, value) -> None:
        report[part] = value
        report["elapsed_s"] = round(time.perf_counter() - began, 1)
        print(json.dumps({part: value}), flush=True)
        if json_out:
            with open(json_out, "w") as f:
                json.dump(report, f, indent=1)

    return publish
