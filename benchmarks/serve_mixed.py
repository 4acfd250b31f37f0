"""`serve_load.py --mixed B`: two models in one `aiayn serve` under mixed load (issue 54).

One server serves --checkpoint A and --mixed B (two pairs, e.g. en -> de and de -> en; the
demo test split gives English and German sentences, `--sentences` English only). With C
the largest of --clients and C/2 clients a model, three cells of --seconds each:

    alone_a   C/2 clients send to A only (B idle)
    alone_b   C/2 clients send to B only
    mixed     C/2 clients send to A and C/2 to B, at once

Each client sends one sentence a request to POST /v1/translate with the model's source and
target. Reported per cell and model: sentences/s, p50 and p99 latency, errors. Targets:
each model's throughput mixed >= 0.8 x alone; the lighter model's (lower p99 alone) p99
mixed <= its p99 alone + --max-wait-ms + one batch of the other (the other's p50 alone).
Memory: the two-model server's resident MB once ready, beside a one-model server of A's
(each model is loaded once: the difference is about B's size). Cores: per phase (alone_a,
alone_b, mixed), the CPU seconds of the server process and of this one (its client
threads) over the phase's wall time: whether the mixed phase was short of cores (their sum
near the machine's) or of something else (the interpreter's lock, the queue).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

from serve_load import _get, process_tree, rss_mb, run_cell, start_server

def _shape(pair: dict) -> object:
    def shape(text: str) -> tuple[str, dict]:
        return "/v1/translate", {"text": text, "source": pair["source"], "target": pair["target"]}

    return shape


def _sentences(language: str, pairs: list[tuple[str, str]], given: list[str] | None) -> list[str]:
    """Sentences in `language`: English from --sentences where given, else the demo test
    split's English or German (`--sentences` names English ones only)."""
    if language == "en" and given:
        return given
    if language not in ("en", "de"):
        raise SystemExit(f"--mixed: no sentences in {language!r} (the demo split has en and de)")
    return [pair[language == "de"] for pair in pairs]


def check_languages(args, pairs: list[tuple[str, str]], given: list[str] | None) -> None:
    """Before any cell runs: each model's source language has sentences (SystemExit)."""
    from aiayn.checkpoint import Checkpoint

    for path in (args.checkpoint, args.mixed):
        _sentences(Checkpoint(path).languages[0] or "en", pairs, given)


def _together(jobs: list) -> list[dict]:
    """Run each (port, sentences, clients, seconds, cap, shape) cell at the same time."""
    out: list[dict | None] = [None] * len(jobs)

    def one(i: int) -> None:
        out[i] = run_cell(*jobs[i])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out  # type: ignore[return-value]


def cpu_seconds(pid: int, descendants: bool = True) -> float:
    """User + system CPU seconds so far of process `pid`, all its threads, and with
    `descendants` theirs too (the server's model workers) (/proc/PID/stat)."""
    total = 0
    for each in process_tree(pid) if descendants else [pid]:
        try:
            fields = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended while we looked
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


def busy_cores(server_pid: int, phase) -> tuple[object, dict]:
    """Run `phase()`; -> its value, and the cores the server and this process (the clients)
    kept busy meanwhile: CPU seconds over wall seconds."""
    # the clients: this process alone (the server is one of its descendants)
    start, server, own = time.monotonic(), cpu_seconds(server_pid), cpu_seconds(os.getpid(), False)
    value = phase()
    wall = time.monotonic() - start
    cores = {"server": (cpu_seconds(server_pid) - server) / wall,
             "clients": (cpu_seconds(os.getpid(), False) - own) / wall}  # fmt: skip
    cores["total"] = cores["server"] + cores["clients"]
    return value, {k: round(v, 2) for k, v in cores.items()}


def resident_mb_alone(args) -> float:
    """A one-model server of A's resident MB once ready (then stopped)."""
    process, _ = start_server(args, args.checkpoint, ["--max-wait-ms", f"{args.max_wait_ms:g}"])
    try:
        return round(rss_mb(process.pid), 1)
    finally:
        process.terminate()
        process.wait(30)


def run_mixed(args, pairs: list[tuple[str, str]], given: list[str] | None) -> dict:
    """The three cells on one server of A and B, the memory figures and the summary."""
    alone_mb = resident_mb_alone(args)
    options = ["--checkpoint", args.mixed, "--max-wait-ms", f"{args.max_wait_ms:g}"]
    process, port = start_server(args, args.checkpoint, options)
    try:
        both_mb = round(rss_mb(process.pid), 1)
        models = _get(port, "/info")[1]["models"]
        half = max(max(args.clients) // 2, 1)
        jobs = [(port, _sentences(m["languages"]["source"], pairs, given), half, args.seconds,
                 args.max_requests, _shape(m["languages"])) for m in models]  # fmt: skip
        cells, cores = {}, {"logical_cpus": os.cpu_count()}
        for name, phase in (("alone_a", lambda: [run_cell(*jobs[0])]),
                            ("alone_b", lambda: [run_cell(*jobs[1])]),
                            ("mixed", lambda: _together(jobs))):  # fmt: skip
            done, cores[name] = busy_cores(process.pid, phase)
            names = [name] if len(done) == 1 else ["mixed_a", "mixed_b"]
            cells.update(zip(names, done))
        for name, cell in cells.items():
            print("mixed", name, json.dumps(cell), file=sys.stderr)
        after_mb = round(rss_mb(process.pid), 1)
    finally:
        process.terminate()
        process.wait(30)
    return {"models": [m["name"] for m in models], "clients_per_model": half,
            "max_wait_ms": args.max_wait_ms, "cells": cells, "busy_cores": cores,
            "rss_mb": {"one_model_ready": alone_mb, "two_models_ready": both_mb,
                       "two_models_after": after_mb},
            "summary": mixed_summary(cells, args.max_wait_ms)}  # fmt: skip


def mixed_summary(cells: dict, wait_ms: float) -> dict:
    """The issue's targets: throughput ratios, and the lighter model's p99 against its bound."""
    ratio = {k: round(cells[f"mixed_{k}"]["sentences_per_s"]
                      / max(cells[f"alone_{k}"]["sentences_per_s"], 1e-9), 2) for k in "ab"}
    light = min("ab", key=lambda k: cells[f"alone_{k}"]["p99_ms"])
    heavy = "b" if light == "a" else "a"
    bound = cells[f"alone_{light}"]["p99_ms"] + wait_ms + cells[f"alone_{heavy}"]["p50_ms"]
    p99 = cells[f"mixed_{light}"]["p99_ms"]
    return {
        "throughput_mixed_over_alone_a": ratio["a"], "throughput_mixed_over_alone_b": ratio["b"],
        "throughput_target_0_8_met": min(ratio.values()) >= 0.8,
        "lighter": light, "lighter_p99_ms_alone": cells[f"alone_{light}"]["p99_ms"],
        "lighter_p99_ms_mixed": p99, "lighter_p99_bound_ms": round(bound, 1),
        "p99_target_met": p99 <= bound,
        "errors": sum(c["errors"] for c in cells.values()),
    }  # fmt: skip
