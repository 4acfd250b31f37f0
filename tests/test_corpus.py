"""Reading parallel text: formats, the checks that name file and line, and the filters."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiayn.data.corpus import (
    FilterStats,
    LengthFilter,
    ParallelFiles,
    count_empty,
    drop_empty,
    file_sha256,
    find_side,
    read_lines,
    read_pairs,
    resolve_split,
)
from aiayn.errors import DataError


def write(path: Path, data: bytes, gz: bool = False) -> Path:
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def test_plain_and_gzip_read_the_same(tmp_path: Path) -> None:
    text = "Ein Hund.\nZwei Katzen.\n".encode()
    plain = write(tmp_path / "a.de", text)
    packed = write(tmp_path / "b.de.gz", text, gz=True)
    assert list(read_lines(plain)) == list(read_lines(packed)) == ["Ein Hund.", "Zwei Katzen."]


def test_bom_and_windows_line_endings_are_removed(tmp_path: Path) -> None:
    path = write(tmp_path / "x.en", b"\xef\xbb\xbfA dog.\r\nA cat.\r\nlast")
    assert list(read_lines(path)) == ["A dog.", "A cat.", "last"]


def test_lines_split_on_newline_only(tmp_path: Path) -> None:
    """U+2028 and a lone CR are characters inside a line, as for `wc -l`, not line breaks."""
    path = write(tmp_path / "x.en", "a\u2028b\nc\rd\n".encode())
    assert list(read_lines(path)) == ["a\u2028b", "c\rd"]


def test_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"nope\.en: no such file"):
        list(read_lines(tmp_path / "nope.en"))
    with pytest.raises(DataError, match=r"train\.en: no such file \(nor train\.en\.gz\)"):
        find_side(tmp_path / "train", "en")


@pytest.mark.parametrize("gz", [False, True])
def test_empty_file_is_an_error(tmp_path: Path, gz: bool) -> None:
    path = write(tmp_path / "empty.en", b"", gz=gz)
    with pytest.raises(DataError, match=r"empty\.en: file is empty"):
        list(read_lines(path))


def test_invalid_utf8_names_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path / "bad.de", b"gut\nauch gut\nschlecht \xff\xfe\n")
    with pytest.raises(DataError, match=r"bad\.de: line 3: invalid UTF-8"):
        list(read_lines(path))


def test_nul_byte_names_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path / "nul.en", b"fine\nnot\x00fine\n", gz=True)
    with pytest.raises(DataError, match=r"nul\.en: line 2: contains a NUL byte"):
        list(read_lines(path))


def test_reading_streams_up_to_the_bad_line(tmp_path: Path) -> None:
    """Lines before a fault arrive before the error: nothing is read ahead into memory."""
    path = write(tmp_path / "late.en", b"ok\n" * 1000 + b"\xff\n")
    seen = []
    with pytest.raises(DataError, match="line 1001"):
        for line in read_lines(path):
            seen.append(line)
    assert len(seen) == 1000


@pytest.mark.parametrize("longer", ["src", "tgt"])
def test_different_line_counts_name_both_files(tmp_path: Path, longer: str) -> None:
    counts = {"src": 3, "tgt": 3}
    counts[longer] = 5
    src = write(tmp_path / "t.en", b"x\n" * counts["src"])
    tgt = write(tmp_path / "t.de", b"y\n" * counts["tgt"])
    message = rf"t\.en has {counts['src']} lines but .*t\.de has {counts['tgt']}"
    message += ".*first unmatched line: 4"
    with pytest.raises(DataError, match=message):
        list(read_pairs(ParallelFiles(src=src, tgt=tgt)))


def test_tsv_pairs_and_bad_column_count(tmp_path: Path) -> None:
    good = write(tmp_path / "good.tsv", "a dog\tein Hund\nthe cat\tdie Katze\n".encode())
    assert list(read_pairs(resolve_split(good, "en", "de"))) == [
        ("a dog", "ein Hund"),
        ("the cat", "die Katze"),
    ]
    bad = write(tmp_path / "bad.tsv", b"a\tb\nonly one column\n")
    with pytest.raises(DataError, match=r"bad\.tsv: line 2: expected 2 tab-separated columns"):
        list(read_pairs(resolve_split(bad, "en", "de")))


def test_resolve_split_prefers_plain_then_gzip(tmp_path: Path) -> None:
    write(tmp_path / "train.en.gz", b"a\n", gz=True)
    write(tmp_path / "train.de", b"b\n")
    files = resolve_split(tmp_path / "train", "en", "de")
    assert (files.src.name, files.tgt.name) == ("train.en.gz", "train.de")


def test_empty_sides_dropped_in_training_kept_in_evaluation() -> None:
    pairs = [("a", "b"), ("", "b"), ("a", "  \t"), ("c", "d")]
    train_stats, eval_stats = FilterStats(), FilterStats()
    assert list(drop_empty(pairs, train_stats)) == [("a", "b"), ("c", "d")]
    assert train_stats.read == 4 and train_stats.dropped == {"empty": 2}
    assert list(count_empty(pairs, eval_stats)) == pairs
    assert eval_stats.empty_kept == 2 and eval_stats.dropped == {}


def test_length_filter_reasons() -> None:
    both = LengthFilter(max_tokens=10, max_ratio=1.5)
    assert both.reason(10, 10) is None
    assert both.reason(11, 3) == "too_long"
    assert both.reason(4, 6) is None
    assert both.reason(4, 7) == "ratio"
    assert both.reason(0, 1) is None  # an empty side counts as length 1 for the ratio
    assert LengthFilter().reason(10_000, 1) is None


def test_file_sha256_matches_hashlib(tmp_path: Path) -> None:
    import hashlib

    path = write(tmp_path / "f.en", b"abc" * 1000)
    assert file_sha256(path, chunk_bytes=7) == hashlib.sha256(b"abc" * 1000).hexdigest()


def test_truncated_gzip_is_reported(tmp_path: Path) -> None:
    packed = gzip.compress(b"hello\n" * 20_000)
    path = write(tmp_path / "cut.en.gz", packed[: len(packed) // 2])
    with pytest.raises(DataError, match=r"cut\.en\.gz: line \d+: cannot read"):
        list(read_lines(path))


def test_a_one_megabyte_line_reads_whole(tmp_path: Path) -> None:
    """No line-length limit in the reader: length is the length filter's business."""
    long = "ab c" * (1 << 18)  # 1 MiB of text
    path = write(tmp_path / "long.en", f"short\n{long}\nlast\n".encode())
    assert list(read_lines(path)) == ["short", long, "last"]


