"""Load on `aiayn serve`: dynamic batching against one-request-at-a-time serving, one run.

    .venv/bin/python benchmarks/serve_load.py --checkpoint runs/demo/checkpoint
        [--clients 1 8 32] [--seconds 20] [--max-requests 3000] [--threads 2] [--max-wait-ms MS]
        [--sentences runs/demo/corpus/test.en] [--mixed runs/demo-de-en/checkpoint] [--int8]

Two real `aiayn serve` processes on loopback, one after the other: "dynamic" with the
service's batching (--max-batch-tokens 4096 and `--max-wait-ms`, the service's default
unless given) and "one_at_a_time" (--max-wait-ms 0 --max-batch-tokens 1). Against each, for 1, 8 and 32
concurrent clients, each client sends single sentences of the demo test split (the test
split `aiayn demo` generates) to POST /v1/translate, one after the other on a kept-alive
connection, until `--seconds` have passed or `--max-requests` have been sent in all.
Reported per cell: sentences/s, latency p50 and p99, errors (any status but 200, or a
failed connection), and the server's resident memory (VmRSS) before and after the cell;
the 32-client cell runs twice, and the summary takes the second (warm) one and the memory
growth between the two.
Targets (issue 34): at 32 clients, dynamic >= 3x one-at-a-time's sentences/s, p99 no
worse, zero errors, resident memory flat over the run.

With `--libretranslate EXE` (the `libretranslate` command of its own venv, `make
libretranslate`: its pinned packages conflict with aiayn's), LibreTranslate serves the same
checkpoint as a peer, side by side in the same run: the checkpoint's Argos package (`aiayn
export --to argos`) installed by that venv's Argos, the same sentences one a request to its
POST /translate, the same beam (ARGOS_BEAM_SIZE; Argos's own length penalty), float32 and
`--threads` CPU threads. Offline it needs the package's spaCy pipeline to split sentences
(ARGOS_CHUNK_TYPE=SPACY) and an empty local package index with --load-only, else it tries to
download models as it starts.

With `--mixed B`, a second model (another pair) joins --checkpoint's in one server, each
model loaded alone at half the largest --clients, then both at once (`serve_mixed.py`:
throughput ratios, the lighter model's p99, resident memory of one model and of two).

With `--int8`, every server decodes with int8 weights: `aiayn serve --int8`, and
LibreTranslate with ARGOS_COMPUTE_TYPE int8 (CTranslate2's int8). The report names the
model's size (d_model, layers, parameters), so that results of two models are told apart
(`demo_base.py` trains a base-sized one for this).

Prints one JSON object and writes it under benchmarks/results/ (`results.emit`). Loopback
only; every loop is bounded in requests and time.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

from aiayn.serve.service import ServeConfig
from export_agreement import argos_environment
from results import add_arguments, emit

def modes(max_wait_ms: float) -> dict[str, list[str]]:
    """Each mode's batching options for `aiayn serve`."""
    return {"dynamic": ["--max-wait-ms", f"{max_wait_ms:g}", "--max-batch-tokens", "4096"],
            "one_at_a_time": ["--max-wait-ms", "0", "--max-batch-tokens", "1"]}  # fmt: skip


def demo_test_pairs() -> list[tuple[str, str]]:
    """`aiayn demo`'s test split (the same generator and sizes): (English, German) pairs."""
    from aiayn.data.demo_corpus import demo_splits
    from aiayn.demo import DEMO_SIZES

    return demo_splits(**DEMO_SIZES).test


def start_server(args, checkpoint: str, options: list[str]) -> tuple[subprocess.Popen, int]:
    """`aiayn serve` of `checkpoint` with `args.threads`, `args.worker` and `args.compile`,
    and `options`. The first server of a model not in the cache builds its compiled step
    before it is ready: minutes for a base-sized model, hence the long wait."""
    command = [sys.executable, "-m", "aiayn", "serve", "--checkpoint", checkpoint, "--port",
               "0", "--threads", str(args.threads), "--worker", args.worker, "--compile",
               args.compile, "--max-queue", "100000", *(["--int8"] if args.int8 else []),
               *options]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    line = process.stdout.readline()
    port = int(re.search(r"127\.0\.0\.1:(\d+)", line).group(1))
    return wait_ready(process, port, "/ready", READY_S), port


