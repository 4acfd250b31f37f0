"""The main of the two offline demo benchmarks (`demo.py`, `parse_demo.py`): parse the
command line, run the demo as `aiayn demo` does, and emit one result file.

Each script gives what is its own (its default output directory, its demo, its scores); the
record's shared fields (the model, its training steps, the training and end-to-end minutes)
are written here, in the same place of the record for both.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiayn.config import Config
from results import add_arguments, emit

ROOT = Path(__file__).resolve().parents[1]


def demo_main(
    script: str, doc: str, *, benchmark: str, out: str, fast_help: str,
    run: Callable[[Path, bool], Any], config: Callable[..., Config],
    scores: Callable[[Any], tuple[str, dict]],
) -> None:  # fmt: skip
    """Parse the arguments (`--out`, default runs/`out`; `--fast`; `results`' own), run the
    demo, `run(out, fast)`, and emit the record of `script` (the caller's __file__; `doc`'s
    first line describes the command): "benchmark", "test_set", "model", "train_steps", the
    script's own figures, "train_minutes", "total_minutes". `config(out / "data", out,
    fast=)` is the demo's config; `scores(result)` gives (test_set, figures)."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / out)
    parser.add_argument("--fast", action="store_true", help=fast_help)
    add_arguments(parser)
    args = parser.parse_args()
    start = time.monotonic()
    done = run(args.out, args.fast)
    used = config(args.out / "data", args.out, fast=args.fast)
    test_set, figures = scores(done)
    emit(script, {
        "benchmark": benchmark, "test_set": test_set,
        "model": {"n_layers": used.model.n_layers, "d_model": used.model.d_model,
                  "n_heads": used.model.n_heads, "d_ff": used.model.d_ff},
        "train_steps": used.train.max_steps,
        **figures,
        "train_minutes": round(done.train_minutes, 1),
        "total_minutes": round((time.monotonic() - start) / 60, 1),
    }, args)  # fmt: skip