def test_control_characters_other_than_nul_are_kept(tmp_path: Path) -> None:
    """Tabs, ESC, DEL, form feed and C1 controls are text (NUL alone means binary data)."""
    line = "a\tb\x1b[0m\x7f\x0c\x85\u200bc"
    path = write(tmp_path / "ctl.en", f"{line}\nplain\n".encode())
    assert list(read_lines(path)) == [line, "plain"]


def test_an_unreadable_file_is_named(tmp_path: Path, monkeypatch) -> None:
    import aiayn.data.corpus as corpus

    path = write(tmp_path / "locked.en", b"text\n")

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    # the module's own `open`: a chmod does not stop root, who may run the tests
    monkeypatch.setattr(corpus, "open", denied, raising=False)
    with pytest.raises(DataError, match=r"locked\.en: cannot read \(Permission denied\)"):
        list(read_lines(path))


def test_corrupt_gzip_data_is_reported(tmp_path: Path) -> None:
    """A valid gzip header over garbage raises zlib.error inside gzip: still a DataError."""
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
    path = write(tmp_path / "junk.en.gz", header + bytes(range(7, 200, 3)))
    with pytest.raises(DataError, match=r"junk\.en\.gz: line 1: cannot read"):
        list(read_lines(path))


# Any line of Unicode text: no LF (the separator) and no NUL (refused), no lone surrogates
# (not encodable as UTF-8).
LINE = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\x00"))


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("property")


@settings(max_examples=200, deadline=None)
@given(lines=st.lists(LINE, min_size=1, max_size=6), crlf=st.booleans(), final=st.booleans())
def test_any_unicode_text_reads_back_one_line_per_line(
    scratch: Path, lines: list[str], crlf: bool, final: bool
) -> None:
    ending = "\r\n" if crlf else "\n"
    final = final or lines[-1] == ""  # without it a last empty line is no line at all
    path = write(scratch / "any.en", (ending.join(lines) + ending * final).encode())
    expected = [line.removesuffix("\r") if not crlf else line for line in lines]
    if crlf and not final:
        # An unterminated last line is read as in a LF file: a trailing CR counts as its
        # ending (the bytes "x\r" cannot tell the two kinds of file apart).
        expected[-1] = expected[-1].removesuffix("\r")
    expected[0] = expected[0].removeprefix("\ufeff")  # a BOM opening the file is dropped
    assert list(read_lines(path)) == expected


@settings(max_examples=200, deadline=None)
@given(data=st.binary(min_size=1, max_size=64), gz_header=st.booleans())
def test_any_bytes_give_lines_or_a_data_error(scratch: Path, data: bytes, gz_header: bool) -> None:
    """Arbitrary bytes (also behind a gzip header) never end in anything but a DataError,
    and what reads yields one line per LF-terminated line."""
    if gz_header:
        data = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + data
    path = write(scratch / "bytes.en", data)
    try:
        got = list(read_lines(path))
    except DataError:
        return
    assert gz_header or len(got) == data.count(b"\n") + (not data.endswith(b"\n"))
