"""The offline demo with the paper's base network: the speed benchmarks' base-sized model.

    .venv/bin/python benchmarks/demo_base.py [--out runs/bench-base] [--note TEXT] [--fast]

`aiayn demo`'s pipeline (the embedded English->German corpus, prepare, train, average the
last 3 checkpoints, beam search on the 500-sentence test split, sacreBLEU) with the base
network of Table 3 (d_model 512, 8 heads, d_ff 2048, 6 + 6 layers) in place of the demo's
small one, for `BASE_STEPS` updates of the demo's 2k-token batches: what two CPU cores train
in minutes. `serve_load.py` and `translate_speed.py` time beam search, and beam search's
cost follows its outputs' lengths: an untrained network of this size runs every hypothesis
to the length limit. This one translates the demo corpus (its test BLEU), and its outputs
end where translations end (the length ratio, sacreBLEU's output / reference length, near
1), so the servers are timed on the work a real model of this size gives them.

Prints one JSON object as `demo.py` does (`demo_main`), with the length ratio beside BLEU.
"""

from __future__ import annotations

from aiayn.demo import demo_config, run_demo
from demo_main import demo_main

# Table 3's base network (dropout off: the demo sees each generated pair about once, see
# `aiayn.demo.DEMO_MODEL`), and a budget of updates in place of the demo's 900: eq. 3's
# warm-up shortened with it, so that the rate peaks as the demo's does (d_model^-0.5 x
# warmup^-0.5 is about 3e-3 for both).
BASE_STEPS = 300
BASE = [
    "model.d_model=512", "model.n_heads=8", "model.d_ff=2048", "model.n_layers=6",
    f"train.max_steps={BASE_STEPS}", "train.warmup=200", "train.save_every_steps=50",
    "train.valid_every_steps=100",
]  # fmt: skip
# `--fast` (for tests): the demo's own tiny run, one layer more, to show the changes apply.
FAST_CHANGES = ["model.n_layers=2"]


def changes(fast: bool) -> list[str]:
    return FAST_CHANGES if fast else BASE


def scores(done) -> tuple[str, dict]:
    """sacreBLEU with its signature, chrF, and the outputs' length over the references'."""
    s = done.report["sacrebleu"]
    return "demo test split, 500 sentences", {
        "bleu": round(done.bleu, 2), "chrf": round(done.report["chrf"]["score"], 2),
        "length_ratio": round(s["sys_len"] / s["ref_len"], 3), "signature": s["signature"],
    }  # fmt: skip


def main() -> None:
    demo_main(__file__, __doc__, benchmark="demo_base", out="bench-base",
              fast_help="the demo's tiny run with 2 layers: for tests",
              run=lambda out, fast: run_demo(out, fast=fast, examples=0, changes=changes(fast)),
              config=lambda data, out, fast: demo_config(data, out, fast=fast, changes=changes(fast)),
              scores=scores)  # fmt: skip


if __name__ == "__main__":
    main()