READY_S = 1200  # a server's wait for /ready, its compiled step's build included


def wait_ready(process: subprocess.Popen, port: int, path: str, seconds: int = 180):
    """`process` once GET `path` answers 200; stopped, and an error, if it does not in time."""
    end = time.monotonic() + seconds
    while time.monotonic() < end and process.poll() is None:
        try:
            if _get(port, path)[0] == 200:
                return process
        except (OSError, ValueError):
            pass
        time.sleep(0.1)
    process.terminate()
    raise RuntimeError(f"the server on port {port} did not get ready in {seconds} s")


def start_libretranslate(
    exe: str, checkpoint: str, threads: int, home: Path, compute_type: str = "float32"
) -> tuple[subprocess.Popen, int, Callable[[str], tuple[str, dict]]]:
    """LibreTranslate serving the checkpoint's Argos package in `compute_type`, everything
    under `home`, no download tried; -> the process, its port and its request for a sentence."""
    from aiayn.checkpoint import Checkpoint
    from aiayn.export import export_checkpoint

    package = export_checkpoint(checkpoint, "argos", home / "model.argosmodel")
    with zipfile.ZipFile(package) as archive:
        meta = json.loads(archive.read(next(n for n in archive.namelist()
                                            if n.endswith("/metadata.json"))))  # fmt: skip
    src, tgt = meta["from_code"], meta["to_code"]
    beam = Checkpoint(checkpoint).config.decode.beam
    env = argos_environment(home, beam, compute_type, threads=threads)
    install = "import sys, argostranslate.package as p; p.install_from_path(sys.argv[1])"
    python = Path(exe).parent / "python"
    subprocess.run([str(python), "-c", install, str(package)], env=env, check=True,
                   capture_output=True)  # fmt: skip
    index = home / "data" / "argos-translate" / "index.json"  # Argos's local package index
    index.write_text("[]\n")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [exe, "--host", "127.0.0.1", "--port", str(port), "--load-only", f"{src},{tgt}",
               "--disable-web-ui", "--disable-files-translation"]  # fmt: skip
    with open(home / "libretranslate.log", "w") as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    wait_ready(process, port, "/languages")
    return process, port, lambda text: ("/translate", {"q": text, "source": src, "target": tgt})


def v1_request(text: str) -> tuple[str, dict]:
    """aiayn's own API: one sentence."""
    return "/v1/translate", {"text": text}


def _get(port: int, path: str) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path)
        reply = conn.getresponse()
        return reply.status, json.loads(reply.read())
    finally:
        conn.close()


