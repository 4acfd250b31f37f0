"""TMX input: files laid out as OPUS writes them (its website's downloads and OpusTools'
`opus_read -wm tmx`), plain and gzip, the sides found by xml:lang, read as a stream."""

from __future__ import annotations

import gzip
import json
import tracemalloc
from pathlib import Path

import pytest

from aiayn.cli import main
from aiayn.data.corpus import read_pairs, resolve_split
from aiayn.data.binarize import BinarizedDataset, load_vocabs
from aiayn.errors import DataError

PAIRS = [("Ein Mann läuft die Straße entlang.", "A man is running down the street."),
         ("Zwei Hunde spielen im Schnee.", "Two dogs are playing in the snow."),
         ("Tom & Jerry <3", "Tom & Jerry <3")]  # fmt: skip


def opus_website_tmx(pairs: list[tuple[str, str]]) -> str:
    """The layout of OPUS's downloadable `de-en.tmx.gz`: languages in alphabetical order,
    one unit a line, the header of its Uplug tool."""
    units = "".join(
        f'<tu><tuv xml:lang="de"><seg>{escape(de)}</seg></tuv>'
        f'<tuv xml:lang="en"><seg>{escape(en)}</seg></tuv></tu>\n'
        for de, en in pairs
    )
    return ('<?xml version="1.0" encoding="utf-8"?>\n<tmx version="1.4">\n<header '
            'creationdate="Sat Apr 10 12:00:00 2021" srclang="de" adminlang="en" '
            'o-tmf="unknown" segtype="sentence" creationtool="Uplug" '
            'creationtoolversion="unknown" datatype="PlainText" />\n'
            f"  <body>\n{units}  </body>\n</tmx>\n")  # fmt: skip


def opustools_tmx(pairs: list[tuple[str, str]]) -> str:
    """The layout of OpusTools' `opus_read --write_mode tmx` (its version attribute "1.4."
    and region codes such as en_GB included)."""
    units = "".join(
        f'\t\t<tu>\n\t\t\t<tuv xml:lang="en_GB"><seg>{escape(en)}</seg></tuv>\n'
        f'\t\t\t<tuv xml:lang="de"><seg>{escape(de)}</seg></tuv>\n\t\t</tu>\n'
        for de, en in pairs
    )
    return ('<?xml version="1.0" encoding="utf-8"?>\n<tmx version="1.4.">\n<header '
            'srclang="en_GB"\n\tadminlang="en"\n\tsegtype="sentence"\n\tdatatype="PlainText" '
            f"/>\n\t<body>\n{units}\t</body>\n</tmx>")  # fmt: skip


def escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def write(path: Path, text: str) -> Path:
    data = text.encode()
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


@pytest.mark.parametrize("layout", [opus_website_tmx, opustools_tmx])
@pytest.mark.parametrize("name", ["de-en.tmx", "de-en.tmx.gz"])
def test_opus_tmx_read_by_language_whatever_the_order(tmp_path, layout, name) -> None:
    path = write(tmp_path / name, layout(PAIRS))
    files = resolve_split(path, "en", "de")
    assert list(read_pairs(files)) == [(en, de) for de, en in PAIRS]
    files = resolve_split(path, "de", "en")  # the other direction, from the same file
    assert list(read_pairs(files)) == PAIRS


def test_inline_codes_are_left_out_and_a_missing_language_is_an_empty_side(tmp_path) -> None:
    text = opus_website_tmx(PAIRS[:1]).replace(
        "</body>",
        '<tu><tuv xml:lang="de"><seg>Das ist <bpt i="1">&lt;b&gt;</bpt>fett<ept i="1">'
        '&lt;/b&gt;</ept> und <hi>so</hi>.</seg></tuv><tuv xml:lang="EN-us"><seg>This is '
        '<ph>&lt;br/&gt;</ph>bold.</seg></tuv></tu>\n'
        '<tu><tuv xml:lang="de"><seg>Nur Deutsch.</seg></tuv></tu>\n</body>',
    )
    pairs = list(read_pairs(resolve_split(write(tmp_path / "x.tmx", text), "en", "de")))
    assert pairs[1:] == [("This is bold.", "Das ist fett und so."), ("", "Nur Deutsch.")]


