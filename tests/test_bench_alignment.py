"""`benchmarks/alignment.py` on a tiny model: every layer, head and row is scored, and each
figure is what `aiayn.alignment` gives for that choice against the demo grammar's links."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from aiayn.alignment import AlignmentConfig, alignment_error, word_alignments
from aiayn.data.demo_alignment import gold_alignment
from aiayn.translate import Translator
from tiny_checkpoint import save_tiny_checkpoint

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import alignment as bench  # noqa: E402


def test_every_choice_is_scored_and_the_chosen_one_is_the_best_head_average(tmp_path):
    translator = Translator.from_checkpoint(save_tiny_checkpoint(tmp_path / "ckpt"), reference=True)
    examples = bench.held_out_examples(40, 0, 8, seed=5)
    report = bench.evaluate(translator, examples, max_tokens=200)
    layers, heads = translator.model.config.n_layers, translator.model.config.n_heads
    assert len(report["table"]) == 2 * 2 * layers * (heads + 1)
    means = [r for r in report["table"] if r["heads"] == "mean"]
    assert report["chosen"]["aer"] == min(r["aer"] for r in means)
    assert report["chosen"]["layer_from_last"] == report["chosen"]["layer"] - layers
    src, tgt = translator.src_vocab, translator.tgt_vocab
    pairs = [(src.encode(e.en) + [src.eos_id], tgt.encode(e.de)) for e in examples]
    gold = [gold_alignment(e) for e in examples]
    for row in [report["chosen"], report["best_single_head"]]:
        heads_ = None if row["heads"] == "mean" else (row["heads"],)
        config = AlignmentConfig(layer=row["layer"], heads=heads_, row=row["row"], links=row["links"])
        found = [set(x) for x in word_alignments(translator.model, src, tgt, pairs, config)]
        scores = alignment_error(found, gold)
        for key in ("precision", "recall", "aer"):
            assert row[key] == pytest.approx(scores[key], abs=1e-4)
    assert report["gold_links"] == sum(len(g) for g in gold)


def test_the_default_is_the_choice_of_the_committed_result():
    from aiayn.alignment import DEFAULT_ALIGNMENT

    files = sorted((Path(__file__).resolve().parents[1] / "benchmarks" / "results").glob("alignment_*.json"))
    if not files:
        pytest.skip("no benchmarks/results/alignment_*.json committed yet")
    chosen = json.loads(files[-1].read_text())["result"]["chosen"]
    assert (chosen["links"], chosen["row"], chosen["heads"], chosen["layer_from_last"]) == (
        DEFAULT_ALIGNMENT.links, DEFAULT_ALIGNMENT.row, "mean", DEFAULT_ALIGNMENT.layer)
    assert DEFAULT_ALIGNMENT.heads is None
