"""`prepare`: text files in, a training-ready directory out (corpus -> vocab -> shards).

The output directory holds everything training needs and nothing it must recompute:

    OUT/
      manifest.json                  counts, filters, vocabulary hashes, source checksums
      vocab.model, vocab.json        joint BPE (or vocab.<src>.* and vocab.<tgt>.* if separate)
      {train,valid,test}.{src,tgt}.bin / .idx    memory-mapped token shards (see binarize)

It is written to a temporary sibling directory and renamed into place only when complete,
so an error (a bad line in the last file, Ctrl-C) never leaves a partial OUT behind.
"""

from __future__ import annotations

import math
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tqdm import tqdm

from aiayn import __version__
from aiayn.data import binarize as bz
from aiayn.data.corpus import (
    FilterStats,
    LengthFilter,
    ParallelFiles,
    count_empty,
    drop_empty,
    file_sha256,
    read_pairs,
    resolve_split,
)
from aiayn.data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Vocab, cpu_threads
from aiayn.errors import ConfigError, DataError

ROUNDTRIP_CHECK_LINES = 2000


def prepare(
    *,
    train: str | Path | None = None,
    valid: str | Path,
    test: str | Path | None = None,
    src: str = "en",
    tgt: str = "de",
    vocab_size: int,
    out: str | Path,
    tsv: str | Path | None = None,
    joint_vocab: bool = True,
    max_tokens_per_side: int | None = 250,
    max_len_ratio: float | None = None,
    workers: int | None = None,
    vocab_sample_sentences: int = 2_000_000,
    seed: int = 1,
    overwrite: bool = False,
    quiet: bool = False,
) -> dict:
    """Read, check and filter the corpus, train the BPE vocabulary, binarize every split.

    `train`/`valid`/`test` are prefixes (PREFIX.src + PREFIX.tgt, plain or .gz) or .tsv
    files; `tsv` gives the training pairs as one TSV instead of `train`. The length filters
    (subword tokens per side; longer/shorter ratio) apply to training data only: valid and
    test keep every line, so outputs stay aligned with references. Returns the manifest.
    """
    out = Path(out)
    _check_options(vocab_size, vocab_sample_sentences, seed, max_tokens_per_side, max_len_ratio,
                   workers)  # fmt: skip
    splits = _resolve_splits(train, tsv, valid, test, src, tgt)
    length_filter = _length_filter(max_tokens_per_side, max_len_ratio)
    threads = cpu_threads(workers)
    _check_out(out, overwrite, splits)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; the published directory should not be
    plan = {
        "vocab_size": vocab_size,
        "joint": joint_vocab,
        "sample_sentences": vocab_sample_sentences,
        "seed": seed,
        "threads": threads,
    }
    try:
        manifest = _write_prepared(tmp, splits, src, tgt, plan, length_filter, quiet)
        _publish(tmp, out, overwrite)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if not quiet:
        print(format_report(manifest, out))
    return manifest


def _write_prepared(
    tmp: Path,
    splits: dict[str, ParallelFiles],
    src: str,
    tgt: str,
    plan: dict,
    length_filter: LengthFilter,
    quiet: bool,
) -> dict:
    """Vocabulary, shards and manifest, all written into `tmp`; returns the manifest."""
    vocab_info, src_vocab, tgt_vocab = _train_vocabs(splits, tmp, src, tgt, plan, quiet)
    manifest = {
        "format": bz.FORMAT,
        "version": bz.FORMAT_VERSION,
        "created_by": f"aiayn {__version__}",
        "src_lang": src,
        "tgt_lang": tgt,
        "dtype": bz.token_dtype(max(src_vocab.size, tgt_vocab.size)).name,
        "vocab": vocab_info,
        "filters": {"drop_empty": True, **length_filter.as_dict()},
        "splits": {},
    }
    for name, files in splits.items():
        lf = length_filter if name == "train" else LengthFilter()  # keep valid/test aligned
        manifest["splits"][name] = _binarize(
            name, files, tmp, (src_vocab, tgt_vocab), lf, plan["threads"], quiet
        )
    bz.write_manifest(tmp, manifest)
    return manifest


def _length_filter(max_tokens: int | None, max_ratio: float | None) -> LengthFilter:
    if max_tokens is not None and max_tokens < 1:
        raise DataError(f"max_tokens_per_side must be at least 1, got {max_tokens}")
    if max_ratio is not None and max_ratio < 1:
        raise DataError(f"max_len_ratio must be at least 1, got {max_ratio}")
    return LengthFilter(max_tokens=max_tokens, max_ratio=max_ratio)


