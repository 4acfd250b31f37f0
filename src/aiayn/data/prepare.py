"""`prepare`: text files in, a training-ready directory out (corpus -> vocab -> shards).

The output directory holds everything training needs and nothing it must recompute:

    OUT/
      manifest.json                  counts, filters, vocabulary hashes, source checksums,
                                     what cleaning removed from the training pairs
      vocab.model, vocab.json        joint BPE (or vocab.<src>.* and vocab.<tgt>.* if separate),
                                     or with --vocab-from a checkpoint's (vocab.<lang>.marian:
                                     a MarianMT vocabulary's two sides)
      {train,valid,test}.{src,tgt}.bin / .idx    memory-mapped token shards (see binarize)

It is written to a temporary sibling directory and renamed into place only when complete,
so an error (a bad line in the last file, Ctrl-C) never leaves a partial OUT behind.

The training pairs are cleaned (data/clean.py: duplicates, copies, wrong language, ...) in
the same streaming, multi-process pass that encodes them; valid and test are never filtered.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tqdm import tqdm

from aiayn import __version__
from aiayn.data import binarize as bz
from aiayn.data.clean import PairFilter
from aiayn.data.clean_report import RUN_ALWAYS, Cleaning, format_cleaning
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
from aiayn.data.prepare_options import PrepareOptions
from aiayn.data.checkpoint_vocabs import checkpoint_vocabs
from aiayn.data.marian_vocab import SUFFIX, AnyVocab, MarianVocab
from aiayn.data.vocab import Vocab, cpu_threads
from aiayn.errors import DataError

ROUNDTRIP_CHECK_LINES = 2000


def prepare(
    *,
    train: str | Path | None = None,
    valid: str | Path,
    test: str | Path | None = None,
    tsv: str | Path | None = None,
    tmx: str | Path | None = None,
    out: str | Path,
    options: PrepareOptions,
) -> dict:
    """Read, check and clean the corpus, train the BPE vocabulary, binarize every split.

    `train`/`valid`/`test` are prefixes (PREFIX.src + PREFIX.tgt, plain or .gz), .tsv or
    .tmx files; `tsv` or `tmx` gives the training pairs as one TSV or TMX file instead of
    `train`. The cleaning and length filters (subword tokens per side; longer/shorter
    ratio) apply to training data only: valid and test keep every line, so outputs stay
    aligned with references. Returns the manifest (with `options.dry_run`, only what
    cleaning would remove, and nothing is written but the `options.removed` file).
    """
    out, o = Path(out), options
    splits = _resolve_splits(train, tsv, tmx, valid, test, o.src, o.tgt)
    if o.removed is not None and not Path(o.removed).resolve().parent.is_dir():
        raise DataError(f"{o.removed}: no such directory for the removed pairs")  # fail early
    if o.dry_run:
        return dry_run(splits["train"], o)
    length_filter = LengthFilter(max_tokens=o.max_tokens_per_side, max_ratio=o.max_len_ratio)
    threads = cpu_threads(o.workers)
    _check_out(out, o.overwrite, splits)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; the published directory should not be
    try:
        manifest = _write_prepared(tmp, splits, o, threads, length_filter)
        _publish(tmp, out, o.overwrite)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if not o.quiet:
        print(format_report(manifest, out))
    return manifest


def _write_prepared(
    tmp: Path,
    splits: dict[str, ParallelFiles],
    options: PrepareOptions,
    threads: int,
    length_filter: LengthFilter,
) -> dict:
    """Vocabulary, shards and manifest, all written into `tmp`; returns the manifest."""
    vocab_info, src_vocab, tgt_vocab = _train_vocabs(splits, tmp, options, threads)
    manifest = {
        "format": bz.FORMAT,
        "version": bz.FORMAT_VERSION,
        "created_by": f"aiayn {__version__}",
        "src_lang": options.src,
        "tgt_lang": options.tgt,
        "dtype": bz.token_dtype(max(src_vocab.size, tgt_vocab.size)).name,
        "vocab": vocab_info,
        "filters": {"drop_empty": True, **length_filter.as_dict()},
        "splits": {},
    }
    for name, files in splits.items():
        if name != "train":  # valid and test keep every line, aligned with references
            manifest["splits"][name] = _binarize(name, files, tmp, (src_vocab, tgt_vocab),
                                                 LengthFilter(), threads, options.quiet)
            continue  # fmt: skip
        with Cleaning(_pair_filter(files, options), options.removed) as cleaning:
            manifest["splits"][name] = _binarize(name, files, tmp, (src_vocab, tgt_vocab),
                                                 length_filter, threads, options.quiet, cleaning)
        manifest["cleaning"] = cleaning.as_dict()
    bz.write_manifest(tmp, manifest)
    return manifest


def _resolve_splits(
    train: str | Path | None,
    tsv: str | Path | None,
    tmx: str | Path | None,
    valid: str | Path,
    test: str | Path | None,
    src: str,
    tgt: str,
) -> dict[str, ParallelFiles]:
    """Find every split's files up front, so a missing one fails before any work is done."""
    given = [spec for spec in (train, tsv, tmx) if spec is not None]
    if len(given) != 1:
        raise DataError("give the training data as exactly one of a prefix (train), a TSV "
                        "file or a TMX file")  # fmt: skip
    splits = {"train": resolve_split(given[0], src, tgt, tsv=tsv is not None, tmx=tmx is not None)}
    splits["valid"] = resolve_split(valid, src, tgt)
    if test is not None:
        splits["test"] = resolve_split(test, src, tgt)
    return splits


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


