"""WMT 2014 English-German and English-French, the paper's two tasks (sec. 5.1).

    aiayn prepare wmt14-en-de --out data/wmt14-en-de    # ~4.5M pairs, 37k joint BPE
    aiayn prepare wmt14-en-fr --out data/wmt14-en-fr    # ~36M pairs, 32k vocabulary

Where the data comes from (downloads need internet and the `download` extra):
- training pairs: the HuggingFace `wmt/wmt14` dataset (configs `de-en`, `fr-en`), streamed;
- validation: newstest2013; test: newstest2014, the full 3003-sentence set that the paper
  and later work report on (sacrebleu's `wmt14/full`), both fetched with sacrebleu.

Departures, stated: the paper used a 32k *word-piece* vocabulary for En-Fr; we train
sentencepiece BPE of the same size. HuggingFace's `fr-en` training set is the WMT14
collection (~40.8M pairs before filtering), a little larger than the paper's 36M.
The length filter follows fairseq's prepare-wmt14en2de.sh (Moses clean-corpus-n after BPE:
at most 250 tokens a side, ratio at most 1.5).

Everything after the download is `prepare_from_raw`, which tests run on small local files.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from aiayn.data.prepare import prepare
from aiayn.data.prepare_options import NO_CLEANING, PrepareOptions
from aiayn.errors import AiaynError, DataError

HF_DATASET = "wmt/wmt14"  # the HuggingFace hub name (formerly plain "wmt14")
MAX_TOKENS_PER_SIDE = 250
MAX_LEN_RATIO = 1.5


@dataclass(frozen=True)
class Task:
    """One WMT14 translation task: languages, HuggingFace config, vocabulary size, test sets."""

    src: str
    tgt: str
    hf_config: str
    vocab_size: int
    valid_set: str = "wmt13"  # newstest2013
    test_set: str = "wmt14/full"  # newstest2014, 3003 sentences

    @property
    def options(self) -> PrepareOptions:
        """`prepare`'s options for this task: the paper's vocabulary, fairseq's filter, and
        no other cleaning (the paper trains on the standard data as it is)."""
        return PrepareOptions(
            vocab_size=self.vocab_size, src=self.src, tgt=self.tgt,
            max_tokens_per_side=MAX_TOKENS_PER_SIDE, max_len_ratio=MAX_LEN_RATIO,
            clean=NO_CLEANING,
        )  # fmt: skip


TASKS = {
    "en-de": Task("en", "de", hf_config="de-en", vocab_size=37000),
    "en-fr": Task("en", "fr", hf_config="fr-en", vocab_size=32000),
}

# (test_set, langpair) -> (source file, [reference files]); sacrebleu's downloader by default.
TestSetFiles = Callable[[str, str], tuple[str, list[str]]]


def task(name: str) -> Task:
    """The task named "en-de" or "en-fr" (also accepted: "wmt14-en-de")."""
    key = name.removeprefix("wmt14-")
    if key not in TASKS:
        raise DataError(f"unknown WMT14 task {name!r} (known: {', '.join(TASKS)})")
    return TASKS[key]


def _clean(sentence: str) -> str:
    """One sentence per line: a newline or tab inside a sentence would shift every later pair."""
    for separator in ("\r\n", "\n", "\r", "\t"):
        sentence = sentence.replace(separator, " ")
    return sentence


def write_translation_rows(
    rows: Iterable[dict], src: str, tgt: str, prefix: str | Path, desc: str = "write"
) -> int:
    """Stream rows shaped `{"translation": {src: ..., tgt: ...}}` to PREFIX.src / PREFIX.tgt.

    Both files appear under their final names only when complete. Returns the pair count.
    """
    prefix = Path(prefix)
    final = {lang: Path(f"{prefix}.{lang}") for lang in (src, tgt)}
    partial = {lang: path.with_name(f".{path.name}.part") for lang, path in final.items()}
    count = 0
    try:
        with open(partial[src], "w", encoding="utf-8", newline="\n") as fs, open(
            partial[tgt], "w", encoding="utf-8", newline="\n"
        ) as ft:
            for row in tqdm(rows, desc=desc, unit=" pairs", file=sys.stderr):
                pair = row["translation"]
                fs.write(_clean(pair[src]) + "\n")
                ft.write(_clean(pair[tgt]) + "\n")
                count += 1
    except BaseException:
        for path in partial.values():
            path.unlink(missing_ok=True)
        raise
    for lang in (src, tgt):
        os.replace(partial[lang], final[lang])
    return count


def hf_training_rows(t: Task) -> Iterable[dict]:
    """The HuggingFace `wmt14` training split, streamed (needs `pip install 'aiayn[download]'`)."""
    try:
        import datasets  # noqa: PLC0415 - optional extra, imported only when downloading
    except ImportError as err:
        raise AiaynError(
            "downloading WMT14 needs the HuggingFace `datasets` package: "
            "pip install 'aiayn[download]' (or give prepared text to `aiayn prepare --train`)"
        ) from err
    return datasets.load_dataset(HF_DATASET, t.hf_config, split="train", streaming=True)


def sacrebleu_files(test_set: str, langpair: str) -> tuple[str, list[str]]:
    """Source and reference files of a test set, downloaded by sacrebleu into its cache."""
    from sacrebleu.utils import get_reference_files, get_source_file  # noqa: PLC0415

    return get_source_file(test_set, langpair), get_reference_files(test_set, langpair)


def fetch_test_set(
    test_set: str, t: Task, prefix: str | Path, files: TestSetFiles = sacrebleu_files
) -> None:
    """Copy a test set's source and (first) reference to PREFIX.src / PREFIX.tgt, unless there."""
    if all(Path(f"{prefix}.{lang}").is_file() for lang in (t.src, t.tgt)):
        return
    source, references = files(test_set, f"{t.src}-{t.tgt}")
    shutil.copyfile(source, f"{prefix}.{t.src}")
    shutil.copyfile(references[0], f"{prefix}.{t.tgt}")


