"""Binarized shards: text encoded once into flat, memory-mapped token arrays.

Training reads token ids millions of times; encoding text each epoch would waste the CPU
the GPU is waiting on. So `binarize_split` encodes each split once and writes, per side:

    {split}.{side}.bin   every example's token ids, concatenated (no bos/eos; batching adds them)
    {split}.{side}.idx   int64 offsets, n + 1 of them: example i is bin[idx[i]:idx[i + 1]]

Tokens are uint16 when every id fits (vocabulary <= 65536), else int32: half the disk and
page cache for the paper's 37k vocabulary. `manifest.json` beside them records the dtype,
counts and the vocabulary's sha256; `BinarizedDataset` maps the files and `check_vocab`
refuses shards built with another vocabulary.

Memory stays flat as the corpus grows: text is read as a stream, cut into chunks, encoded
by a pool of worker processes with at most a few chunks in flight (a plain `Pool.imap`
would read its whole input ahead into the task queue), and each encoded chunk is appended
to the files at once.
"""

from __future__ import annotations

import json
import multiprocessing as mp
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import chain, islice
from pathlib import Path
from typing import BinaryIO

import numpy as np

from aiayn.data.clean import PairFilter, Verdicts
from aiayn.data.clean_report import Cleaning
from aiayn.data.corpus import FilterStats, LengthFilter
from aiayn.data.marian_vocab import load_vocab, vocab_from_bytes
from aiayn.data.vocab import Vocab
from aiayn.errors import DataError
from aiayn.jsonfile import read_object

MANIFEST = "manifest.json"
FORMAT = "aiayn-binarized"
FORMAT_VERSION = 1
SIDES = ("src", "tgt")

