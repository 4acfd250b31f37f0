"""Does `prepare` scale? Throughput and peak memory at 200k and 2M synthetic pairs.

    PYTHONPATH=src python benchmarks/prepare_scale.py [--sizes 200000 2000000] [--workers 2]

Prints one JSON object: per size, pairs/second of `prepare` (reading, vocabulary, encoding,
writing) and the peak resident memory of its largest process, and whether peak memory at
the largest size stays under 1.3x that at the smallest (it should: everything streams, and
the vocabulary trains on a fixed-size sample).

Each size runs in a fresh process tree, measured from a middle process with
`getrusage(RUSAGE_CHILDREN).ru_maxrss` (the largest of the `prepare` process and its
encoding workers), so one run's peak never leaks into another's. The synthetic corpus
(random words of a fixed lexicon, a word-for-word "translation" with local reordering)
is streamed to temporary files first and not timed.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results import add_arguments, emit

SYLLABLES = [f"b{v}" for v in "aeiou"] + [c + v for c in "dklmnrst" for v in "aeio"]


def lexicon(rng: random.Random, size: int) -> list[str]:
    """`size` distinct made-up words of 1-4 syllables."""
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 4))))
    return sorted(words)


def write_corpus(prefix: Path, n_pairs: int, seed: int) -> None:
    """Stream `n_pairs` synthetic pairs to PREFIX.en / PREFIX.de (Zipf-like word choice)."""
    rng = random.Random(seed)
    en_words = lexicon(random.Random(0), 4000)
    de_words = [w.upper()[:1] + w[1:] + "en" for w in lexicon(random.Random(1), 4000)]
    weights = [1 / (rank + 1) for rank in range(len(en_words))]
    with open(f"{prefix}.en", "w") as en, open(f"{prefix}.de", "w") as de:
        for _ in range(n_pairs):
            ids = rng.choices(range(len(en_words)), weights, k=rng.randint(4, 30))
            swapped = ids[1:3][::-1] + ids[:1] + ids[3:]  # a little reordering
            en.write(" ".join(en_words[i] for i in ids) + " .\n")
            de.write(" ".join(de_words[i] for i in swapped) + " .\n")


def child(workdir: Path, workers: int) -> None:
    """Run `prepare` once (the measured process)."""
    from aiayn.data.prepare import prepare
    from aiayn.data.prepare_options import CleanOptions, PrepareOptions

    start = time.perf_counter()
    # the default cleaning, less the language filter: the made-up words are no language
    options = PrepareOptions(vocab_size=8000, workers=workers, vocab_sample_sentences=300_000,
                             quiet=True, clean=CleanOptions(skip=("language",)))  # fmt: skip
    manifest = prepare(train=workdir / "train", valid=workdir / "valid", out=workdir / "out",
                       options=options)  # fmt: skip
    seconds = time.perf_counter() - start
    train = manifest["splits"]["train"]
    tokens = train["src_tokens"] + train["tgt_tokens"]
    print(json.dumps({"seconds": seconds, "pairs": train["read"], "tokens": tokens}))


def measure(workdir: Path, workers: int) -> None:
    """Run `child` in a subprocess and report its result with the tree's peak RSS."""
    cmd = [sys.executable, __file__, "--child", str(workdir), "--workers", str(workers)]
    done = subprocess.run(cmd, check=True, capture_output=True, text=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(json.dumps(result))


def run_size(n_pairs: int, workers: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="aiayn-bench-") as tmp:
        workdir = Path(tmp)
        write_corpus(workdir / "train", n_pairs, seed=n_pairs)
        write_corpus(workdir / "valid", 2000, seed=7)
        cmd = [sys.executable, __file__, "--measure", str(workdir), "--workers", str(workers)]
        done = subprocess.run(cmd, check=True, capture_output=True, text=True)
        result = json.loads(done.stdout.strip().splitlines()[-1])
    return {
        "pairs": result["pairs"],
        "seconds": round(result["seconds"], 1),
        "pairs_per_second": round(result["pairs"] / result["seconds"]),
        "tokens": result["tokens"],
        "peak_rss_mb": round(result["peak_rss_mb"], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[200_000, 2_000_000])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    add_arguments(parser)
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.workers)
    if args.measure:
        return measure(args.measure, args.workers)
    runs = [run_size(n, args.workers) for n in args.sizes]
    ratio = runs[-1]["peak_rss_mb"] / runs[0]["peak_rss_mb"]
    report = {
        "benchmark": "prepare_scale",
        "workers": args.workers,
        "vocab_size": 8000,
        "vocab_sample_sentences": 300_000,
        "runs": runs,
        "peak_rss_ratio_largest_to_smallest": round(ratio, 3),
        "bounded_memory": ratio < 1.3,
    }
    emit(__file__, report, args)
    if ratio >= 1.3:
        sys.exit(f"peak memory grew {ratio:.2f}x from {args.sizes[0]} to {args.sizes[-1]} pairs")


if __name__ == "__main__":
    main()
