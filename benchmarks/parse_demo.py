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

from aiayn.parsing.demo import parse_demo_config, run_parse_demo
from demo_main import demo_main

EVALB = ("f1", "recall", "precision", "sentences", "error_sentences", "skip_sentences",
         "valid_sentences", "tagging_accuracy")  # fmt: skip


def scores(done) -> tuple[str, dict]:
    """The test set and the demo's figures: the strict F1, EVALB's own, where EVALB stops."""
    evalb = done.result.all.as_dict()
    return f"demo treebank test split, {done.result.gold_lines} trees", {
        "strict_f1": round(done.f1, 2),
        "evalb": {k: evalb[k] for k in EVALB},
        "evalb_max_error_stops_at": done.result.stops_at,
    }


def main() -> None:
    demo_main(__file__, __doc__, benchmark="parse_demo", out="bench-demo-parse",
              fast_help="`--fast`'s small run: for tests",
              run=lambda out, fast: run_parse_demo(out, fast=fast),
              config=parse_demo_config, scores=scores)  # fmt: skip


if __name__ == "__main__":
    main()