Pair = tuple[str, str]


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 when every id fits in it, else int32."""
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.int32)


def side_paths(data_dir: str | Path, split: str, side: str) -> tuple[Path, Path]:
    """(`{split}.{side}.bin`, `{split}.{side}.idx`) inside `data_dir`."""
    data_dir = Path(data_dir)
    return data_dir / f"{split}.{side}.bin", data_dir / f"{split}.{side}.idx"


# --- encoding, in worker processes ------------------------------------------------------
@dataclass
class _Encoded:
    """One chunk's output: concatenated tokens and lengths per side, and what was filtered
    (with cleaning, each pair's verdict instead: see `clean.Verdicts`)."""

    tokens: dict[str, np.ndarray]
    lengths: dict[str, np.ndarray]
    dropped: dict[str, int] = field(default_factory=dict)
    verdicts: Verdicts | None = None


class _ChunkEncoder:
    """Cleans a chunk of pairs (`pair_filter`, training data), encodes the rest and applies
    the length filter; picklable via its model bytes. Without vocabularies (a dry run of
    the cleaning) it only judges."""

    def __init__(
        self, src_vocab: Vocab | None, tgt_vocab: Vocab | None, length_filter: LengthFilter,
        dtype: np.dtype, pair_filter: PairFilter | None = None,
    ) -> None:  # fmt: skip
        self.vocabs = {"src": src_vocab, "tgt": tgt_vocab}
        self.length_filter = length_filter
        self.dtype = dtype
        self.pair_filter = pair_filter

    def __call__(self, chunk: list[Pair]) -> _Encoded:
        reasons: list[str | None] = [None] * len(chunk)
        if self.pair_filter is not None:  # training: empty pairs are neither encoded nor kept
            reasons = ["empty" if not (s.strip() and t.strip()) else None for s, t in chunk]
        ids = self._encode(chunk, reasons) if self.vocabs["src"] is not None else None
        dropped: dict[str, int] = {}
        for reason in filter(None, reasons):
            dropped[reason] = dropped.get(reason, 0) + 1
        verdicts = None
        if self.pair_filter is not None:  # the cleaning, on the pairs still kept
            verdicts = self.pair_filter.judge(chunk, reasons)
            reasons = verdicts.reasons
        kept = {side: [ids[side][i] for i, r in enumerate(reasons) if r is None] if ids else []
                for side in SIDES}  # fmt: skip
        return _Encoded(
            tokens={side: _flatten(kept[side], self.dtype) for side in SIDES},
            lengths={side: np.fromiter(map(len, kept[side]), np.int64) for side in SIDES},
            dropped=dropped,
            verdicts=verdicts,
        )

    def _encode(self, chunk: list[Pair], reasons: list[str | None]) -> dict[str, list]:
        """Each side's token ids of the pairs whose reason is None (else None), setting the
        reason of those the length filter drops ("too_long", "ratio"). A runaway line is
        dropped here, before the cleaning filters spend time on it."""
        rows = [i for i, r in enumerate(reasons) if r is None]
        ids: dict[str, list] = {side: [None] * len(chunk) for side in SIDES}
        for side, vocab, k in (("src", self.vocabs["src"], 0), ("tgt", self.vocabs["tgt"], 1)):
            encoded = vocab.encode_batch([chunk[i][k] for i in rows])  # type: ignore[union-attr]
            for i, seq in zip(rows, encoded):
                ids[side][i] = seq
        for i in rows:
            reasons[i] = self.length_filter.reason(len(ids["src"][i]), len(ids["tgt"][i]))
        return ids


def _flatten(seqs: list[list[int]], dtype: np.dtype) -> np.ndarray:
    if not seqs:
        return np.zeros(0, dtype)
    return np.fromiter(chain.from_iterable(seqs), dtype=dtype, count=sum(map(len, seqs)))


# A pool worker's encoder, built once per process by `_init_worker`: sending the vocabulary
# with every chunk would cost a model load per chunk. Only worker processes set it.
_WORKER: dict[str, _ChunkEncoder] = {}


def _init_worker(src_bytes: bytes | None, tgt_bytes: bytes | None, lf: LengthFilter,
                 dtype: str, pair_filter: PairFilter | None) -> None:  # fmt: skip
    src = vocab_from_bytes(src_bytes) if src_bytes is not None else None
    tgt = src if tgt_bytes == src_bytes else vocab_from_bytes(tgt_bytes)  # type: ignore[arg-type]
    _WORKER["encoder"] = _ChunkEncoder(src, tgt, lf, np.dtype(dtype), pair_filter)


def _encode_in_worker(chunk: list[Pair]) -> _Encoded:
    return _WORKER["encoder"](chunk)


def _chunks(pairs: Iterable[Pair], size: int) -> Iterator[list[Pair]]:
    iterator = iter(pairs)
    while chunk := list(islice(iterator, size)):
        yield chunk


def _encode_stream(
    chunks: Iterator[list[Pair]], encoder: _ChunkEncoder, workers: int
) -> Iterator[tuple[list[Pair], _Encoded]]:
    """(chunk, encoded chunk) in input order, with at most `4 * workers` chunks in flight.

    A split of one chunk is encoded in this process: starting workers would cost more.
    """
    first = list(islice(chunks, 2))
    chunks = chain(first, chunks)
    if workers <= 1 or len(first) < 2:
        for chunk in chunks:
            yield chunk, encoder(chunk)
        return
    vocabs = encoder.vocabs
    initargs = (
        vocabs["src"].model_bytes if vocabs["src"] is not None else None,
        vocabs["tgt"].model_bytes if vocabs["tgt"] is not None else None,
        encoder.length_filter,
        encoder.dtype.str,
        encoder.pair_filter,
    )
    # spawn, not fork: the parent may hold threads (tqdm, torch) that fork would copy mid-lock.
    with mp.get_context("spawn").Pool(workers, _init_worker, initargs) as pool:
        pending: deque = deque()
        for chunk in chunks:
            pending.append((chunk, pool.apply_async(_encode_in_worker, (chunk,))))
            if len(pending) >= 4 * workers:
                chunk, result = pending.popleft()
                yield chunk, result.get()
        while pending:
            chunk, result = pending.popleft()
            yield chunk, result.get()


# --- writing ----------------------------------------------------------------------------
class _SideWriter:
    """Appends one side's tokens to `.bin` and running offsets to `.idx`."""

    def __init__(self, data_dir: Path, split: str, side: str) -> None:
        bin_path, idx_path = side_paths(data_dir, split, side)
        self.bin: BinaryIO = open(bin_path, "wb")
        self.idx: BinaryIO = open(idx_path, "wb")
        self.total = 0
        self.max_len = 0
        np.zeros(1, np.int64).tofile(self.idx)

    def append(self, tokens: np.ndarray, lengths: np.ndarray) -> None:
        tokens.tofile(self.bin)
        (np.cumsum(lengths) + self.total).astype(np.int64).tofile(self.idx)
        self.total += int(lengths.sum())
        if len(lengths):
            self.max_len = max(self.max_len, int(lengths.max()))

    def close(self) -> None:
        self.bin.close()
        self.idx.close()


def binarize_split(
    pairs: Iterable[Pair],
    data_dir: str | Path,
    split: str,
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    *,
    length_filter: LengthFilter = LengthFilter(),
    cleaning: Cleaning | None = None,
    workers: int = 1,
    chunk_size: int = 2000,
    progress: Callable[[int], None] | None = None,
) -> dict:
    """Encode `pairs` into `data_dir/{split}.{src,tgt}.{bin,idx}`; return the split's counts.

    Pairs the `length_filter` rejects are counted by reason under "dropped"; with `cleaning`
    (training data) its filters run first, in the same workers, and "dropped" holds every
    filter's count. `progress` is called with the number of pairs in each chunk done
    (e.g. a tqdm's `update`).
    """
    dtype = token_dtype(max(src_vocab.size, tgt_vocab.size))
    pair_filter = cleaning.pair_filter if cleaning is not None else None
    encoder = _ChunkEncoder(src_vocab, tgt_vocab, length_filter, dtype, pair_filter)
    writers = {side: _SideWriter(Path(data_dir), split, side) for side in SIDES}
    stats = FilterStats()
    try:
        for chunk, encoded in _encode_stream(_chunks(pairs, chunk_size), encoder, workers):
            if cleaning is not None:
                assert encoded.verdicts is not None
                _select(encoded, cleaning.settle(chunk, encoded.verdicts))
            for side in SIDES:
                writers[side].append(encoded.tokens[side], encoded.lengths[side])
            stats.kept += len(encoded.lengths["src"])
            for reason, count in encoded.dropped.items():
                stats.drop(reason, count)
            if progress is not None:
                progress(len(chunk))
    finally:
        for writer in writers.values():
            writer.close()
    dropped = dict(cleaning.counts) if cleaning is not None else stats.dropped
    result = {"pairs": stats.kept, "dropped": dropped}
    for side in SIDES:
        result[f"{side}_tokens"] = writers[side].total
        result[f"{side}_max_len"] = writers[side].max_len
    return result


def _select(encoded: _Encoded, keep: np.ndarray) -> None:
    """Keep only the encoded pairs where `keep` (one bool per encoded pair) is True."""
    for side in SIDES:
        lengths = encoded.lengths[side]
        encoded.tokens[side] = encoded.tokens[side][np.repeat(keep, lengths)]
        encoded.lengths[side] = lengths[keep]


def clean_split(
    pairs: Iterable[Pair],
    cleaning: Cleaning,
    *,
    workers: int = 1,
    chunk_size: int = 2000,
    progress: Callable[[int], None] | None = None,
) -> None:
    """Judge every pair as `binarize_split` would with `cleaning`, encoding and writing
    nothing (`prepare --dry-run`): the token-length filters, which need the vocabulary,
    do not run."""
    encoder = _ChunkEncoder(None, None, LengthFilter(), np.dtype(np.uint16), cleaning.pair_filter)
    for chunk, encoded in _encode_stream(_chunks(pairs, chunk_size), encoder, workers):
        assert encoded.verdicts is not None
        cleaning.settle(chunk, encoded.verdicts)
        if progress is not None:
            progress(len(chunk))


# --- reading ----------------------------------------------------------------------------
def load_manifest(data_dir: str | Path) -> dict:
    """The manifest of a prepared directory; DataError if it is missing or not ours."""
    path = Path(data_dir) / MANIFEST
    if not path.is_file():
        raise DataError(f"{path}: no such file; is {data_dir} a directory from `aiayn prepare`?")
    manifest = read_object(path, DataError)
    if manifest.get("format") != FORMAT or manifest.get("version") != FORMAT_VERSION:
        raise DataError(
            f"{path}: format {manifest.get('format')!r} version {manifest.get('version')!r}, "
            f"expected {FORMAT!r} version {FORMAT_VERSION}; re-run `aiayn prepare`"
        )
    return manifest


def write_manifest(data_dir: str | Path, manifest: dict) -> Path:
    """Write `manifest.json` (the last file `prepare` writes: its presence means complete)."""
    path = Path(data_dir) / MANIFEST
    path.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return path


def load_vocabs(data_dir: str | Path) -> tuple[Vocab, Vocab]:
    """The (source, target) vocabularies a prepared directory was built with (one if joint),
    checked against the manifest: files copied in from another `prepare` are refused."""
    manifest = load_manifest(data_dir)
    src = load_vocab(Path(data_dir) / manifest["vocab"]["src"]["file"])
    tgt = src
    if manifest["vocab"]["tgt"]["file"] != manifest["vocab"]["src"]["file"]:
        tgt = load_vocab(Path(data_dir) / manifest["vocab"]["tgt"]["file"])
    _check_vocab(manifest, data_dir, src, tgt)
    return src, tgt


def check_vocab(data_dir: str | Path, src_vocab: Vocab, tgt_vocab: Vocab | None = None) -> None:
    """Refuse shards encoded with another vocabulary: their ids would mean other subwords."""
    _check_vocab(load_manifest(data_dir), data_dir, src_vocab, tgt_vocab)


def _check_vocab(
    manifest: dict, data_dir: str | Path, src_vocab: Vocab, tgt_vocab: Vocab | None
) -> None:
    given = {"src": src_vocab, "tgt": tgt_vocab or src_vocab}
    for side in SIDES:
        built_with = manifest["vocab"][side]["sha256"]
        if given[side].sha256 != built_with:
            raise DataError(
                f"{data_dir}: the {side} shards were built with a different vocabulary "
                f"(sha256 {built_with[:12]}..., yours {given[side].sha256[:12]}...); use the "
                f"vocabulary in {data_dir} or re-run `aiayn prepare` with yours"
            )


def _map_side(data_dir: Path, split: str, side: str, dtype: np.dtype) -> tuple[np.ndarray, ...]:
    bin_path, idx_path = side_paths(data_dir, split, side)
    for path in (bin_path, idx_path):
        if not path.is_file():
            raise DataError(f"{path}: no such file; the prepared directory is incomplete")
    size = idx_path.stat().st_size
    if size == 0 or size % np.dtype(np.int64).itemsize:
        raise DataError(f"{idx_path}: {size} bytes, not an index of 8-byte offsets; re-run "
                        "`aiayn prepare`")  # fmt: skip
    offsets = np.memmap(idx_path, dtype=np.int64, mode="r")
    expected = int(offsets[-1]) * dtype.itemsize
    if bin_path.stat().st_size != expected:
        raise DataError(f"{bin_path}: {bin_path.stat().st_size} bytes, expected {expected}")
    tokens = np.memmap(bin_path, dtype=dtype, mode="r") if expected else np.zeros(0, dtype)
    return tokens, offsets


class BinarizedDataset:
    """One split of a prepared directory, memory-mapped: example i is (src_ids, tgt_ids).

    `src_lengths` / `tgt_lengths` (without specials) let the batch sampler plan batches
    without reading a single token.
    """

    def __init__(self, data_dir: str | Path, split: str) -> None:
        self.data_dir = Path(data_dir)
        self.split = split
        self.manifest = load_manifest(self.data_dir)
        if split not in self.manifest["splits"]:
            known = ", ".join(self.manifest["splits"])
            raise DataError(f"{self.data_dir}: no split {split!r} (has: {known})")
        dtype = np.dtype(self.manifest["dtype"])
        self._src, self._src_offsets = _map_side(self.data_dir, split, "src", dtype)
        self._tgt, self._tgt_offsets = _map_side(self.data_dir, split, "tgt", dtype)
        if len(self._src_offsets) != len(self._tgt_offsets):
            raise DataError(f"{self.data_dir}: {split} source and target counts differ")
        self.src_lengths = np.diff(self._src_offsets).astype(np.int32)
        self.tgt_lengths = np.diff(self._tgt_offsets).astype(np.int32)

    def check_ids(self, src_vocab_size: int, tgt_vocab_size: int) -> None:
        """Refuse ids the vocabularies do not have (a corrupt shard): the embedding would
        fail on them at the first batch that holds one. One pass over the shards."""
        for side, tokens, size in (("src", self._src, src_vocab_size),
                                   ("tgt", self._tgt, tgt_vocab_size)):  # fmt: skip
            top = int(tokens.max()) if len(tokens) else -1
            if top >= size:
                path = side_paths(self.data_dir, self.split, side)[0]
                raise DataError(f"{path}: token id {top} in a {size}-token vocabulary; the shard "
                                "is corrupt, re-run `aiayn prepare`")  # fmt: skip

    def __len__(self) -> int:
        return len(self._src_offsets) - 1

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        if not -len(self) <= i < len(self):
            raise IndexError(f"example {i} out of range for {len(self)} examples")
        i = int(i) % len(self)
        src = self._src[self._src_offsets[i] : self._src_offsets[i + 1]]
        tgt = self._tgt[self._tgt_offsets[i] : self._tgt_offsets[i + 1]]
        return src.astype(np.int64), tgt.astype(np.int64)