def _pair_filter(files: ParallelFiles, o: PrepareOptions) -> PairFilter:
    """The training pairs' per-pair filters (`o.clean`), with the misaligned filter's judge
    learned from a sample of them: one more read of the training split, the sample held."""
    pair_filter = PairFilter(o.clean, o.src, o.tgt)
    with tqdm(desc="misaligned: sample", unit=" pairs", file=sys.stderr,
              disable=o.quiet or not o.clean.runs("misaligned")) as bar:  # fmt: skip
        pair_filter.learn_alignment(_counted(read_pairs(files), bar), o.seed)
    return pair_filter


def _counted(items: Iterator, bar: tqdm) -> Iterator:
    for item in items:
        bar.update(1)
        yield item


def _side_sentences(files: ParallelFiles, sides: tuple[int, ...], bar: tqdm) -> Iterator[str]:
    """Training sentences for the vocabulary: the chosen sides of every non-empty pair."""
    for pair in drop_empty(read_pairs(files), FilterStats()):
        bar.update(1)
        for side in sides:
            yield pair[side]


def _train_vocabs(
    splits: dict[str, ParallelFiles], tmp: Path, options: PrepareOptions, threads: int
) -> tuple[dict, AnyVocab, AnyVocab]:
    """Train the joint vocabulary (or one per language) on the training split, or take a
    checkpoint's (`vocab_from`), and save it."""
    o, src, tgt = options, options.src, options.tgt
    if o.vocab_from is not None:
        src_vocab, tgt_vocab = checkpoint_vocabs(o.vocab_from)
        meta: dict = {"from_checkpoint": str(Path(o.vocab_from).resolve())}
    else:
        src_vocab, tgt_vocab = _trained_vocabs(splits, o, threads)
        meta = {"sample_sentences": o.vocab_sample_sentences, "seed": o.seed}
    joint = src_vocab.id_space == tgt_vocab.id_space  # one id space: tied embeddings
    one_file = src_vocab.sha256 == tgt_vocab.sha256
    suffix = SUFFIX if isinstance(tgt_vocab, MarianVocab) else ".model"
    files = {"src": f"vocab{suffix}", "tgt": f"vocab{suffix}"}
    if not one_file:
        files = {"src": f"vocab.{src}{suffix}", "tgt": f"vocab.{tgt}{suffix}"}
    info: dict = {"joint": joint}
    for side, vocab, lang in (("src", src_vocab, src), ("tgt", tgt_vocab, tgt)):
        vocab.save(tmp / files[side], languages=[src, tgt] if one_file else [lang], **meta)
        info[side] = {"file": files[side], "sha256": vocab.sha256, "size": vocab.size}
    info.update(pad_id=tgt_vocab.pad_id, unk_id=tgt_vocab.unk_id, bos_id=tgt_vocab.bos_id,
                eos_id=tgt_vocab.eos_id, **meta)  # fmt: skip
    info["roundtrip_failures"] = _roundtrip_failures(splits["valid"], src_vocab, tgt_vocab)
    return info, src_vocab, tgt_vocab


