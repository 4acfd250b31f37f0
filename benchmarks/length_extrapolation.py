"""Longer than training (sec. 3.5): sinusoids against learned positions on longer sources.

    .venv/bin/python benchmarks/length_extrapolation.py [--max-len 8] [--steps 900]
        [--per-bucket 200] [--beam 4] [--threads 1] [--out DIR] [--note TEXT]

The paper chose sinusoids because they "may allow the model to extrapolate to sequence
lengths longer than the ones encountered during training" (sec. 3.5), and found learned
positions as good on newstest2013 (Table 3 row E), a test set of the same kind as its
training data. This script trains two demo-size models on pairs of at most K subword tokens
per side and translates held-out sources of up to 3K tokens, in buckets of source length.

Data: one stream of distinct pairs from the demo corpus generator (`demo_corpus`), cut in
three: the training candidates, 300 dev pairs (dev loss only, of every length) and the test
pool. `aiayn prepare` learns the joint BPE from the candidates of at most K words a side and
keeps, with its `max_tokens_per_side=K` filter, the pairs of at most K subword tokens a side
(specials not counted; K + 1 positions with eos or bos). The test pool's sources are cut
into that vocabulary's tokens and bucketed by their count: 1..K, K+1..1.5K, 1.5K+1..2K,
2K+1..3K (the generator's sentences end near 22 tokens, so K = 8 reaches 3K); the first
`--per-bucket` of each bucket are translated. A bucket's length is the source's only.

Identical between the two models: the corpus, vocabulary and shards (one `prepare`), the
architecture and recipe (`aiayn.demo`'s DEMO_MODEL and DEMO_TRAIN: 3+3 layers, d_model 128,
no dropout, 2k-token batches, the same number of updates, the last 3 checkpoints averaged),
the seed, hence the batches and the initial value of every parameter they share (learned
positions are initialised last), `model.max_len` (the longest test source plus the decoding
offset, so that nothing is truncated) and the decoding (beam search, sec. 6.1's beam 4 and
alpha 0.6 unless `--beam`). Not identical: the positions, fixed sinusoids (no parameters)
against two learned tables of `model.max_len` x d_model, one per stack (Table 3 row E), of
which only the first K + 1 rows ever receive a gradient: the rows beyond keep their random
initial values (Adam moves no row whose gradients are all zero; checked on a checkpoint).
Training is step-based, so the BLEU does not depend on the machine's load.

Per bucket and model: sacreBLEU (cased, 13a) and the mean hypothesis / reference length
ratio in words, sentence by sentence.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import torch

from aiayn.config import Config, DecodeConfig, apply_overrides
from aiayn.data.binarize import load_manifest, load_vocabs
from aiayn.data.demo_corpus import DemoSplits, generate_pairs, write_splits
from aiayn.data.prepare import prepare
from aiayn.data.prepare_options import PrepareOptions
from aiayn.demo import demo_config, train_and_average
from aiayn.evaluate import score
from aiayn.translate import Translator
from results import add_arguments, emit

ROOT = Path(__file__).resolve().parents[1]
POSITIONS = ("sinusoidal", "learned")
N_VALID = 300
VOCAB_SIZE = 2000  # the demo's
DEMO_STEPS, DEMO_WARMUP, DEMO_SAVES = 900, 800, 9  # DEMO_TRAIN's schedule, scaled by --steps


def buckets(k: int) -> list[tuple[int, int]]:
    """(shortest, longest) source tokens: 1..K, K+1..1.5K, 1.5K+1..2K, 2K+1..3K."""
    edges = [0, k, math.ceil(1.5 * k), 2 * k, 3 * k]
    return [(low + 1, high) for low, high in zip(edges, edges[1:])]


def make_data(out: Path, k: int, pool: int, n_train: int, threads: int) -> dict:
    """Prepare the training set of at most `k` tokens a side; return the test pool with its
    source lengths in that vocabulary's tokens and what training saw."""
    pairs = generate_pairs(pool, seed=1234)
    candidates, valid, test = pairs[:n_train], pairs[n_train:n_train + N_VALID], \
        pairs[n_train + N_VALID:]  # fmt: skip
    # A word is at least one token: dropping longer sentences by words drops no pair the
    # token filter would keep, and `prepare` then reads a fifth of the candidates.
    short = [p for p in candidates if max(len(p[0].split()), len(p[1].split())) <= k]
    prefixes = write_splits(DemoSplits(short, valid, []), out / "corpus")
    options = PrepareOptions(vocab_size=VOCAB_SIZE, max_tokens_per_side=k, workers=threads,
                             overwrite=True, quiet=True)  # fmt: skip
    prepare(train=prefixes["train"], valid=prefixes["valid"], out=out / "data", options=options)
    trained = load_manifest(out / "data")["splits"]["train"]
    src_vocab, _ = load_vocabs(out / "data")
    lengths = [len(ids) for ids in src_vocab.encode_batch([en for en, _ in test])]
    return {"test": test, "lengths": lengths, "train_pairs": trained["pairs"],
            "train_max_tokens": {"src": trained["src_max_len"], "tgt": trained["tgt_max_len"]}}


