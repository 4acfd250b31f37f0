"""`prepare` with cleaning streams: its peak resident memory does not grow with the corpus.

Each size runs `prepare` in a fresh process (one encoding process, so the peak is that
process's `ru_maxrss`). Between 15,000 and 135,000 pairs the corpus grows by about 20 MB;
the peak may grow only by the duplicate filters' hashes (16 bytes a distinct pair, briefly
twice that while runs merge), not by the text. The language and misaligned filters are
skipped: the made-up text is no language and no translation, and what they hold is bounded
whatever the corpus (the identifier's model, about 100 MB a process; Model 1's sample of at
most `misaligned_sample` pairs, drawn by a reservoir as the corpus streams past).
"""

from __future__ import annotations

import json
import random
import resource
import subprocess
import sys
from pathlib import Path

import pytest

SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]


def write_corpus(root: Path, n_pairs: int) -> int:
    """`n_pairs` distinct made-up pairs, streamed to root/train.{en,de}; returns bytes written."""
    rng = random.Random(0)
    words = sorted({"".join(rng.choices(SYLLABLES, k=rng.randint(1, 3))) for _ in range(3000)})
    with open(root / "train.en", "w") as en, open(root / "train.de", "w") as de:
        for _ in range(n_pairs):
            chosen = rng.choices(words, k=rng.randint(5, 20))
            en.write(" ".join(chosen) + " .\n")
            de.write(" ".join(w.capitalize() + "en" for w in reversed(chosen)) + " .\n")
    for lang in ("en", "de"):
        with open(root / f"train.{lang}") as full:
            (root / f"valid.{lang}").write_text("".join(next(full) for _ in range(50)))
    return sum((root / f"train.{lang}").stat().st_size for lang in ("en", "de"))


def child(root: Path) -> None:
    """Prepare root/train with cleaning (run in a fresh process); print pairs and peak MB."""
    from aiayn.data.prepare import prepare
    from aiayn.data.prepare_options import CleanOptions, PrepareOptions

    options = PrepareOptions(vocab_size=500, vocab_sample_sentences=1000, workers=1, quiet=True,
                             clean=CleanOptions(skip=("language", "misaligned")))  # fmt: skip
    manifest = prepare(train=root / "train", valid=root / "valid", out=root / "out",
                       options=options)  # fmt: skip
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    print(json.dumps({"pairs": manifest["splits"]["train"]["pairs"], "peak_mb": peak}))


@pytest.mark.slow
def test_peak_memory_is_flat_as_the_corpus_grows(tmp_path: Path) -> None:
    results, sizes = [], []
    for n_pairs in (15_000, 135_000):
        root = tmp_path / str(n_pairs)
        root.mkdir()
        sizes.append(write_corpus(root, n_pairs) / 2**20)
        done = subprocess.run([sys.executable, __file__, str(root)], check=True,
                              capture_output=True, text=True)  # fmt: skip
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
        assert results[-1]["pairs"] == n_pairs  # all distinct and clean: none removed
    grown = results[1]["peak_mb"] - results[0]["peak_mb"]
    assert sizes[1] - sizes[0] > 18  # MB more text
    assert grown < 12, (results, sizes)  # hashes: about 2 MB, 6 while merging


if __name__ == "__main__":
    child(Path(sys.argv[1]))
