"""`prepare` and `aiayn prepare`: the directory it writes, its report, and every bad input
failing with exit code 2, a message naming file and line, and no output left behind."""

from __future__ import annotations

import gzip
import re
import json
import random
from pathlib import Path

import pytest

from aiayn.cli import main
from aiayn.data.binarize import BinarizedDataset, check_vocab, load_vocabs
from aiayn.data.prepare import prepare
from aiayn.data.prepare_options import CleanOptions, PrepareOptions
from aiayn.errors import DataError

WORDS = "the a cat dog sat on mat house tree green red big small runs over with and man".split()
# The made-up target language below is no German: the language filter (on by default) would
# rightly remove much of it. These tests are about everything else `prepare` does.
SKIP_LANGUAGE = ["--skip-filter", "language"]


def lines(n: int, seed: int) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    src = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 14))) for _ in range(n)]
    return src, [" ".join(w[::-1] + "en" for w in s.split()) for s in src]


def write_split(prefix: Path, src: list[str], tgt: list[str], gz: bool = False) -> Path:
    for lang, text in (("en", src), ("de", tgt)):
        data = "".join(line + "\n" for line in text).encode()
        path = Path(f"{prefix}.{lang}{'.gz' if gz else ''}")
        path.write_bytes(gzip.compress(data) if gz else data)
    return prefix


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    write_split(tmp_path / "train", *lines(150, seed=0))
    write_split(tmp_path / "valid", *lines(20, seed=1), gz=True)
    write_split(tmp_path / "test", *lines(10, seed=2))
    return tmp_path


def run(corpus: Path, *extra: str, out: str = "out") -> int:
    args = ["prepare", "--train", str(corpus / "train"), "--valid", str(corpus / "valid")]
    args += ["--vocab-size", "300", "--out", str(corpus / out), "--workers", "1", *extra]
    return main([*args, *SKIP_LANGUAGE])


def small_prepare(corpus: Path, **changes: object) -> dict:
    clean = CleanOptions(skip=("language",))
    options = PrepareOptions(vocab_size=300, workers=1, quiet=True, clean=clean, **changes)  # type: ignore
    return prepare(train=corpus / "train", valid=corpus / "valid", out=corpus / "out",
                   options=options)  # fmt: skip


def test_prepared_directory_layout_and_manifest(corpus: Path, capsys) -> None:
    assert run(corpus, "--test", str(corpus / "test")) == 0
    out = corpus / "out"
    names = {p.name for p in out.iterdir()}
    splits, sides, exts = ("train", "valid", "test"), ("src", "tgt"), ("bin", "idx")
    shards = {f"{split}.{side}.{ext}" for split in splits for side in sides for ext in exts}
    assert names == {"manifest.json", "vocab.model", "vocab.json"} | shards
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["vocab"]["joint"] and manifest["vocab"]["src"] == manifest["vocab"]["tgt"]
    assert manifest["vocab"]["src"]["size"] == 300 and manifest["dtype"] == "uint16"
    assert manifest["vocab"]["roundtrip_failures"] == 0
    assert manifest["filters"] == {
        "drop_empty": True,
        "max_tokens_per_side": 250,
        "max_len_ratio": None,
    }
    train = manifest["splits"]["train"]
    assert (train["read"], train["pairs"]) == (150, 150)
    assert train["dropped"] == {"empty": 0, "too_long": 0, "ratio": 0}
    assert [Path(s["path"]).name for s in train["sources"]] == ["train.en", "train.de"]
    assert all(len(s["sha256"]) == 64 for s in train["sources"])
    report = capsys.readouterr().out
    assert "train: 150 pairs read, 150 kept" in report and "joint BPE, 300 pieces" in report


def test_shards_decode_back_to_the_exact_text(corpus: Path) -> None:
    small_prepare(corpus)
    src_vocab, tgt_vocab = load_vocabs(corpus / "out")
    check_vocab(corpus / "out", src_vocab, tgt_vocab)
    ds = BinarizedDataset(corpus / "out", "valid")
    src, tgt = lines(20, seed=1)
    assert [src_vocab.decode(ds[i][0]) for i in range(len(ds))] == src
    assert [tgt_vocab.decode(ds[i][1]) for i in range(len(ds))] == tgt


def test_empty_pairs_dropped_from_training_kept_in_valid(corpus: Path) -> None:
    src, tgt = lines(150, seed=0)
    src[3], tgt[10], tgt[11] = "", "   ", "\t"
    write_split(corpus / "train", src, tgt)
    vsrc, vtgt = lines(20, seed=1)
    vsrc[5] = ""
    write_split(corpus / "valid", vsrc, vtgt, gz=True)
    manifest = small_prepare(corpus)
    assert manifest["splits"]["train"]["dropped"]["empty"] == 3
    assert manifest["splits"]["train"]["pairs"] == 147
    valid = manifest["splits"]["valid"]
    assert (valid["pairs"], valid["empty_kept"]) == (20, 1)
    assert len(BinarizedDataset(corpus / "out", "valid")[5][0]) == 0  # line 6 stays line 6


