"""Which encoder-decoder attention aligns words best: precision, recall and AER of every
decoder layer (its heads averaged, and each head alone), with either decoder row for a
target piece and either kind of links, against the demo grammar's gold alignments.

    .venv/bin/python benchmarks/alignment.py --checkpoint runs/demo/checkpoint

The checkpoint is one trained on the demo corpus (`aiayn demo` leaves it in
runs/demo/checkpoint); this script trains nothing. The sentence pairs are the demo's test
split (held out from its training), regenerated with their structure, whose gold links
(`aiayn.data.demo_alignment`) say which English word gives which German word; the model
reads each pair teacher-forced (the reference German, not its own translation), and
`aiayn.alignment` turns the weights into one link per German word. Scores are Och & Ney's
(2003), with sure = possible = gold: AER = 1 - 2|A & G| / (|A| + |G|).

Prints one JSON object and writes it to benchmarks/results/ (`results.py`): for each kind
of links, row choice and layer, the head average and each head; the best head average ("chosen", the
default of `aiayn.alignment`, with its layer also counted from the last) and the best
single head.
"""

from __future__ import annotations

import argparse

from aiayn.alignment import (DEFAULT_ALIGNMENT, LINKS, ROWS, AlignmentConfig, alignment_error,
                             cross_attention, links_from_weights, piece_words, select)
from aiayn.data.demo_alignment import gold_alignment
from aiayn.data.demo_corpus import DemoExample, generate_examples
from aiayn.demo import DEMO_SIZES
from aiayn.translate import Translator
from results import add_arguments, emit


def held_out_examples(n_train: int, n_valid: int, n_test: int, seed: int = 1234) -> list[DemoExample]:
    """The demo's test split (`demo_corpus.demo_splits` with these sizes), with structure."""
    return generate_examples(n_train + n_valid + n_test, seed)[n_train + n_valid :]


def evaluate(translator: Translator, examples: list[DemoExample], max_tokens: int = 4096) -> dict:
    """P / R / AER of every (row, layer, heads) choice; heads "mean" or one head's index."""
    src_vocab, tgt_vocab = translator.src_vocab, translator.tgt_vocab
    pairs = [(src_vocab.encode(e.en) + [src_vocab.eos_id], tgt_vocab.encode(e.de)) for e in examples]
    weights = cross_attention(translator.model, pairs, max_tokens)
    gold = [gold_alignment(e) for e in examples]
    words = [(piece_words(src_vocab.surfaces(s[:-1])) + [None], piece_words(tgt_vocab.surfaces(t)))
             for s, t in pairs]  # fmt: skip
    n_layers, n_heads = weights[0].shape[:2]
    choices = [(links, row, layer, heads) for links in LINKS for row in ROWS
               for layer in range(n_layers) for heads in [None, *((h,) for h in range(n_heads))]]  # fmt: skip
    table = []
    for links, row, layer, heads in choices:
        config = AlignmentConfig(layer=layer, heads=heads, row=row, links=links)
        found = [set(links_from_weights(select(w, config), sw, tw, row, links))
                 for w, (sw, tw) in zip(weights, words)]  # fmt: skip
        scores = {k: round(v, 4) for k, v in alignment_error(found, gold).items()}
        table.append({"links": links, "row": row, "layer": layer,
                      "heads": "mean" if heads is None else heads[0], **scores})  # fmt: skip
    means = [r for r in table if r["heads"] == "mean"]
    chosen = min(means, key=lambda r: (r["aer"], r["layer"]))
    default = {"links": DEFAULT_ALIGNMENT.links, "row": DEFAULT_ALIGNMENT.row,
               "layer": DEFAULT_ALIGNMENT.layer % n_layers, "heads": "mean"}  # fmt: skip
    return {
        "sentences": len(examples),
        "gold_links": sum(len(g) for g in gold),
        "layers": n_layers,
        "heads": n_heads,
        "chosen": {**chosen, "layer_from_last": chosen["layer"] - n_layers},
        "best_single_head": min((r for r in table if r["heads"] != "mean"), key=lambda r: r["aer"]),
        "default_in_src": next(r for r in means if all(r[k] == v for k, v in default.items())),
        "table": table,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True, help="a model trained on the demo corpus")
    parser.add_argument("--sentences", type=int, default=DEMO_SIZES["n_test"],
                        help="the first N of the demo's test split (all: 500)")
    parser.add_argument("--split-sizes", type=int, nargs=3, metavar=("TRAIN", "VALID", "TEST"),
                        default=[DEMO_SIZES[k] for k in ("n_train", "n_valid", "n_test")],
                        help="the demo's split sizes (aiayn demo --fast: 2000 100 100)")
    add_arguments(parser)
    args = parser.parse_args()
    translator = Translator.from_checkpoint(args.checkpoint, reference=True)
    examples = held_out_examples(*args.split_sizes)[: args.sentences]
    report = {"checkpoint": args.checkpoint, **evaluate(translator, examples)}
    emit(__file__, report, args)


if __name__ == "__main__":
    main()
