"""Where a benchmark's JSON goes: printed, and written to `benchmarks/results/` with what,
when, where, and from which code it was measured.

Every script in `benchmarks/` ends with `emit(__file__, result, args)`. The file is named
`<script>_<UTC date and time>_<commit>_<machine>.json`, e.g.
`train_speed_2026-11-26T0712Z_5a80f2a_amd-epyc-9r14.json`, and holds the script's own result
under "result" beside a "meta" record: the exact command line, the commit, the versions of
torch and of the peers the script imported, the thread count, the CPU model from
/proc/cpuinfo (model name, family, model), the kernel caps set in the environment
(`kernel_caps`: a run with AVX2's kernels on an AVX-512 machine is another machine's figure),
the GPU where one was used, a free-text `--note`
(e.g. "machine loaded by other jobs"), and the code's provenance:

- "start" and "end": the state of the code (`tree_state`: the commit, and whether files
  under src/, benchmarks/ and configs/ differ from it, tracked or untracked, with a hash of
  that difference) when the run started and when it ended. The start is taken when this
  module is imported, which every benchmark script does before it measures anything;
- "exercised": the repository files the run used, each with its blob id at the start commit
  (`exercised_files`): the modules loaded in this process and in its child processes that
  imported this module (the scripts' own workers), the modules of `also_loads` (for a child
  that runs the `aiayn` command), and the configs/ files named on the command line or in
  the result.

`meta` is written by `emit` alone and never edited: a note added after the run goes in the
record's "annotation", beside "meta" and "result" (`annotate`, or
`python benchmarks/results.py annotate FILE TEXT`).

`benchmarks/report.py` builds the READMEs' tables and plots from these files only: from
results of committed code, marked stale where a file they exercised has changed since.
"""

from __future__ import annotations

import argparse
import atexit
import datetime
import hashlib
import importlib
import importlib.metadata
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PEERS = ("torch", "transformers", "ctranslate2", "numpy", "sentencepiece", "sacrebleu")
CODE = ("src", "benchmarks", "configs")  # the code a result describes ...
NOT_CODE = ("benchmarks/results", "benchmarks/plots", "benchmarks/README.md")  # ... less what
# runs write and report.py makes
LOADED_ENV = "AIAYN_RESULTS_LOADED"  # the file where a child process lists the files it loaded
CONFIG = re.compile(r"configs/[\w./-]+\.ya?ml")
# The variables that cap the instruction sets of PyTorch's, oneDNN's and CTranslate2's kernels
KERNEL_CAPS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "CT2_FORCE_CPU_ISA")


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


def _git(root: Path, *args: str) -> bytes:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, check=True).stdout


def _code(root: Path) -> list[str]:
    """git pathspecs of the code under `root` (CODE less NOT_CODE)."""
    return ["--", *(c for c in CODE if (root / c).exists()),
            *(f":(exclude){p}" for p in NOT_CODE)]  # fmt: skip


def tree_state(root: Path = ROOT) -> dict:
    """The code's state: {"commit": the full commit id, "dirty": whether files under src/,
    benchmarks/ or configs/ (less NOT_CODE) differ from it, tracked or untracked, "diff": a
    hash of that difference (None when clean), "changed": those files}. Outside git, or
    without git: commit None, dirty."""
    try:
        commit = _git(root, "rev-parse", "HEAD").decode().strip()
        diff = _git(root, "diff", "HEAD", "--binary", *_code(root))
        changed = _git(root, "diff", "HEAD", "--name-only", "-z", *_code(root)).decode()
        untracked = _git(root, "ls-files", "--others", "--exclude-standard", "-z",
                         *_code(root)).decode()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "dirty": True, "diff": None, "changed": []}
    new = sorted(p for p in untracked.split("\0") if p)
    digest = hashlib.sha256(diff)
    for path in new:  # an untracked file's content counts as much as a tracked file's change
        try:
            content = (root / path).read_bytes()
        except OSError:
            content = b""
        digest.update(b"\0" + path.encode() + b"\0" + content)
    files = sorted({p for p in changed.split("\0") if p} | set(new))
    return {"commit": commit, "dirty": bool(files),
            "diff": digest.hexdigest()[:16] if files else None, "changed": files}  # fmt: skip