def bucket_sets(data: dict, k: int, per_bucket: int) -> list[dict]:
    """The first `per_bucket` test pairs of each bucket, in the pool's order, with the
    longest source's token count."""
    sets = []
    for low, high in buckets(k):
        found = [(p, n) for p, n in zip(data["test"], data["lengths"]) if low <= n <= high]
        found = found[:per_bucket]
        sets.append({"tokens": [low, high], "pairs": [p for p, _ in found],
                     "longest": max((n for _, n in found), default=0)})  # fmt: skip
    return sets


def run_config(positional: str, out: Path, max_len: int, steps: int) -> Config:
    """The demo's model and recipe with these positions, `steps` updates (the warm-up and
    the checkpoints scaled with them) and `max_len` positions, training into out/POSITIONAL."""
    config = demo_config(out / "data", out / positional)
    save_every = max(1, steps // DEMO_SAVES)
    return apply_overrides(config, [
        f"model.positional={positional}", f"model.max_len={max_len}",
        f"train.max_steps={steps}", f"train.warmup={max(1, steps * DEMO_WARMUP // DEMO_STEPS)}",
        f"train.save_every_steps={save_every}", f"train.valid_every_steps={3 * save_every}",
    ])  # fmt: skip


def evaluate(checkpoint: Path, sets: list[dict], beam: int | None) -> tuple[list[dict], str]:
    """sacreBLEU and the mean word-length ratio of each bucket's translations; the BLEU's
    signature."""
    translator = Translator.from_checkpoint(checkpoint, beam=beam)
    scores, signature = [], ""
    for bucket in sets:
        sources, references = zip(*bucket["pairs"])
        hypotheses = translator.translate(list(sources))
        report = score(hypotheses, list(references), lang="de")
        ratios = [len(h.split()) / len(r.split()) for h, r in zip(hypotheses, references)]
        scores.append({"bleu": round(report["sacrebleu"]["score"], 2),
                       "length_ratio": round(sum(ratios) / len(ratios), 3)})  # fmt: skip
        signature = report["sacrebleu"]["signature"]
    return scores, signature


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--max-len", type=int, default=8, metavar="K",
                        help="training pairs have at most K subword tokens a side")
    parser.add_argument("--steps", type=int, default=DEMO_STEPS, help="updates per model")
    parser.add_argument("--per-bucket", type=int, default=200, help="test sentences a bucket")
    parser.add_argument("--pool", type=int, default=300_000, help="pairs generated in all")
    parser.add_argument("--train-pool", type=int, default=200_000,
                        help="of them, the training candidates (the rest: dev and test)")
    parser.add_argument("--beam", type=int, default=None,
                        help="beam size (default: the demo's, the paper's 4; 1: greedy)")
    parser.add_argument("--threads", type=int, default=1, help="torch and prepare threads")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench-length-extrapolation")
    add_arguments(parser)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    start, k = time.monotonic(), args.max_len
    data = make_data(args.out, k, args.pool, args.train_pool, args.threads)
    sets = bucket_sets(data, k, args.per_bucket)
    # Learned positions that cover the longest source (+ eos) and its longest output
    # (sec. 6.1: input + 50, which `Translator` would otherwise cut at model.max_len).
    max_len = max(b["longest"] for b in sets) + 1 + DecodeConfig().max_len_offset
    models, minutes = {}, {}
    for positional in POSITIONS:  # through the demo's training and checkpoint averaging
        config = run_config(positional, args.out, max_len, args.steps)
        checkpoint, minutes[positional] = train_and_average(config, args.out / positional)
        models[positional], signature = evaluate(checkpoint, sets, args.beam)
    m = config.model
    emit(__file__, {
        "benchmark": "length_extrapolation", "max_train_tokens": k,
        "train_pairs": data["train_pairs"], "train_max_tokens": data["train_max_tokens"],
        "model": {"n_layers": m.n_layers, "d_model": m.d_model, "n_heads": m.n_heads,
                  "d_ff": m.d_ff, "max_len": m.max_len},
        "steps": args.steps, "beam": args.beam or config.decode.beam, "signature": signature,
        "buckets": [{"tokens": b["tokens"], "sentences": len(b["pairs"]),
                     "longest": b["longest"], **{p: models[p][i] for p in POSITIONS}}
                    for i, b in enumerate(sets)],
        "train_minutes": {p: round(t, 1) for p, t in minutes.items()},
        "total_minutes": round((time.monotonic() - start) / 60, 1),
    }, args)  # fmt: skip


if __name__ == "__main__":
    main()