def test_languages_not_in_the_file_are_named(tmp_path) -> None:
    files = resolve_split(write(tmp_path / "x.tmx", opus_website_tmx(PAIRS)), "en", "fr")
    with pytest.raises(DataError, match=r"x\.tmx: its first translation unit has the "
                       r"languages de, en, not en and fr"):  # fmt: skip
        list(read_pairs(files))


@pytest.mark.parametrize(
    "text, message",
    [("<tmx><body><tu><tuv", "not a readable TMX file"),
     ('<tmx version="1.4"><header/><body></body></tmx>', "no translation units"),
     ("", "not a readable TMX file")],
)  # fmt: skip
def test_broken_tmx_is_a_data_error(tmp_path, text: str, message: str) -> None:
    files = resolve_split(write(tmp_path / "bad.tmx", text), "en", "de")
    with pytest.raises(DataError, match=message):
        list(read_pairs(files))


def test_a_truncated_gzip_is_a_data_error(tmp_path) -> None:
    data = gzip.compress(opus_website_tmx(PAIRS * 200).encode())
    (tmp_path / "cut.tmx.gz").write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError, match=r"cut\.tmx\.gz: "):
        list(read_pairs(resolve_split(tmp_path / "cut.tmx.gz", "en", "de")))


def test_reading_streams_memory_stays_flat(tmp_path) -> None:
    """Units are dropped once read: the peak of Python's allocations does not grow with the
    file (20,000 units vs 2,000)."""
    peaks = []
    for n in (2_000, 20_000):
        path = write(tmp_path / f"{n}.tmx.gz", opus_website_tmx(PAIRS[:2] * (n // 2)))
        tracemalloc.start()
        count = sum(1 for _ in read_pairs(resolve_split(path, "en", "de")))
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        assert count == n
    assert peaks[1] < 1.5 * peaks[0]


def test_prepare_tmx_from_the_command_line(tmp_path, capsys) -> None:
    subjects = [("The dog", "Der Hund"), ("The cat", "Die Katze"), ("The man", "Der Mann"),
                ("The woman", "Die Frau"), ("The child", "Das Kind")]
    verbs = [("sees", "sieht"), ("likes", "mag"), ("finds", "findet"), ("has", "hat")]
    objects = [("the ball", "den Ball"), ("the apple", "den Apfel"), ("the book", "das Buch")]
    pairs = [(f"{s_de} {v_de} {o_de}.", f"{s_en} {v_en} {o_en}.") for s_en, s_de in subjects
             for v_en, v_de in verbs for o_en, o_de in objects]  # fmt: skip
    pairs.append(pairs[0])  # a duplicate, which cleaning removes
    train = write(tmp_path / "de-en.tmx.gz", opus_website_tmx(pairs))
    valid = write(tmp_path / "valid.tmx", opustools_tmx(pairs[:5]))
    out = tmp_path / "out"
    args = ["prepare", "--tmx", str(train), "--valid", str(valid), "--src", "en", "--tgt", "de",
            "--vocab-size", "400", "--out", str(out), "--workers", "1", "--quiet"]  # fmt: skip
    assert main(args) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    train_split = manifest["splits"]["train"]
    assert (train_split["read"], train_split["pairs"]) == (61, 60)
    assert train_split["dropped"]["duplicate"] == 1
    assert [Path(s["path"]).name for s in train_split["sources"]] == ["de-en.tmx.gz"]
    src_vocab, tgt_vocab = load_vocabs(out)
    first = BinarizedDataset(out, "valid")[0]
    assert (src_vocab.decode(first[0]), tgt_vocab.decode(first[1])) == (pairs[0][1], pairs[0][0])
