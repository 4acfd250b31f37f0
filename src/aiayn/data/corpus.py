"""Reading parallel text: the first stage of the data flow (corpus -> vocab -> shards -> batches).

A corpus is either two aligned files, `PREFIX.<src>` and `PREFIX.<tgt>` (each optionally
gzip-compressed as `PREFIX.<lang>.gz`), one sentence a line, one TSV file whose two
columns are the source and the target, or one TMX file (`data/tmx.py`). Everything here
*streams*: a 36M-pair WMT corpus never sits in memory, so every check happens line by line as the pairs go past.

Why the checks are strict: a misaligned or mis-encoded corpus trains a model that is
silently bad. So each problem raises `DataError` naming the file (and the line) at fault:
a missing, empty or unreadable file, sides of different lengths, invalid UTF-8, NUL bytes,
a TSV line without exactly two columns. What is *tolerated*: Windows line endings (a
trailing CR is removed) and a UTF-8 byte-order mark on the first line (removed).

Lines are split on LF only (never on U+2028 or a lone CR, as `str.splitlines` would), so
line N here is line N for `sed -n Np` and `wc -l`.
"""

from __future__ import annotations

import gzip
import hashlib
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from aiayn.data.tmx import read_tmx
from aiayn.errors import DataError

_BOM = b"\xef\xbb\xbf"
_GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True)
class ParallelFiles:
    """Where one split's pairs live: two aligned files, one two-column TSV (`tsv`), or one
    TMX file (`tmx`) whose segments in languages `langs` (source, target) are read."""

    src: Path | None = None
    tgt: Path | None = None
    tsv: Path | None = None
    tmx: Path | None = None
    langs: tuple[str, str] | None = None

    @property
    def paths(self) -> list[Path]:
        """The files read, in order (for checksums and messages)."""
        one = self.tsv or self.tmx
        return [one] if one is not None else [p for p in (self.src, self.tgt) if p]


@dataclass
class FilterStats:
    """How many pairs each stage read, dropped (by reason) and kept; the report's numbers."""

    read: int = 0
    kept: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    empty_kept: int = 0  # valid/test pairs with an empty side, kept for alignment

    def drop(self, reason: str, count: int = 1) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + count

    def as_dict(self) -> dict:
        return {
            "read": self.read,
            "kept": self.kept,
            "dropped": dict(self.dropped),
            "empty_kept": self.empty_kept,
        }


@dataclass(frozen=True)
class LengthFilter:
    """Training-data length filters on subword tokens (specials not counted).

    `max_tokens`: drop a pair whose source or target is longer. `max_ratio`: drop a pair
    whose longer side exceeds `max_ratio` times the shorter (as Moses' clean-corpus-n,
    which fairseq's WMT14 script applies to BPE tokens with ratio 1.5 and maximum 250).
    `None` disables a filter.
    """

    max_tokens: int | None = None
    max_ratio: float | None = None

    def reason(self, n_src: int, n_tgt: int) -> str | None:
        """Why a pair of these lengths is dropped ("too_long", "ratio"), or None to keep it."""
        if self.max_tokens is not None and max(n_src, n_tgt) > self.max_tokens:
            return "too_long"
        if self.max_ratio is not None:
            short, long = sorted((max(n_src, 1), max(n_tgt, 1)))
            if long > self.max_ratio * short:
                return "ratio"
        return None

    def as_dict(self) -> dict:
        return {"max_tokens_per_side": self.max_tokens, "max_len_ratio": self.max_ratio}


def find_side(prefix: str | Path, lang: str) -> Path:
    """`PREFIX.lang` if it exists, else `PREFIX.lang.gz`; DataError naming both if neither."""
    plain = Path(f"{prefix}.{lang}")
    gz = Path(f"{prefix}.{lang}.gz")
    for path in (plain, gz):
        if path.is_file():
            return path
    raise DataError(f"{plain}: no such file (nor {gz.name})")


def resolve_split(
    spec: str | Path, src: str, tgt: str, tsv: bool = False, tmx: bool = False
) -> ParallelFiles:
    """A split given as a prefix (`data/train` -> train.en + train.de), a TSV file (one
    named `.tsv[.gz]`, or any with `tsv`: `prepare --tsv`, whatever the file is called) or a
    TMX file (named `.tmx[.gz]`, or any with `tmx`)."""
    name = str(spec)
    is_tmx = tmx or name.lower().endswith((".tmx", ".tmx.gz"))
    if tsv or is_tmx or name.lower().endswith((".tsv", ".tsv.gz")):
        path = Path(name)
        if not path.is_file():
            raise DataError(f"{path}: no such file")
        return ParallelFiles(tmx=path, langs=(src, tgt)) if is_tmx else ParallelFiles(tsv=path)
    return ParallelFiles(src=find_side(spec, src), tgt=find_side(spec, tgt))