def test_length_filters_count_what_they_remove(corpus: Path) -> None:
    manifest = small_prepare(corpus, max_tokens_per_side=12, max_len_ratio=1.2)
    train = manifest["splits"]["train"]
    assert train["dropped"]["too_long"] > 0 and train["dropped"]["ratio"] > 0
    assert train["pairs"] == 150 - train["dropped"]["too_long"] - train["dropped"]["ratio"]
    assert train["src_max_len"] <= 12 and train["tgt_max_len"] <= 12
    assert manifest["splits"]["valid"]["pairs"] == 20  # never filtered


def test_separate_vocabularies(corpus: Path) -> None:
    assert run(corpus, "--separate-vocabs", "--quiet") == 0
    manifest = json.loads((corpus / "out" / "manifest.json").read_text())
    vocab = manifest["vocab"]
    assert not vocab["joint"]
    assert (vocab["src"]["file"], vocab["tgt"]["file"]) == ("vocab.en.model", "vocab.de.model")
    assert vocab["src"]["sha256"] != vocab["tgt"]["sha256"]
    src_vocab, tgt_vocab = load_vocabs(corpus / "out")
    ds = BinarizedDataset(corpus / "out", "train")
    src, tgt = lines(150, seed=0)
    assert (src_vocab.decode(ds[7][0]), tgt_vocab.decode(ds[7][1])) == (src[7], tgt[7])