def loaded_files(root: Path = ROOT) -> set[Path]:
    """The files under `root`'s src/ and benchmarks/ of the modules loaded in this process."""
    found = set()
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if file:
            path = Path(file).resolve()
            if any(path.is_relative_to(root / part) for part in ("src", "benchmarks")):
                found.add(path)
    return found


def _own_list() -> Path:
    """Where this process's children list the files they loaded."""
    return Path(tempfile.gettempdir()) / f"aiayn-results-loaded-{os.getpid()}.txt"


def _children_files() -> set[Path]:
    try:
        return {Path(line) for line in _own_list().read_text().splitlines() if line}
    except OSError:
        return set()


def _report_to_parent(parent_list: str) -> None:
    """At exit: add the files this process and its children loaded to the parent's list."""
    files = loaded_files() | _children_files()
    with open(parent_list, "a", encoding="utf-8") as out:  # appends: one write per child
        out.write("".join(f"{path}\n" for path in sorted(files)))


def _track_children() -> None:
    """Children started from now on list what they load in this process's `_own_list`."""
    parent = os.environ.get(LOADED_ENV)
    atexit.register(_own_list().unlink, missing_ok=True)  # last: atexit runs the last first
    if parent and parent != str(_own_list()):
        atexit.register(_report_to_parent, parent)
    os.environ[LOADED_ENV] = str(_own_list())


def blob_ids(paths: list[str], commit: str | None, root: Path = ROOT) -> dict[str, str | None]:
    """path (relative to `root`) -> its git blob id at `commit` (None where it has none)."""
    found: dict[str, str | None] = dict.fromkeys(paths)
    if commit is None or not paths:
        return found
    listing = _git(root, "ls-tree", "-r", "-z", commit, "--", *paths).decode()
    for entry in filter(None, listing.split("\0")):
        info, _, path = entry.partition("\t")
        found[path] = info.split()[2]
    return found


def exercised_files(commit: str | None, also_loads: tuple[str, ...] = (), named: str = "",
                    root: Path = ROOT) -> dict[str, str | None]:  # fmt: skip
    """path -> blob id at `commit` of each file the run used: the modules loaded here and in
    its children (`_track_children`), those `also_loads` imports, and the configs/ files
    that `named` (the command line and the result's text) names."""
    for name in also_loads:
        importlib.import_module(name)
    files = {p.relative_to(root).as_posix() for p in loaded_files(root) | _children_files()
             if p.is_relative_to(root)}  # fmt: skip
    files |= {c for c in CONFIG.findall(named) if (root / c).is_file()}
    return blob_ids(sorted(files), commit, root)


START = tree_state()  # the code as the run starts: this module is imported before any work
STARTED = datetime.datetime.now(datetime.timezone.utc)
_track_children()


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


def kernel_caps(environ=os.environ) -> dict[str, str]:
    """The kernel caps (`KERNEL_CAPS`) set for this run: {} where the kernels are the
    machine's own."""
    return {name: environ[name] for name in KERNEL_CAPS if environ.get(name)}


