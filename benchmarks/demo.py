"""The offline demo's BLEU (`make demo`, `aiayn demo`), recorded as a result file.

    .venv/bin/python benchmarks/demo.py [--out runs/bench-demo] [--note TEXT] [--fast]

Runs `aiayn.demo.run_demo` as `make demo` does (the embedded English->German corpus, a
3+3-layer d_model 128 Transformer trained for a fixed number of steps, the last 3
checkpoints averaged, beam search on the 500-sentence test split) and prints one JSON
object: sacreBLEU (cased, 13a) with its signature, chrF, the model and its training steps,
and the training and end-to-end minutes. The BLEU is the same on every machine up to
rounding in the products; the minutes are the machine's.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from aiayn.demo import demo_config, run_demo
from results import add_arguments, emit

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench-demo")
    parser.add_argument("--fast", action="store_true", help="`aiayn demo --fast`: for tests")
    add_arguments(parser)
    args = parser.parse_args()
    start = time.monotonic()
    done = run_demo(args.out, fast=args.fast, examples=0)
    config = demo_config(args.out / "data", args.out, fast=args.fast)
    emit(__file__, {
        "benchmark": "demo", "test_set": "demo test split, 500 sentences",
        "model": {"n_layers": config.model.n_layers, "d_model": config.model.d_model,
                  "n_heads": config.model.n_heads, "d_ff": config.model.d_ff},
        "train_steps": config.train.max_steps,
        "bleu": round(done.bleu, 2), "chrf": round(done.report["chrf"]["score"], 2),
        "signature": done.report["sacrebleu"]["signature"],
        "train_minutes": round(done.train_minutes, 1),
        "total_minutes": round((time.monotonic() - start) / 60, 1),
    }, args)  # fmt: skip


if __name__ == "__main__":
    main()