def _open_binary(path: Path) -> BinaryIO:
    """Open plain or gzip by content (magic bytes), not by name: a mislabelled file still reads."""
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    try:  # e.g. no read permission: name the file rather than end in a bare OSError
        with open(path, "rb") as probe:
            magic = probe.read(2)
        if magic == _GZIP_MAGIC:
            return gzip.open(path, "rb")  # type: ignore[return-value]
        return open(path, "rb")
    except OSError as err:
        raise DataError(f"{path}: cannot read ({err.strerror or err})") from err


def read_lines(path: str | Path) -> Iterator[str]:
    """Stream the lines of a text file (plain or gzip) as str, without their line endings.

    Raises DataError for a missing or empty file, invalid UTF-8 and NUL bytes, naming the
    file and the (1-based) line.
    """
    path = Path(path)
    lineno = 0
    with _open_binary(path) as handle:
        try:
            for lineno, raw in enumerate(handle, start=1):
                yield _decode_line(raw, path, lineno)
        except (OSError, EOFError, zlib.error) as err:  # truncated or corrupt gzip stream
            raise DataError(f"{path}: line {lineno + 1}: cannot read: {err}") from err
    if lineno == 0:
        raise DataError(f"{path}: file is empty")


def _decode_line(raw: bytes, path: Path, lineno: int) -> str:
    if lineno == 1 and raw.startswith(_BOM):
        raw = raw[len(_BOM) :]
    if raw.endswith(b"\n"):
        raw = raw[:-1]
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    if b"\x00" in raw:
        raise DataError(f"{path}: line {lineno}: contains a NUL byte (is this a binary file?)")
    return decode_utf8(raw, path, lineno)


def decode_utf8(raw: bytes, where: str | Path, lineno: int) -> str:
    """Line `lineno` of `where` as str; invalid UTF-8 is a DataError naming the line and byte."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise DataError(
            f"{where}: line {lineno}: invalid UTF-8 at byte {err.start} "
            f"({raw[err.start:err.start + 4]!r})"
        ) from err


def read_pairs(files: ParallelFiles) -> Iterator[tuple[str, str]]:
    """Stream every (source, target) line pair, checking both sides have the same count."""
    if files.tsv is not None:
        yield from _read_tsv(files.tsv)
        return
    if files.tmx is not None:
        yield from _read_tmx(files.tmx, *(files.langs or ("", "")))
        return
    assert files.src is not None and files.tgt is not None
    src_lines, tgt_lines = read_lines(files.src), read_lines(files.tgt)
    count = 0
    for src_line in src_lines:
        tgt_line = next(tgt_lines, None)
        if tgt_line is None:
            total = count + 1 + sum(1 for _ in src_lines)
            _raise_mismatch(files.src, total, files.tgt, count)
        count += 1
        yield src_line, tgt_line  # type: ignore[misc]
    extra = sum(1 for _ in tgt_lines)
    if extra:
        _raise_mismatch(files.src, count, files.tgt, count + extra)


def _raise_mismatch(src: Path, n_src: int, tgt: Path, n_tgt: int) -> None:
    raise DataError(
        f"{src} has {n_src} lines but {tgt} has {n_tgt}: the two sides must be line-aligned "
        f"(first unmatched line: {min(n_src, n_tgt) + 1})"
    )


def _read_tmx(path: Path, src: str, tgt: str) -> Iterator[tuple[str, str]]:
    with _open_binary(path) as handle:
        try:
            yield from read_tmx(handle, path, src, tgt)
        except (OSError, EOFError, zlib.error) as err:  # truncated or corrupt gzip stream
            raise DataError(f"{path}: cannot read: {err}") from err


def _read_tsv(path: Path) -> Iterator[tuple[str, str]]:
    for lineno, line in enumerate(read_lines(path), start=1):
        columns = line.split("\t")
        if len(columns) != 2:
            raise DataError(
                f"{path}: line {lineno}: expected 2 tab-separated columns, found {len(columns)}"
            )
        yield columns[0], columns[1]


def drop_empty(
    pairs: Iterable[tuple[str, str]], stats: FilterStats
) -> Iterator[tuple[str, str]]:
    """Training pairs with an empty or whitespace-only side carry no signal: drop and count them.

    Only for training data; valid and test keep every line so outputs stay aligned with
    references (count those with `count_empty`).
    """
    for src_line, tgt_line in pairs:
        stats.read += 1
        if not src_line.strip() or not tgt_line.strip():
            stats.drop("empty")
            continue
        yield src_line, tgt_line


def count_empty(
    pairs: Iterable[tuple[str, str]], stats: FilterStats
) -> Iterator[tuple[str, str]]:
    """Pass every pair through (alignment kept), counting those with an empty side."""
    for src_line, tgt_line in pairs:
        stats.read += 1
        if not src_line.strip() or not tgt_line.strip():
            stats.empty_kept += 1
        yield src_line, tgt_line


def file_sha256(path: str | Path, chunk_bytes: int = 1 << 20) -> str:
    """Checksum of a file's bytes as stored (compressed if gzip), read in bounded chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(chunk_bytes):
            digest.update(chunk)
    return digest.hexdigest()