def process_tree(pid: int) -> list[int]:
    """`pid` and its descendants (a server's model workers: `aiayn serve --worker process`)."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # a process that ended while we looked
        parents.setdefault(ppid, []).append(int(stat.parent.name))
    tree, todo = [], [pid]
    while todo:
        tree.append(todo.pop())
        todo += parents.get(tree[-1], [])
    return tree


def rss_mb(pid: int) -> float:
    """Resident MB of process `pid` and its descendants, together."""
    total = 0.0
    for each in process_tree(pid):
        try:
            lines = Path(f"/proc/{each}/status").read_text().splitlines()
        except OSError:
            continue
        total += sum(int(line.split()[1]) / 1024 for line in lines if line.startswith("VmRSS:"))
    return total if total else float("nan")


def run_cell(
    port: int, sentences: list[str], clients: int, seconds: float, cap: int,
    shape: Callable[[str], tuple[str, dict]] = v1_request,
) -> dict:  # fmt: skip
    """`clients` threads sending one sentence a request (`shape`: its path and body) until
    time or the cap is up."""
    latencies: list[float] = []
    errors = [0]
    sent = [0]
    lock = threading.Lock()
    end = time.monotonic() + seconds

    def client(k: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        i = k * 37
        while time.monotonic() < end:
            with lock:
                if sent[0] >= cap:
                    break
                sent[0] += 1
            path, body = shape(sentences[i % len(sentences)])
            i += 1
            start = time.monotonic()
            try:
                conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
                reply = conn.getresponse()
                reply.read()
                ok = reply.status == 200
            except (OSError, http.client.HTTPException):
                ok = False
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            with lock:
                if ok:
                    latencies.append(time.monotonic() - start)
                else:
                    errors[0] += 1
        conn.close()

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    began = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - began
    cuts = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else [float("nan")] * 99
    return {
        "clients": clients, "requests": sent[0], "errors": errors[0],
        "sentences_per_s": round(len(latencies) / wall, 2), "wall_s": round(wall, 2),
        "p50_ms": round(cuts[49] * 1000, 1), "p99_ms": round(cuts[98] * 1000, 1),
    }  # fmt: skip


def run_cells(args, name: str, sentences: list[str], process, port: int, shape) -> list[dict]:
    cells = []
    for clients in args.clients:
        before = rss_mb(process.pid)
        cell = run_cell(port, sentences, clients, args.seconds, args.max_requests, shape)
        cell.update(rss_mb_before=round(before, 1), rss_mb_after=round(rss_mb(process.pid), 1))
        cells.append(cell)
        print(name, json.dumps(cell), file=sys.stderr)
    return cells


def run_mode(args, name: str, sentences: list[str]) -> dict:
    start = time.monotonic()
    options = modes(args.max_wait_ms)[name]
    process, port = start_server(args, args.checkpoint, options)
    ready_s = round(time.monotonic() - start, 1)  # the first: with the compiled step's build
    try:
        cells = run_cells(args, name, sentences, process, port, v1_request)
        info = _get(port, "/info")[1]
        return {"options": options, "seconds_to_ready": ready_s, "cells": cells,
                "server_stats": info["stats"], "server_model": info["model"]}  # fmt: skip
    finally:
        process.terminate()
        process.wait(30)


def run_libretranslate(args, sentences: list[str]) -> dict:
    """The peer: LibreTranslate on the same checkpoint, the same cells."""
    with tempfile.TemporaryDirectory(prefix="aiayn-libretranslate-") as home:
        process, port, shape = start_libretranslate(
            args.libretranslate, args.checkpoint, args.threads, Path(home), compute_type(args)
        )
        try:
            cells = run_cells(args, "libretranslate", sentences, process, port, shape)
        finally:
            process.terminate()
            process.wait(30)
    return {"executable": args.libretranslate, "compute_type": compute_type(args), "cells": cells}


def compute_type(args) -> str:
    """The peer's CTranslate2 compute type: the weights aiayn's servers decode with."""
    return "int8" if args.int8 else "float32"


def model_size(checkpoint: str) -> dict:
    """What names a checkpoint's model in the report: its size and parameters (counted
    from its config, as the server's /info counts them)."""
    from aiayn.checkpoint import Checkpoint
    from aiayn.model.transformer import parameter_count

    c = Checkpoint(checkpoint).config.model
    return {"d_model": c.d_model, "layers": c.n_layers, "heads": c.n_heads, "d_ff": c.d_ff,
            "parameters": parameter_count(c)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32, 32],
                        help="a cell per number, in order (1 8 32 32: 32 twice, to see "
                        "whether memory stays flat once warm)")  # fmt: skip
    parser.add_argument("--seconds", type=float, default=20.0, help="per cell (20)")
    parser.add_argument("--max-requests", type=int, default=3000, help="per cell (3000)")
    parser.add_argument("--threads", type=int, default=2, help="the server's torch threads (2)")
    parser.add_argument("--max-wait-ms", type=float, default=ServeConfig.max_wait_ms,
                        help="the dynamic server's --max-wait-ms (default: aiayn serve's)")
    parser.add_argument("--worker", choices=("process", "thread"), default="process",
                        help="where the server's models decode (aiayn serve --worker)")
    parser.add_argument("--compile", choices=("auto", "never"), default="auto",
                        help="the server's compiled decoder step (aiayn serve --compile): "
                        "built by the first server if not in the cache (auto), or not used")
    parser.add_argument("--sentences", metavar="FILE",
                        help="one a line (default: the demo test split's English, generated)")
    parser.add_argument("--libretranslate", metavar="EXE",
                        help="also LibreTranslate, this command (e.g. .venv-lt/bin/libretranslate), "
                        "serving the same model as a peer")  # fmt: skip
    parser.add_argument("--mixed", metavar="CHECKPOINT",
                        help="also a second model in the same server (another pair), under "
                        "mixed load with --checkpoint's (serve_mixed.py)")  # fmt: skip
    parser.add_argument("--int8", action="store_true",
                        help="int8 weights in every server: aiayn serve --int8, LibreTranslate "
                        "with ARGOS_COMPUTE_TYPE int8")  # fmt: skip
    add_arguments(parser)
    args = parser.parse_args()
    given = None
    if args.sentences:
        given = [l for l in Path(args.sentences).read_text().splitlines() if l.strip()]
    pairs = demo_test_pairs()
    sentences = given or [src for src, _ in pairs]
    if args.mixed:  # its languages checked before the long runs
        from serve_mixed import check_languages

        check_languages(args, pairs, given)
    report = {"checkpoint": args.checkpoint, "model": model_size(args.checkpoint),
              "weights": compute_type(args), "seconds_per_cell": args.seconds,
              "load_average_at_start": list(os.getloadavg()),
              "max_requests_per_cell": args.max_requests, "server_threads": args.threads,
              "server_worker": args.worker, "server_compile": args.compile,
              "modes": {name: run_mode(args, name, sentences) for name in modes(0)}}  # fmt: skip
    if args.libretranslate:
        report["peers"] = {"libretranslate": run_libretranslate(args, sentences)}
    report["summary"] = summary(report["modes"], max(args.clients), report.get("peers", {}))
    if args.mixed:
        from serve_mixed import run_mixed

        report["mixed"] = run_mixed(args, pairs, given)
    emit(__file__, report, args, also_loads=("aiayn.cli", "aiayn.serve.app"))  # the server's


