"""`benchmarks/serve_load.py` in seconds: one client and two, a request or two a cell, on a
tiny checkpoint; aiayn's two modes, and a LibreTranslate peer serving the same model.

The real LibreTranslate runs from a venv of its own (`make libretranslate`: its pinned
packages conflict with this one's), which the benchmark uses and the suite does not build.
Here the peer is a stand-in with LibreTranslate's command line and routes that translates with
the real Argos package the benchmark exports and installs (argostranslate, in the dev
install), so the benchmark's plumbing (export, install, offline settings, start, requests,
report) runs in full."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from aiayn.checkpoint import save_checkpoint
from aiayn.config import Config, DecodeConfig
from aiayn.model.transformer import Transformer, parameter_count
from aiayn.serve.service import ServeConfig
from conftest import tiny_model_config
from tiny_checkpoint import tiny_vocab

ROOT = Path(__file__).resolve().parents[1]

# LibreTranslate's command line and the two routes the benchmark uses, over argostranslate.
STAND_IN = """#!{python}
import argparse, json, os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from argostranslate import translate

parser = argparse.ArgumentParser()
for flag in ("--host", "--port", "--load-only"):
    parser.add_argument(flag)
for flag in ("--disable-web-ui", "--disable-files-translation"):
    parser.add_argument(flag, action="store_true")
args = parser.parse_args()
source, target = args.load_only.split(",")
if os.environ.get("STAND_IN_SAYS"):  # the compute type it was started with, for the test
    open(os.environ["STAND_IN_SAYS"], "w").write(os.environ["ARGOS_COMPUTE_TYPE"])
model = translate.get_translation_from_codes(source, target)

class Handler(BaseHTTPRequestHandler):
    def answer(self, body):
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.answer([{{"code": source, "name": source, "targets": [target]}}])

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.answer({{"translatedText": model.translate(body["q"])}})

    def log_message(self, *args):
        pass

