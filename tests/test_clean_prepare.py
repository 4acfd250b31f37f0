"""Cleaning inside `aiayn prepare`: the report (printed and in the manifest), `--removed`,
`--dry-run`, the stop when one filter removes more than half the pairs, valid and test
never filtered, and the same result from one encoding process or several."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from aiayn.cli import main
from aiayn.data import clean_report
from aiayn.data.binarize import BinarizedDataset, load_vocabs
from aiayn.data.demo_corpus import demo_splits
from aiayn.data.prepare import prepare
from aiayn.data.prepare_options import CleanOptions, PrepareOptions

# (kind of noise, the filter that removes it, how to make it from a clean pair i)
NOISE = {
    "duplicate": lambda pairs, i: pairs[i],
    "copy": lambda pairs, i: (f"{pairs[i][0]} {pairs[i + 1][0]}",) * 2,  # 4 words or more
    "markup": lambda pairs, i: (f"<b>{pairs[i][0]}</b>", pairs[i][1]),
    "language": lambda pairs, i: (pairs[i][0], pairs[i + 1][0] + " " + pairs[i + 2][0]),
}


@functools.lru_cache(maxsize=None)
def clean_pairs(n: int) -> tuple[tuple[str, str], ...]:
    """Real English -> German pairs (the demo grammar's), all distinct."""
    return tuple(demo_splits(n_train=n, n_valid=0, n_test=0, seed=3).train)


def noisy(n: int, every: int = 10) -> tuple[list[tuple[str, str]], dict[int, str]]:
    """`n` clean pairs with a noisy pair after every `every`-th, the kinds in turn; returns
    the pairs and {1-based line: filter that must remove it}."""
    pairs, expected, kinds = [], {}, list(NOISE)
    base = clean_pairs(n + 2)
    for i in range(n):
        pairs.append(base[i])
        if i % every == every - 1:
            kind = kinds[(i // every) % len(kinds)]
            pairs.append(NOISE[kind](base, i))
            expected[len(pairs)] = kind
    return pairs, expected


def write(prefix: Path, pairs: list[tuple[str, str]]) -> Path:
    for lang, side in (("en", 0), ("de", 1)):
        Path(f"{prefix}.{lang}").write_text("".join(p[side] + "\n" for p in pairs))
    return prefix


@pytest.fixture
def corpus(tmp_path: Path) -> tuple[Path, dict[int, str]]:
    pairs, expected = noisy(400)
    write(tmp_path / "train", pairs)
    write(tmp_path / "valid", pairs[:40])  # noise included: it must stay
    write(tmp_path / "test", pairs[40:80])
    return tmp_path, expected


def args(root: Path, *extra: str) -> list[str]:
    """The command over `corpus`. The misaligned filter is statistical (it may take a
    translation or two of these 400, and miss a misalignment): its own tests are in
    test_lexical.py and the one below; here the other filters' counts are exact."""
    return ["prepare", "--train", str(root / "train"), "--valid", str(root / "valid"),
            "--test", str(root / "test"), "--vocab-size", "600", "--out", str(root / "out"),
            "--workers", "1", "--skip-filter", "misaligned", *extra]  # fmt: skip


def test_misaligned_pairs_are_removed_and_the_report_says_how(tmp_path, capsys):
    """600 translations and 30 misaligned pairs (a source beside another's target): most
    of those go, next to none of the translations; the note gives the threshold."""
    base = clean_pairs(660)
    pairs = list(base[:600]) + [(base[600 + i][0], base[630 + i][1]) for i in range(30)]
    write(tmp_path / "train", pairs)
    write(tmp_path / "valid", pairs[:40])
    assert main(["prepare", "--train", str(tmp_path / "train"), "--valid", str(tmp_path / "valid"),
                 "--vocab-size", "600", "--out", str(tmp_path / "out"), "--workers", "2",
                 "--removed", str(tmp_path / "removed.tsv")]) == 0  # fmt: skip
    report = json.loads((tmp_path / "out" / "manifest.json").read_text())["cleaning"]
    lines = [line.split("\t") for line in (tmp_path / "removed.tsv").read_text().splitlines()]
    misaligned = [int(line[0]) for line in lines if line[1] == "misaligned"]
    assert report["removed"]["misaligned"]["count"] == len(misaligned)
    assert sum(n > 600 for n in misaligned) >= 25 and sum(n <= 600 for n in misaligned) <= 6
    (note,) = [n for n in report["notes"] if n.startswith("misaligned:")]
    assert "Model 1 learned from" in note and "median" in note
    assert "misaligned" in capsys.readouterr().out


def test_report_in_manifest_and_printed_and_every_removed_pair_in_the_tsv(corpus, capsys):
    root, expected = corpus
    assert main(args(root, "--removed", str(root / "removed.tsv"))) == 0
    manifest = json.loads((root / "out" / "manifest.json").read_text())
    report = manifest["cleaning"]
    removed = {name: entry["count"] for name, entry in report["removed"].items() if entry["count"]}
    assert removed == {kind: list(expected.values()).count(kind) for kind in NOISE}
    assert report["read"] == 440 and report["kept"] == 400 == manifest["splits"]["train"]["pairs"]
    assert report["removed"]["copy"]["share"] == pytest.approx(10 / 440, abs=1e-6)
    example = report["removed"]["markup"]["examples"][0]
    lines = (root / "train.en").read_text().split("\n")
    assert example["src"] == lines[example["line"] - 1] and example["src"].startswith("<b>")
    assert report["options"] == json.loads(json.dumps(CleanOptions(skip=("misaligned",)).__dict__))
    assert manifest["splits"]["train"]["dropped"]["language"] == 10
    rows = [row.split("\t") for row in (root / "removed.tsv").read_text().splitlines()]
    assert {int(row[0]): row[1] for row in rows} == expected
    de = (root / "train.de").read_text().split("\n")
    assert all(row[2:] == [lines[int(row[0]) - 1], de[int(row[0]) - 1]] for row in rows)
    printed = capsys.readouterr().out
    assert "cleaning of train: 440 pairs read, 40 removed (9.1%), 400 kept" in printed
    assert f"line {example['line']}: <b>" in printed


def test_valid_and_test_are_never_filtered(corpus):
    root, _ = corpus
    manifest = prepare(train=root / "train", valid=root / "valid", test=root / "test",
                       out=root / "out", options=PrepareOptions(vocab_size=600, workers=1,
                                                                quiet=True))  # fmt: skip
    assert manifest["splits"]["valid"]["pairs"] == 40 and manifest["splits"]["test"]["pairs"] == 40
    src_vocab, tgt_vocab = load_vocabs(root / "out")
    valid = BinarizedDataset(root / "out", "valid")
    pairs, _ = noisy(400)
    assert [(src_vocab.decode(s), tgt_vocab.decode(t)) for s, t in valid] == pairs[:40]


def test_dry_run_reports_and_writes_nothing_but_the_removed_file(corpus, capsys):
    root, expected = corpus
    assert main(args(root, "--dry-run", "--removed", str(root / "removed.tsv"))) == 0
    assert not (root / "out").exists()
    printed = capsys.readouterr().out
    assert "dry run of" in printed and "the token-length filters" in printed
    assert "cleaning of train: 440 pairs read, 40 removed" in printed
    assert "too_long" not in printed  # it needs the vocabulary: not run, not reported as 0
    rows = (root / "removed.tsv").read_text().splitlines()
    assert {int(row.split("\t")[0]) for row in rows} == set(expected)


def test_a_removed_file_that_cannot_be_written_fails_before_any_work(corpus, capsys):
    root, _ = corpus
    assert main(args(root, "--removed", str(root / "no" / "such" / "removed.tsv"))) == 2
    assert "no such directory for the removed pairs" in capsys.readouterr().err
    assert not (root / "out").exists()


def test_skipped_filters_do_not_run_and_the_thresholds_reach_them(corpus):
    root, expected = corpus
    skip = ["--skip-filter", "copy,markup", "--skip-filter", "language"]
    assert main(args(root, *skip, "--max-char-ratio", "5", "--quiet")) == 0
    report = json.loads((root / "out" / "manifest.json").read_text())["cleaning"]
    assert not {"copy", "markup", "language"} & set(report["removed"])
    assert report["options"]["max_char_ratio"] == 5.0
    kinds = list(expected.values())
    assert report["kept"] == 400 + sum(kinds.count(k) for k in ("copy", "markup", "language"))


def test_a_filter_removing_over_half_stops_prepare_naming_it(tmp_path, capsys):
    pairs = list(clean_pairs(200))
    write(tmp_path / "train", pairs)
    write(tmp_path / "valid", pairs[:20])
    swapped = ["prepare", "--train", str(tmp_path / "train"), "--valid", str(tmp_path / "valid"),
               "--src", "de", "--tgt", "en", "--vocab-size", "600", "--workers", "1",
               "--out", str(tmp_path / "out"), "--quiet"]  # fmt: skip
    Path(tmp_path / "train.de").rename(tmp_path / "x")  # the files as the languages say
    Path(tmp_path / "train.en").rename(tmp_path / "train.de")
    Path(tmp_path / "x").rename(tmp_path / "train.en")
    assert main(swapped) == 2
    err = capsys.readouterr().err
    assert "the language filter removed 200 of the first 200 training pairs (100%)" in err
    assert "are --src de and --tgt en the languages of the two sides" in err
    assert "--allow-heavy-filtering" in err and not (tmp_path / "out").exists()


def test_allow_heavy_filtering_goes_on(tmp_path):
    pairs = [(f"<i>{en}</i>", de) if i % 3 else (en, de)
             for i, (en, de) in enumerate(clean_pairs(300))]  # two thirds markup
    write(tmp_path / "train", pairs)
    write(tmp_path / "valid", pairs[:20])
    options = PrepareOptions(vocab_size=600, workers=1, quiet=True)
    common = {"train": tmp_path / "train", "valid": tmp_path / "valid", "out": tmp_path / "out"}
    with pytest.raises(Exception, match="the markup filter removed 200 of the first 300"):
        prepare(**common, options=options)
    allow = PrepareOptions(vocab_size=600, workers=1, quiet=True,
                           clean=CleanOptions(allow_heavy=True))  # fmt: skip
    manifest = prepare(**common, options=allow)
    assert manifest["splits"]["train"]["pairs"] == 100
    assert manifest["cleaning"]["heavy"] == ["markup"]


def test_a_heavy_filter_stops_early_without_reading_on(tmp_path, monkeypatch):
    monkeypatch.setattr(clean_report, "EARLY_CHECK", 2000)
    settled = []
    settle = clean_report.Cleaning.settle
    monkeypatch.setattr(clean_report.Cleaning, "settle",
                        lambda self, *a: settled.append(1) or settle(self, *a))  # fmt: skip
    names = ("".join(chr(97 + int(d)) for d in str(i)) for i in range(6000))  # 12 -> "bc"
    pairs = [(f"Line {name} of a page that was never translated",) * 2 for name in names]
    write(tmp_path / "train", pairs)
    write(tmp_path / "valid", pairs[:20])
    options = PrepareOptions(vocab_size=600, workers=1, quiet=True)
    with pytest.raises(Exception, match="the copy filter removed 2,000 of the first 2,000"):
        prepare(train=tmp_path / "train", valid=tmp_path / "valid", out=tmp_path / "out",
                options=options)  # fmt: skip
    assert len(settled) == 1  # of three chunks


def test_several_workers_clean_as_one_does(tmp_path):
    pairs, expected = noisy(4200, every=7)  # three chunks of 2,000: the pool runs
    write(tmp_path / "train", pairs)
    write(tmp_path / "valid", pairs[:20])
    manifests = []
    for workers in (1, 2):
        out = tmp_path / f"out{workers}"
        options = PrepareOptions(vocab_size=600, workers=workers, quiet=True,
                                 removed=str(tmp_path / f"removed{workers}.tsv"))  # fmt: skip
        manifests.append(prepare(train=tmp_path / "train", valid=tmp_path / "valid", out=out,
                                 options=options))  # fmt: skip
    assert manifests[0]["cleaning"] == manifests[1]["cleaning"]  # the judge too, in each worker
    misaligned = manifests[0]["cleaning"]["removed"]["misaligned"]["count"]  # a few translations
    assert misaligned < 0.01 * 4200 and manifests[0]["cleaning"]["kept"] == 4200 - misaligned
    one, two = ((tmp_path / f"removed{w}.tsv").read_text() for w in (1, 2))
    assert one == two and len(one.splitlines()) == len(expected) + misaligned
    assert (tmp_path / "out1" / "train.src.bin").read_bytes() == (
        tmp_path / "out2" / "train.src.bin").read_bytes()  # fmt: skip


def test_a_recipe_prepares_the_standard_corpus_uncleaned_unless_asked(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    pairs = list(clean_pairs(60))
    for stem, split in (("train", pairs + pairs[:3]), ("val", pairs[:10]),
                        ("test_2016_flickr", pairs[10:20])):  # fmt: skip
        write(raw / stem, split)
    base = ["prepare", "multi30k", "--from", str(raw), "--vocab-size", "600", "--workers", "1",
            "--quiet"]  # fmt: skip
    assert main([*base, "--out", str(tmp_path / "standard")]) == 0
    manifest = json.loads((tmp_path / "standard" / "manifest.json").read_text())
    assert manifest["splits"]["train"]["pairs"] == 63  # its three duplicates kept
    assert main([*base, "--out", str(tmp_path / "cleaned"), "--skip-filter", "none"]) == 0
    manifest = json.loads((tmp_path / "cleaned" / "manifest.json").read_text())
    assert manifest["splits"]["train"]["pairs"] == 60
    assert manifest["cleaning"]["removed"]["duplicate"]["count"] == 3