def _trained_vocabs(
    splits: dict[str, ParallelFiles], options: PrepareOptions, threads: int
) -> tuple[Vocab, Vocab]:
    """BPE trained on the training split: one joint vocabulary (sec. 5.1) or one per side."""
    o, src, tgt = options, options.src, options.tgt
    plan = {"joint": ((0, 1),)} if o.joint_vocab else {src: ((0,),), tgt: ((1,),)}
    trained: dict[str, Vocab] = {}
    for name, (sides,) in plan.items():
        with tqdm(desc=f"vocab {name}: read", unit=" pairs", file=sys.stderr,
                  disable=o.quiet) as bar:  # fmt: skip
            trained[name] = Vocab.train(
                _side_sentences(splits["train"], sides, bar),
                o.vocab_size,
                sample_sentences=o.vocab_sample_sentences,
                seed=o.seed,
                threads=threads,
                split_by_script=o.split_by_script,
            )
    if o.joint_vocab:
        return trained["joint"], trained["joint"]
    return trained[src], trained[tgt]


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
    cleaning: Cleaning | None = None,
) -> dict:
    """Encode one split into shards (cleaned by `cleaning`, the training split); return its
    counts, reasons for drops and file checksums."""
    stats = FilterStats()
    pairs = read_pairs(files) if cleaning is not None else count_empty(read_pairs(files), stats)
    with tqdm(desc=f"binarize {name}", unit=" pairs", file=sys.stderr, disable=quiet) as bar:
        counts = bz.binarize_split(
            pairs,
            tmp,
            name,
            *vocabs,
            length_filter=length_filter,
            cleaning=cleaning,
            workers=workers,
            progress=bar.update,
        )
    if cleaning is not None:
        cleaning.check_heavy()  # names the filter, which "nothing left" would not
        if counts["pairs"] == 0:
            raise DataError(f"{files.paths[0]}: no training pairs left after filtering")
    # the filters that always run, then those of the cleaning that removed any pair
    dropped = {k: v for k, v in counts.pop("dropped").items() if v or k in RUN_ALWAYS}
    return {
        "read": cleaning.read if cleaning is not None else stats.read,
        **counts,
        "dropped": dropped if cleaning is not None else {},
        "empty_kept": stats.empty_kept,
        "sources": [{"path": str(p.resolve()), "sha256": file_sha256(p)} for p in files.paths],
    }


def dry_run(files: ParallelFiles, options: PrepareOptions) -> dict:
    """Clean the training pairs as `prepare` would and report what goes (`--dry-run`):
    nothing is encoded or written but the `options.removed` file. The token-length filters
    need the vocabulary and do not run. Returns {"src_lang", "tgt_lang", "cleaning"}."""
    o = options
    with Cleaning(_pair_filter(files, o), o.removed, dry_run=True) as cleaning:
        with tqdm(desc="clean train", unit=" pairs", file=sys.stderr, disable=o.quiet) as bar:
            bz.clean_split(read_pairs(files), cleaning, workers=cpu_threads(o.workers),
                           progress=bar.update)  # fmt: skip
        cleaning.check_heavy()
    result = {"src_lang": o.src, "tgt_lang": o.tgt, "cleaning": cleaning.as_dict()}
    if not o.quiet:
        print(f"dry run of {files.paths[0]} ({o.src}->{o.tgt}): nothing written; the token-"
              "length filters need the vocabulary and did not run")  # fmt: skip
        print("\n".join(format_cleaning(result["cleaning"])))
    return result


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
    if "cleaning" in manifest:
        lines += format_cleaning(manifest["cleaning"])
    return "\n".join(lines)