ThreadingHTTPServer((args.host, int(args.port)), Handler).serve_forever()
"""


def stand_in(tmp_path: Path) -> Path:
    """A `libretranslate` command beside a `python` that has argostranslate, as in a venv."""
    bin_dir = tmp_path / "lt" / "bin"
    bin_dir.mkdir(parents=True)
    python = bin_dir / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')  # this venv's Python
    python.chmod(0o755)
    exe = bin_dir / "libretranslate"
    exe.write_text(STAND_IN.format(python=sys.executable))
    exe.chmod(0o755)
    return exe


def checkpoint(path: Path, source: str = "en", target: str = "de") -> Path:
    """A random tiny model that records its languages (LibreTranslate finds it by them)."""
    vocab = tiny_vocab()
    config = Config(model=tiny_model_config(vocab_size=vocab.size),
                    decode=DecodeConfig(max_len_offset=4))  # fmt: skip
    torch.manual_seed(0)
    meta = {"languages": {"source": source, "target": target}}
    return save_checkpoint(path, Transformer(config.model), config, vocab, vocab, meta=meta)


def run(ckpt: Path, *options: str, env: dict | None = None) -> dict:
    command = [sys.executable, str(ROOT / "benchmarks" / "serve_load.py"), "--checkpoint",
               str(ckpt), "--clients", "1", "2", "--seconds", "2", "--max-requests", "3",
               "--threads", "1", "--compile", "never", "--no-save", *options]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=600,
                          env={**os.environ, **(env or {})})  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def check_cells(cells: list[dict]) -> None:
    assert [c["clients"] for c in cells] == [1, 2]
    for cell in cells:
        assert cell["errors"] == 0 and 0 < cell["requests"] <= 3
        assert cell["sentences_per_s"] > 0 and cell["rss_mb_after"] > 0


def test_serve_load_measures_both_modes_and_a_libretranslate_peer(tmp_path):
    report = run(checkpoint(tmp_path / "ckpt"), "--libretranslate", str(stand_in(tmp_path)))
    assert report["server_compile"] == "never"  # forwarded: no build in a test
    for mode in report["modes"].values():
        check_cells(mode["cells"])
        assert 0 < mode["seconds_to_ready"] < 300
    check_cells(report["peers"]["libretranslate"]["cells"])
    summary = report["summary"]
    assert summary["errors"] == 0 and summary["clients"] == 2
    assert summary["libretranslate_sentences_per_s"] > 0
    assert summary["dynamic_vs_libretranslate_throughput"] > 0
    assert summary["dynamic_vs_libretranslate_p50_at_1_client"] > 0
    assert report["weights"] == report["peers"]["libretranslate"]["compute_type"] == "float32"
    assert report["model"]["d_model"] == tiny_model_config().d_model
    assert report["model"]["parameters"] == parameter_count(tiny_model_config(vocab_size=tiny_vocab().size))


def test_serve_load_int8_serves_int8_weights_in_aiayn_and_the_peer(tmp_path):
    """--int8: `aiayn serve --int8` (its /info says so) beside LibreTranslate in CTranslate2's
    int8 (the stand-in's environment has ARGOS_COMPUTE_TYPE int8)."""
    says = tmp_path / "compute_type"
    report = run(checkpoint(tmp_path / "ckpt"), "--int8", "--libretranslate",
                 str(stand_in(tmp_path)), env={"STAND_IN_SAYS": str(says)})  # fmt: skip
    assert report["weights"] == report["peers"]["libretranslate"]["compute_type"] == "int8"
    assert all(mode["server_model"]["int8"] for mode in report["modes"].values())
    assert says.read_text() == "int8"
    assert report["summary"]["errors"] == 0


def test_serve_load_mixed_runs_two_models_alone_and_together(tmp_path):
    """--mixed: en -> de and de -> en in one server, each alone at half the clients, then
    both at once; every figure the issue's targets need, and the memory of one and two."""
    report = run(checkpoint(tmp_path / "ende"), "--mixed",
                 str(checkpoint(tmp_path / "deen", "de", "en")))  # fmt: skip
    mixed = report["mixed"]
    assert mixed["models"] == ["en-de", "de-en"] and mixed["clients_per_model"] == 1
    assert set(mixed["cells"]) == {"alone_a", "alone_b", "mixed_a", "mixed_b"}
    for cell in mixed["cells"].values():
        assert cell["errors"] == 0 and 0 < cell["requests"] <= 3 and cell["sentences_per_s"] > 0
    memory = mixed["rss_mb"]
    assert 0 < memory["one_model_ready"] < memory["two_models_ready"]
    cores = mixed["busy_cores"]
    assert set(cores) == {"logical_cpus", "alone_a", "alone_b", "mixed"}
    for phase in ("alone_a", "alone_b", "mixed"):  # each phase decoded: the server was busy
        busy = cores[phase]
        assert busy["server"] > 0 and busy["clients"] >= 0
        assert busy["total"] == pytest.approx(busy["server"] + busy["clients"], abs=0.011)
        assert busy["total"] <= cores["logical_cpus"] + 0.1
    s = mixed["summary"]
    assert s["errors"] == 0 and s["lighter"] in ("a", "b")
    assert s["throughput_mixed_over_alone_a"] > 0 and s["throughput_mixed_over_alone_b"] > 0
    cells = mixed["cells"]
    heavy = "b" if s["lighter"] == "a" else "a"
    assert s["lighter_p99_bound_ms"] == round(
        cells[f"alone_{s['lighter']}"]["p99_ms"] + mixed["max_wait_ms"]
        + cells[f"alone_{heavy}"]["p50_ms"], 1)  # fmt: skip
    assert mixed["max_wait_ms"] == ServeConfig.max_wait_ms  # aiayn serve's default


def test_mixed_takes_german_from_the_demo_split_beside_given_english_and_refuses_others():
    """`--sentences` names English sentences only: a de -> en model's come from the demo
    test split; a language neither has stops the run before its first cell."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from serve_mixed import _sentences

    pairs = [("the cat", "die Katze"), ("a dog", "ein Hund")]
    assert _sentences("en", pairs, ["given one"]) == ["given one"]
    assert _sentences("en", pairs, None) == ["the cat", "a dog"]
    assert _sentences("de", pairs, ["given one"]) == ["die Katze", "ein Hund"]
    with pytest.raises(SystemExit, match="no sentences in 'fr'"):
        _sentences("fr", pairs, None)


def test_the_cores_of_a_server_count_its_workers_and_the_clients_count_only_themselves():
    """`serve_mixed.cpu_seconds`: a server's CPU time includes its model processes'; the
    clients' (this process, whose descendants the server is) must not include the server's."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from serve_mixed import cpu_seconds

    burn = "import time\nend = time.process_time() + 0.6\nwhile time.process_time() < end: pass\n"
    child = subprocess.Popen([sys.executable, "-c", f"{burn}import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)  # fmt: skip
    try:
        own, tree = cpu_seconds(os.getpid(), False), cpu_seconds(os.getpid())
        deadline = time.monotonic() + 60
        while cpu_seconds(child.pid) < 0.5 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert cpu_seconds(os.getpid()) - tree >= 0.4  # the child's burn, while it runs
        assert cpu_seconds(os.getpid(), False) - own < 0.3  # this process only waited
    finally:
        child.stdin.close()
        child.wait(30)
