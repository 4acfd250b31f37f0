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

from aiayn.demo import demo_config, run_demo
from demo_main import demo_main


def scores(done) -> tuple[str, dict]:
    """The test set and the demo's figures: sacreBLEU with its signature, chrF."""
    return "demo test split, 500 sentences", {
        "bleu": round(done.bleu, 2), "chrf": round(done.report["chrf"]["score"], 2),
        "signature": done.report["sacrebleu"]["signature"],
    }  # fmt: skip


def main() -> None:
    demo_main(__file__, __doc__, benchmark="demo", out="bench-demo",
              fast_help="`aiayn demo --fast`: for tests",
              run=lambda out, fast: run_demo(out, fast=fast, examples=0),
              config=demo_config, scores=scores)  # fmt: skip


if __name__ == "__main__":
    main()
