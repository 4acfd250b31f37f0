"""Multi30k (task 1, English-German): 29k image-description pairs, a laptop-sized corpus.

Not a dataset of the paper, but real translation data small enough to train on a CPU in
an afternoon, which makes it the project's development and integration corpus. The raw
files are those of github.com/multi30k/dataset (`data/task1/raw`): `train.{en,de}.gz`,
`val.{en,de}.gz` and `test_2016_flickr.{en,de}.gz`. Cite: Elliott et al., "Multi30K:
Multilingual English-German Image Descriptions", VL 2016.

    aiayn prepare multi30k --from DIR --out data/multi30k   # raw files already on disk
    aiayn prepare multi30k --out data/multi30k              # download them first
"""

from __future__ import annotations

import urllib.request
from pathlib import Path

from aiayn.data.prepare import prepare
from aiayn.data.prepare_options import NO_CLEANING, PrepareOptions
from aiayn.errors import DataError

BASE_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw"
SPLITS = {"train": "train", "valid": "val", "test": "test_2016_flickr"}
LANGS = ("en", "de")
# joint BPE of 8000 pieces; ~37k as for WMT would leave most pieces unseen on 29k pairs.
# No cleaning: the standard 29,000 pairs, as published results train on them.
OPTIONS = PrepareOptions(vocab_size=8000, clean=NO_CLEANING)


def raw_prefixes(raw_dir: str | Path) -> dict[str, Path]:
    """The split prefixes inside `raw_dir`; DataError listing any raw file that is missing."""
    raw_dir = Path(raw_dir)
    missing = [
        f"{stem}.{lang}.gz"
        for stem in SPLITS.values()
        for lang in LANGS
        if not any((raw_dir / f"{stem}.{lang}{ext}").is_file() for ext in (".gz", ""))
    ]
    if missing:
        raise DataError(f"{raw_dir}: missing Multi30k files: {', '.join(missing)}")
    return {split: raw_dir / stem for split, stem in SPLITS.items()}


def download(dest: str | Path, base_url: str = BASE_URL) -> Path:
    """Fetch the six raw files into `dest` (each written under a temporary name, then renamed)."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for stem in SPLITS.values():
        for lang in LANGS:
            name = f"{stem}.{lang}.gz"
            if (dest / name).is_file():
                continue
            partial = dest / f".{name}.part"
            try:
                urllib.request.urlretrieve(f"{base_url}/{name}", partial)
            except OSError as err:
                partial.unlink(missing_ok=True)
                raise DataError(f"cannot download {base_url}/{name}: {err}") from err
            partial.rename(dest / name)
    return dest


def prepare_multi30k(
    raw_dir: str | Path, out: str | Path, options: PrepareOptions = OPTIONS
) -> dict:
    """Prepare Multi30k from its raw files, in either direction (`options.src`, `.tgt`)."""
    if {options.src, options.tgt} != set(LANGS):
        raise DataError(f"Multi30k task 1 is en-de: got {options.src}-{options.tgt}")
    prefixes = raw_prefixes(raw_dir)
    return prepare(
        train=prefixes["train"], valid=prefixes["valid"], test=prefixes["test"], out=out,
        options=options,
    )  # fmt: skip