def summary(modes: dict, clients: int, peers: dict | None = None) -> dict:
    """The issue's targets at `clients` concurrent clients, and each peer's figures there."""
    dyn = [c for c in modes["dynamic"]["cells"] if c["clients"] == clients][-1]
    one = [c for c in modes["one_at_a_time"]["cells"] if c["clients"] == clients][-1]
    cells = [c for m in [*modes.values(), *(peers or {}).values()] for c in m["cells"]]
    figures = {}
    for name, peer in (peers or {}).items():
        cell = [c for c in peer["cells"] if c["clients"] == clients][-1]
        figures[f"{name}_sentences_per_s"] = cell["sentences_per_s"]
        figures[f"{name}_p99_ms"] = cell["p99_ms"]
        figures[f"dynamic_vs_{name}_throughput"] = round(
            dyn["sentences_per_s"] / max(cell["sentences_per_s"], 1e-9), 2)
        # latency with the fewest clients (the issue's: 1): aiayn's p50 / the peer's
        alone = min(c["clients"] for c in peer["cells"])
        mine = next(c for c in modes["dynamic"]["cells"] if c["clients"] == alone)
        theirs = next(c for c in peer["cells"] if c["clients"] == alone)
        figures[f"dynamic_vs_{name}_p50_at_{alone}_client"] = round(
            mine["p50_ms"] / max(theirs["p50_ms"], 1e-9), 2)
    rss = [c[k] for c in modes["dynamic"]["cells"] for k in ("rss_mb_before", "rss_mb_after")]
    same = [c for c in modes["dynamic"]["cells"] if c["clients"] == clients]
    speedup = dyn["sentences_per_s"] / max(one["sentences_per_s"], 1e-9)
    return {
        "clients": clients, "throughput_ratio": round(speedup, 2),
        "throughput_target_3x_met": speedup >= 3.0,
        "p99_ms_dynamic": dyn["p99_ms"], "p99_ms_one_at_a_time": one["p99_ms"],
        "p99_target_met": dyn["p99_ms"] <= one["p99_ms"],
        "errors": sum(c["errors"] for c in cells),
        "dynamic_rss_mb_min_max": [min(rss), max(rss)],
        # the same load again: growth after the first such cell (buffers sized, warm)
        "dynamic_rss_mb_growth_repeat": round(same[-1]["rss_mb_after"] - same[0]["rss_mb_after"], 1)
        if len(same) > 1 else None,
        **figures,
    }  # fmt: skip


if __name__ == "__main__":
    main()