def _resolve_splits(
    train: str | Path | None,
    tsv: str | Path | None,
    valid: str | Path,
    test: str | Path | None,
    src: str,
    tgt: str,
) -> dict[str, ParallelFiles]:
    """Find every split's files up front, so a missing one fails before any work is done."""
    if (train is None) == (tsv is None):
        raise DataError("give the training data as exactly one of a prefix (train) or a TSV file")
    if src == tgt:
        raise DataError(f"source and target languages are both {src!r}")
    train_spec = tsv if tsv is not None else train
    assert train_spec is not None
    splits = {"train": resolve_split(train_spec, src, tgt, tsv=tsv is not None)}
    splits["valid"] = resolve_split(valid, src, tgt)
    if test is not None:
        splits["test"] = resolve_split(test, src, tgt)
    return splits


def _check_options(
    vocab_size: int, sample: int, seed: int, max_tokens: int | None, max_ratio: float | None,
    workers: int | None,
) -> None:  # fmt: skip
    """Refuse impossible options before the corpus is read (sentencepiece would take some,
    like a negative seed, only after reading it all, and fail with its own message)."""
    # sentencepiece samples at least 101 sentences (or all, which 0 would mean to it)
    limits = [("vocab size", vocab_size, 5), ("vocabulary sample", sample, 101), ("seed", seed, 0),
              ("max tokens per side", max_tokens, 1), ("workers", workers, 1)]  # fmt: skip
    for what, value, low in limits:
        if value is not None and not value >= low:
            raise ConfigError(f"the {what} must be at least {low}, got {value}")
    if max_ratio is not None and not 1.0 <= max_ratio < math.inf:  # NaN fails too
        raise ConfigError(f"the max length ratio must be a number >= 1, got {max_ratio}")


def _check_out(out: Path, overwrite: bool, splits: dict[str, ParallelFiles]) -> None:
    """`out` may be replaced only with `overwrite`, only if `prepare` made it, and never while
    it holds an input: the old directory is deleted once the new one is in place, and the
    corpus with it."""
    if out.exists() and not out.is_dir():
        raise DataError(f"{out}: exists and is not a directory")
    if not out.is_dir() or not any(out.iterdir()):
        return
    if not overwrite:
        raise DataError(f"{out}: already exists and is not empty (use --force to replace it)")
    root = out.resolve()
    held = [p for f in splits.values() for p in f.paths if p.resolve().is_relative_to(root)]
    if held:
        raise DataError(
            f"{out}: holds the input {held[0]}, which replacing it would delete; "
            "write to another --out"
        )
    if not (out / bz.MANIFEST).is_file():  # a mistyped --out must not delete a user's files
        raise DataError(
            f"{out}: is not a directory made by `aiayn prepare` (no {bz.MANIFEST}); --force "
            "replaces only those: write to another --out"
        )


def _publish(tmp: Path, out: Path, overwrite: bool) -> None:
    """Move the finished directory into place; an old one is replaced only when complete."""
    if out.is_dir():
        old = out.with_name(f".{out.name}.old-{tmp.name.rsplit('-', 1)[-1]}")
        out.rename(old)
        tmp.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        tmp.rename(out)


def _side_sentences(files: ParallelFiles, sides: tuple[int, ...], bar: tqdm) -> Iterator[str]:
    """Training sentences for the vocabulary: the chosen sides of every non-empty pair."""
    for pair in drop_empty(read_pairs(files), FilterStats()):
        bar.update(1)
        for side in sides:
            yield pair[side]