def test_tsv_training_data(corpus: Path) -> None:
    src, tgt = lines(150, seed=0)
    (corpus / "train.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in zip(src, tgt)))
    args = ["prepare", "--tsv", str(corpus / "train.tsv"), "--valid", str(corpus / "valid")]
    args += ["--vocab-size", "300", "--out", str(corpus / "out"), "--quiet", "--workers", "1",
             *SKIP_LANGUAGE]  # fmt: skip
    assert main(args) == 0
    assert BinarizedDataset(corpus / "out", "train").src_lengths.shape == (150,)
    # --tsv means a TSV whatever the file is called (pairs.txt was taken for a prefix)
    (corpus / "train.tsv").rename(corpus / "pairs.txt")
    args[2], args[args.index("--out") + 1] = str(corpus / "pairs.txt"), str(corpus / "out2")
    assert main(args) == 0
    assert BinarizedDataset(corpus / "out2", "train").src_lengths.shape == (150,)


def test_existing_output_needs_force(corpus: Path, capsys) -> None:
    (corpus / "out").mkdir()
    (corpus / "out" / "manifest.json").write_text("{}")  # an older `prepare`'s output
    (corpus / "out" / "old.txt").write_text("keep me")
    assert run(corpus, "--quiet") == 2
    assert "already exists" in capsys.readouterr().err
    assert (corpus / "out" / "old.txt").exists()
    assert run(corpus, "--quiet", "--force") == 0
    assert not (corpus / "out" / "old.txt").exists() and (corpus / "out" / "manifest.json").exists()
    assert sorted(p.name for p in corpus.iterdir() if p.name.startswith(".")) == []


def test_force_never_replaces_a_directory_that_holds_the_corpus(corpus: Path, capsys) -> None:
    # The old directory is deleted once the new one is in place: with the corpus inside it,
    # --force would delete the very files it was prepared from.
    inside = corpus / "out"
    inside.mkdir()
    write_split(inside / "train", *lines(150, seed=0))
    before = (inside / "train.en").read_bytes()
    args = ["prepare", "--train", str(inside / "train"), "--valid", str(corpus / "valid")]
    args += ["--vocab-size", "300", "--out", str(inside), "--workers", "1", "--quiet", "--force"]
    assert main(args) == 2
    assert f"{inside}: holds the input {inside / 'train.en'}" in capsys.readouterr().err
    assert (inside / "train.en").read_bytes() == before
    assert sorted(p.name for p in corpus.iterdir() if p.name.startswith(".")) == []


def test_force_replaces_only_a_prepared_directory(corpus: Path, capsys) -> None:
    # A mistyped --out (a runs/ directory) used to be deleted whole.
    runs = corpus / "runs"
    (runs / "mine" / "checkpoints").mkdir(parents=True)
    (runs / "mine" / "train_log.jsonl").write_text("{}\n")
    args = ["prepare", "--train", str(corpus / "train"), "--valid", str(corpus / "valid"),
            "--vocab-size", "300", "--workers", "1", "--quiet", "--force", *SKIP_LANGUAGE]  # fmt: skip
    assert main([*args, "--out", str(runs)]) == 2
    assert f"{runs}: is not a directory made by `aiayn prepare`" in capsys.readouterr().err
    assert (runs / "mine" / "train_log.jsonl").read_text() == "{}\n"
    assert main([*args, "--out", str(corpus / "data")]) == 0
    assert main([*args, "--out", str(corpus / "data")]) == 0  # a prepared one is replaced


@pytest.mark.parametrize(
    "option, message",
    [(("--seed", "-1"), "the seed must be at least 0, got -1"),
     (("--vocab-sample", "50"), "the vocabulary sample must be at least 101, got 50"),
     (("--vocab-size", "0"), "the vocab size must be at least 5, got 0"),
     (("--workers", "0"), "the workers must be at least 1"),
     (("--max-len-ratio", "nan"), "the max length ratio must be a number >= 1, got nan")],
)  # fmt: skip
def test_impossible_options_are_refused_before_the_corpus_is_read(corpus, capsys, option, message):
    # They used to end in sentencepiece's or numpy's tracebacks, or (NaN) to switch the
    # filter off silently, after the whole corpus was read.
    assert run(corpus, "--quiet", *option) == 2
    assert message in capsys.readouterr().err
    assert not (corpus / "out").exists()


def test_missing_arguments_are_reported(corpus: Path, capsys) -> None:
    assert main(["prepare", "--train", str(corpus / "train"), "--out", str(corpus / "o")]) == 2
    assert "--valid PREFIX" in capsys.readouterr().err


def _corrupt(corpus: Path, case: str) -> str:
    """Damage the corpus as `case` says; return the message expected on stderr."""
    train_de = corpus / "train.de"
    if case == "missing":
        train_de.unlink()
        return r"train\.de: no such file"
    if case == "empty":
        train_de.write_bytes(b"")
        return r"train\.de: file is empty"
    if case == "counts":
        train_de.write_bytes(train_de.read_bytes() + b"extra\nlines\n")
        return r"train\.en has 150 lines but .*train\.de has 152.*first unmatched line: 151"
    if case == "utf8":
        data = train_de.read_bytes().split(b"\n")
        data[41] = b"caf\xe9"  # Latin-1, not UTF-8
        train_de.write_bytes(b"\n".join(data))
        return r"train\.de: line 42: invalid UTF-8"
    if case == "nul_in_valid":
        (corpus / "valid.en.gz").write_bytes(gzip.compress(b"ok\nok\nbad\x00line\n" + b"ok\n" * 17))
        return r"valid\.en\.gz: line 3: contains a NUL byte"
    raise AssertionError(case)


@pytest.mark.parametrize("case", ["missing", "empty", "counts", "utf8", "nul_in_valid"])
def test_bad_input_exits_2_names_file_and_line_leaves_nothing(
    corpus: Path, case: str, capsys
) -> None:
    expected = _corrupt(corpus, case)
    before = set(corpus.iterdir())
    assert run(corpus, "--quiet") == 2
    err = capsys.readouterr().err
    assert err.startswith("aiayn prepare: error: ")
    assert re.search(expected, err), err
    assert set(corpus.iterdir()) == before  # no output directory, no temporary left behind


def test_bad_tsv_line_exits_2(corpus: Path, capsys) -> None:
    (corpus / "train.tsv").write_text("a\tb\n" * 4 + "a\tb\tc\n")
    before = set(corpus.iterdir())
    args = ["prepare", "--tsv", str(corpus / "train.tsv"), "--valid", str(corpus / "valid")]
    assert main([*args, "--vocab-size", "300", "--out", str(corpus / "out"), "--quiet"]) == 2
    assert "train.tsv: line 5: expected 2 tab-separated columns, found 3" in capsys.readouterr().err
    assert set(corpus.iterdir()) == before


def test_nothing_left_after_filtering_is_an_error(corpus: Path) -> None:
    with pytest.raises(DataError, match="no training pairs left"):
        small_prepare(corpus, max_tokens_per_side=1)
    assert not (corpus / "out").exists()


def test_a_one_megabyte_line_is_a_counted_skip(corpus: Path) -> None:
    """The vocabulary trainer, the encoder and the length filter all take a runaway line in
    their stride: it is dropped as too long and counted, its neighbours stay aligned."""
    src, tgt = lines(150, seed=0)
    src[7] = " ".join(WORDS * (1 << 16))[: 1 << 20]  # 1 MiB, one line
    write_split(corpus / "train", src, tgt)
    manifest = small_prepare(corpus)
    train = manifest["splits"]["train"]
    assert train["dropped"]["too_long"] == 1 and train["pairs"] == 149
    src_vocab, tgt_vocab = load_vocabs(corpus / "out")
    ds = BinarizedDataset(corpus / "out", "train")
    assert (src_vocab.decode(ds[7][0]), tgt_vocab.decode(ds[7][1])) == (src[8], tgt[8])
