"""`benchmarks/serve_load.py` in seconds: one client and two, a request or two a cell, on a
tiny checkpoint; aiayn's two modes, and LibreTranslate serving the same model as a peer."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from aiayn.checkpoint import save_checkpoint
from aiayn.config import Config, DecodeConfig
from aiayn.model.transformer import Transformer
from conftest import tiny_model_config
from tiny_checkpoint import tiny_vocab

ROOT = Path(__file__).resolve().parents[1]
LIBRETRANSLATE = ROOT / ".venv-lt" / "bin" / "libretranslate"  # `make libretranslate`


def checkpoint(path: Path) -> Path:
    """A random tiny model that records its languages (LibreTranslate finds it by them)."""
    vocab = tiny_vocab()
    config = Config(model=tiny_model_config(vocab_size=vocab.size),
                    decode=DecodeConfig(max_len_offset=4))  # fmt: skip
    torch.manual_seed(0)
    meta = {"languages": {"source": "en", "target": "de"}}
    return save_checkpoint(path, Transformer(config.model), config, vocab, vocab, meta=meta)


def run(ckpt: Path, *options: str) -> dict:
    command = [sys.executable, str(ROOT / "benchmarks" / "serve_load.py"), "--checkpoint",
               str(ckpt), "--clients", "1", "2", "--seconds", "2", "--max-requests", "3",
               "--threads", "1", "--no-save", *options]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def check_cells(cells: list[dict]) -> None:
    assert [c["clients"] for c in cells] == [1, 2]
    for cell in cells:
        assert cell["errors"] == 0 and 0 < cell["requests"] <= 3
        assert cell["sentences_per_s"] > 0 and cell["rss_mb_after"] > 0


def test_serve_load_measures_both_modes_and_libretranslate_as_a_peer(tmp_path):
    if not LIBRETRANSLATE.is_file():
        pytest.skip("LibreTranslate runs from its own venv (its pinned packages conflict with "
                    "this one's): `make libretranslate` builds .venv-lt")  # fmt: skip
    report = run(checkpoint(tmp_path / "ckpt"), "--libretranslate", str(LIBRETRANSLATE))
    for mode in report["modes"].values():
        check_cells(mode["cells"])
    check_cells(report["peers"]["libretranslate"]["cells"])
    summary = report["summary"]
    assert summary["errors"] == 0 and summary["clients"] == 2
    assert summary["libretranslate_sentences_per_s"] > 0
    assert summary["dynamic_vs_libretranslate_throughput"] > 0