def _train_vocabs(
    splits: dict[str, ParallelFiles], tmp: Path, src: str, tgt: str, options: dict, quiet: bool
) -> tuple[dict, Vocab, Vocab]:
    """Train the joint vocabulary (or one per language) on the training split and save it."""
    plan = {"joint": ((0, 1),)} if options["joint"] else {src: ((0,),), tgt: ((1,),)}
    trained: dict[str, Vocab] = {}
    for name, (sides,) in plan.items():
        with tqdm(desc=f"vocab {name}: read", unit=" pairs", file=sys.stderr, disable=quiet) as bar:
            trained[name] = Vocab.train(
                _side_sentences(splits["train"], sides, bar),
                options["vocab_size"],
                sample_sentences=options["sample_sentences"],
                seed=options["seed"],
                threads=options["threads"],
            )
    src_vocab = trained["joint"] if options["joint"] else trained[src]
    tgt_vocab = trained["joint"] if options["joint"] else trained[tgt]
    files = {"src": "vocab.model", "tgt": "vocab.model"}
    if not options["joint"]:
        files = {"src": f"vocab.{src}.model", "tgt": f"vocab.{tgt}.model"}
    info: dict = {"joint": options["joint"]}
    for side, vocab, lang in (("src", src_vocab, src), ("tgt", tgt_vocab, tgt)):
        langs = [src, tgt] if options["joint"] else [lang]
        vocab.save(
            tmp / files[side],
            languages=langs,
            sample_sentences=options["sample_sentences"],
            seed=options["seed"],
        )
        info[side] = {"file": files[side], "sha256": vocab.sha256, "size": vocab.size}
    info.update(pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID)
    info.update(sample_sentences=options["sample_sentences"], seed=options["seed"])
    info["roundtrip_failures"] = _roundtrip_failures(splits["valid"], src_vocab, tgt_vocab)
    return info, src_vocab, tgt_vocab


def _roundtrip_failures(files: ParallelFiles, src_vocab: Vocab, tgt_vocab: Vocab) -> int:
    """Lines of the first validation pairs that do not survive encode -> decode (expect 0)."""
    failures = 0
    for i, (src_line, tgt_line) in enumerate(read_pairs(files)):
        if i >= ROUNDTRIP_CHECK_LINES:
            break
        failures += len(src_vocab.roundtrip_failures([src_line]))
        failures += len(tgt_vocab.roundtrip_failures([tgt_line]))
    if failures:
        print(
            f"aiayn prepare: warning: {failures} validation lines do not round-trip",
            file=sys.stderr,
        )
    return failures


def _binarize(
    name: str,
    files: ParallelFiles,
    tmp: Path,
    vocabs: tuple[Vocab, Vocab],
    length_filter: LengthFilter,
    workers: int,
    quiet: bool,
) -> dict:
    """Encode one split into shards; return its counts, reasons for drops and file checksums."""
    stats = FilterStats()
    keep = drop_empty if name == "train" else count_empty
    with tqdm(desc=f"binarize {name}", unit=" pairs", file=sys.stderr, disable=quiet) as bar:
        counts = bz.binarize_split(
            keep(read_pairs(files), stats),
            tmp,
            name,
            *vocabs,
            length_filter=length_filter,
            workers=workers,
            progress=bar.update,
        )
    if name == "train" and counts["pairs"] == 0:
        raise DataError(f"{files.paths[0]}: no training pairs left after filtering")
    dropped = {"empty": stats.dropped.get("empty", 0), "too_long": 0, "ratio": 0}
    dropped.update(counts.pop("dropped"))
    return {
        "read": stats.read,
        **counts,
        "dropped": dropped if name == "train" else {},
        "empty_kept": stats.empty_kept,
        "sources": [{"path": str(p.resolve()), "sha256": file_sha256(p)} for p in files.paths],
    }


def format_report(manifest: dict, out: Path | str) -> str:
    """The short summary `aiayn prepare` prints: pairs read, dropped by reason, vocab, tokens."""
    vocab = manifest["vocab"]
    kind = "joint" if vocab["joint"] else "separate"
    sizes = str(vocab["src"]["size"])
    if not vocab["joint"]:
        sizes += f" + {vocab['tgt']['size']}"
    lines = [
        f"prepared {out} ({manifest['src_lang']}->{manifest['tgt_lang']})",
        f"  vocabulary: {kind} BPE, {sizes} pieces, sha256 {vocab['src']['sha256'][:12]}",
    ]
    for name, split in manifest["splits"].items():
        dropped = ", ".join(f"{k} {v:,}" for k, v in split["dropped"].items())
        dropped = dropped or "none (kept aligned)"
        lines.append(
            f"  {name}: {split['read']:,} pairs read, {split['pairs']:,} kept; dropped: {dropped}; "
            f"tokens {split['src_tokens']:,} src / {split['tgt_tokens']:,} tgt"
        )
        if split["empty_kept"]:
            lines.append(f"    ({split['empty_kept']:,} pairs with an empty side kept, aligned)")
    return "\n".join(lines)