def fetch(
    t: Task,
    raw_dir: str | Path,
    *,
    train_rows: Iterable[dict] | None = None,
    files: TestSetFiles = sacrebleu_files,
) -> Path:
    """Write train / valid / test plain text into `raw_dir` (skipping splits already there)."""
    raw_dir = Path(raw_dir)
    raw_dir.mkdir(parents=True, exist_ok=True)
    if not Path(f"{raw_dir / 'train'}.{t.tgt}").is_file():
        rows = hf_training_rows(t) if train_rows is None else train_rows
        write_translation_rows(rows, t.src, t.tgt, raw_dir / "train", desc="download train")
    fetch_test_set(t.valid_set, t, raw_dir / "valid", files)
    fetch_test_set(t.test_set, t, raw_dir / "test", files)
    return raw_dir


def prepare_from_raw(
    t: Task, raw_dir: str | Path, out: str | Path, options: PrepareOptions | None = None
) -> dict:
    """Everything after the download: `prepare` with `options`, by default `t.options` (the
    paper's vocabulary and fairseq's filter; tests give a smaller vocabulary)."""
    raw_dir = Path(raw_dir)
    return prepare(
        train=raw_dir / "train", valid=raw_dir / "valid", test=raw_dir / "test", out=out,
        options=t.options if options is None else options,
    )  # fmt: skip


def prepare_wmt14(
    name: str, out: str | Path, raw_dir: str | Path | None = None,
    options: PrepareOptions | None = None,
) -> dict:  # fmt: skip
    """Download (unless `raw_dir` already holds the text) and prepare one WMT14 task."""
    t = task(name)
    raw_dir = Path(raw_dir) if raw_dir is not None else Path(f"{out}-raw")
    fetch(t, raw_dir)
    return prepare_from_raw(t, raw_dir, out, options)
