"""The offline parse demo's F1 (`aiayn demo --task parse`), recorded as a result file.

    .venv/bin/python benchmarks/parse_demo.py [--out runs/bench-demo-parse] [--note TEXT] [--fast]

Runs `aiayn.parsing.demo.run_parse_demo` as `aiayn demo --task parse` does (the demo
grammar's treebank, a 2+2-layer d_model 128 Transformer trained for a fixed number of steps,
the last 3 checkpoints averaged, beam search with the paper's parsing settings on the test
split) and prints one JSON object: the strict F1 (the demo's ``F1`` line: EVALB's error and
skip sentences scored as parses with no matching bracket), EVALB's own figures with
COLLINS.prm and its error and skip counts, the model, and the training and end-to-end
minutes. The F1 is the same on every machine up to rounding in the products; the minutes
are the machine's.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from aiayn.parsing.demo import parse_demo_config, run_parse_demo
from results import add_arguments, emit

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench-demo-parse")
    parser.add_argument("--fast", action="store_true", help="`--fast`'s small run: for tests")
    add_arguments(parser)
    args = parser.parse_args()
    start = time.monotonic()
    done = run_parse_demo(args.out, fast=args.fast)
    config = parse_demo_config(args.out / "data", args.out, fast=args.fast)
    scores = done.result
    evalb = scores.all.as_dict()
    emit(__file__, {
        "benchmark": "parse_demo",
        "test_set": f"demo treebank test split, {scores.gold_lines} trees",
        "model": {"n_layers": config.model.n_layers, "d_model": config.model.d_model,
                  "n_heads": config.model.n_heads, "d_ff": config.model.d_ff},
        "train_steps": config.train.max_steps,
        "strict_f1": round(done.f1, 2),
        "evalb": {k: evalb[k] for k in ("f1", "recall", "precision", "sentences",
                                        "error_sentences", "skip_sentences", "valid_sentences",
                                        "tagging_accuracy")},
        "evalb_max_error_stops_at": scores.stops_at,
        "train_minutes": round(done.train_minutes, 1),
        "total_minutes": round((time.monotonic() - start) / 60, 1),
    }, args)  # fmt: skip


if __name__ == "__main__":
    main()
