"""Multi30k's six raw files (train, val, test_2016_flickr; en and de, gzipped) holding
demo-corpus pairs: what the Multi30k benchmarks read, in a second."""

from __future__ import annotations

import gzip
from pathlib import Path

from aiayn.data.demo_corpus import demo_splits


def fake_multi30k(raw: Path, n_train: int = 300, n_valid: int = 6) -> Path:
    raw.mkdir(parents=True)
    splits = demo_splits(n_train=n_train, n_valid=n_valid, n_test=2, seed=3)
    for name, pairs in (("train", splits.train), ("val", splits.valid),
                        ("test_2016_flickr", splits.test)):  # fmt: skip
        for side, lang in enumerate(("en", "de")):
            text = "".join(pair[side] + "\n" for pair in pairs)
            (raw / f"{name}.{lang}.gz").write_bytes(gzip.compress(text.encode()))
    return raw