def meta(script: str, note: str = "", now: datetime.datetime | None = None,
         result: dict | None = None, also_loads: tuple[str, ...] = ()) -> dict:  # fmt: skip
    """The record of what, when, where and from which code (see the module docstring).
    "commit" is the start's; "dirty" says whether the result fails to describe committed
    code: uncommitted changes at the start or the end, or a change during the run."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    end = tree_state(ROOT)
    changed = (end["commit"], end["diff"]) != (START["commit"], START["diff"])
    command = command_line(script, sys.argv[1:])
    provenance = {
        "started_utc": STARTED.strftime("%Y-%m-%dT%H:%M:%SZ"), "start": START, "end": end,
        "changed_during_run": changed,
        "exercised": exercised_files(START["commit"], also_loads, command + json.dumps(result),
                                     ROOT),
    }  # fmt: skip
    aiayn = sys.modules.get("aiayn")
    if aiayn is not None and not Path(aiayn.__file__).resolve().is_relative_to(ROOT / "src"):
        provenance["aiayn_outside_checkout"] = str(Path(aiayn.__file__).parent)
    torch = sys.modules.get("torch")
    return {
        "script": Path(script).stem,
        "command": command,
        "utc": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": (START["commit"] or "unknown")[:7],
        "dirty": START["dirty"] or end["dirty"] or changed,
        "cpu": cpu_model(),
        "kernel_caps": kernel_caps(),
        "gpu": gpu_model(),
        "threads": torch.get_num_threads() if torch is not None else None,
        "versions": versions(),
        "note": note,
        "provenance": provenance,
    }


def file_name(record: dict) -> str:
    m = record["meta"]
    stamp = m["utc"].replace(":", "")[: len("2026-01-01T0000")] + "Z"
    machine = slug(m["gpu"] or m["cpu"]["name"])
    return f"{m['script']}_{stamp}_{m['commit']}_{machine}.json"


def emit(script: str, result: dict, args: argparse.Namespace | None = None,
         also_loads: tuple[str, ...] = ()) -> Path | None:  # fmt: skip
    """Print `result` as JSON and write it with its `meta` to the results directory.

    `script` is the calling script's `__file__`; `args` its parsed options, if it took
    `add_arguments`' (without them the note is empty and the file goes to benchmarks/results);
    `also_loads`: modules that child processes which do not import this module ran (e.g.
    "aiayn.serve.app" for an `aiayn serve` process), imported here so that their files count
    as exercised. Returns the file written (None with `--no-save`)."""
    print(json.dumps(result, indent=1), flush=True)
    if getattr(args, "no_save", False):
        return None
    record = {"meta": meta(script, getattr(args, "note", ""), result=result,
                           also_loads=also_loads), "result": result}  # fmt: skip
    out_dir = Path(getattr(args, "results_dir", RESULTS))
    out_dir.mkdir(parents=True, exist_ok=True)
    path = free_path(out_dir / file_name(record))
    _write(path, record)
    print(f"result written to {path}", file=sys.stderr)
    return path


def free_path(path: Path) -> Path:
    """`path`, or where a result of the same script, minute, commit and machine is there
    already (two runs in one minute, say with other kernels), the first of `name-2.json`,
    `name-3.json`, ... that is free: a result is never written over."""
    found, n = path, 2
    while found.exists():
        found, n = path.with_name(f"{path.stem}-{n}{path.suffix}"), n + 1
    return found


def _write(path: Path, record: dict) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    tmp.replace(path)  # a run cut short leaves no half-written result


def annotate(path: Path, text: str) -> None:
    """Add a note written after the run to a result file, in its "annotation" (after any
    earlier one); "meta" and "result" stay as `emit` wrote them."""
    record = json.loads(Path(path).read_text(encoding="utf-8"))
    earlier = record.get("annotation")
    record["annotation"] = f"{earlier}; {text}" if earlier else text
    _write(Path(path), record)


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


def main(argv: list[str] | None = None) -> int:
    """`python benchmarks/results.py annotate FILE TEXT`: see `annotate`."""
    parser = argparse.ArgumentParser(description="Add a note to a result file after its run.")
    commands = parser.add_subparsers(dest="command", required=True)
    note = commands.add_parser("annotate", help="add TEXT to FILE's annotation")
    note.add_argument("file", type=Path)
    note.add_argument("text")
    args = parser.parse_args(argv)
    annotate(args.file, args.text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
