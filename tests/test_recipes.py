"""Recipes, offline: everything after the download runs on small files the tests write,
with fakes standing in for HuggingFace `datasets`, sacrebleu's test sets and the web."""

from __future__ import annotations

import dataclasses
import gzip
import json
import random
import shutil
import sys
from pathlib import Path

import pytest

from aiayn.cli import main
from aiayn.data.binarize import BinarizedDataset, load_vocabs
from aiayn.data.prepare_options import PrepareOptions
from aiayn.errors import AiaynError, DataError
from aiayn.recipes import multi30k, wmt14

WORDS = "the a cat dog sat on mat house tree green red big small runs over with and man".split()


def rows(n: int, tgt: str = "de", seed: int = 0) -> list[dict]:
    """What HuggingFace's `wmt14` yields: {"translation": {"en": ..., "de": ...}}."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        en = " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 12)))
        out.append({"translation": {"en": en, tgt: " ".join(w[::-1] + "en" for w in en.split())}})
    return out


def write_text(path: Path, lines: list[str], gz: bool = False) -> None:
    data = "".join(line + "\n" for line in lines).encode()
    path.write_bytes(gzip.compress(data) if gz else data)


def fake_test_sets(tmp: Path):
    """Stands in for sacrebleu: (test_set, langpair) -> (source file, [reference files])."""
    calls = []

    def files(test_set: str, langpair: str) -> tuple[str, list[str]]:
        calls.append((test_set, langpair))
        src, tgt = langpair.split("-")
        pairs = rows(12, tgt=tgt, seed=len(calls))
        stem = tmp / test_set.replace("/", "_")
        write_text(Path(f"{stem}.{src}"), [r["translation"][src] for r in pairs])
        write_text(Path(f"{stem}.{tgt}"), [r["translation"][tgt] for r in pairs])
        return f"{stem}.{src}", [f"{stem}.{tgt}"]

    files.calls = calls  # type: ignore[attr-defined]
    return files


def test_translation_rows_become_aligned_text(tmp_path: Path) -> None:
    data = rows(5) + [{"translation": {"en": "two\nlines\tand a tab", "de": "zwei\r\nZeilen"}}]
    assert wmt14.write_translation_rows(data, "en", "de", tmp_path / "train") == 6
    en = (tmp_path / "train.en").read_text().split("\n")
    de = (tmp_path / "train.de").read_text().split("\n")
    assert len(en) == len(de) == 7  # 6 lines and the final newline
    assert (en[5], de[5]) == ("two lines and a tab", "zwei Zeilen")
    assert not list(tmp_path.glob(".*"))  # no partial files left


def test_wmt14_fetch_then_prepare_offline(tmp_path: Path) -> None:
    task = wmt14.task("wmt14-en-de")
    assert (task.src, task.tgt, task.vocab_size, task.hf_config) == ("en", "de", 37000, "de-en")
    files = fake_test_sets(tmp_path)
    raw = wmt14.fetch(task, tmp_path / "raw", train_rows=rows(150), files=files)
    assert files.calls == [("wmt13", "en-de"), ("wmt14/full", "en-de")]
    out = tmp_path / "out"
    options = dataclasses.replace(task.options, vocab_size=300, workers=1, quiet=True)
    manifest = wmt14.prepare_from_raw(task, raw, out, options)
    assert manifest["filters"]["max_tokens_per_side"] == 250
    assert manifest["filters"]["max_len_ratio"] == 1.5
    assert set(manifest["splits"]) == {"train", "valid", "test"}
    assert manifest["splits"]["test"]["pairs"] == 12
    assert manifest["vocab"]["joint"]
    wmt14.fetch(task, raw, train_rows=[], files=files)  # everything is there: fetches nothing
    assert len(files.calls) == 2


def test_en_fr_task_and_unknown_task() -> None:
    task = wmt14.task("en-fr")
    assert (task.tgt, task.vocab_size, task.hf_config) == ("fr", 32000, "fr-en")
    assert (task.valid_set, task.test_set) == ("wmt13", "wmt14/full")
    with pytest.raises(DataError, match="unknown WMT14 task 'en-ru'"):
        wmt14.task("en-ru")


def test_missing_datasets_package_is_a_clear_error(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)  # makes `import datasets` fail
    with pytest.raises(AiaynError, match=r"pip install 'aiayn\[download\]'"):
        wmt14.hf_training_rows(wmt14.task("en-de"))


def test_cli_wmt14_from_raw_text(tmp_path: Path, capsys) -> None:
    task, train = wmt14.task("en-fr"), rows(150, tgt="fr")
    raw = wmt14.fetch(task, tmp_path / "raw", train_rows=train, files=fake_test_sets(tmp_path))
    args = ["prepare", "wmt14-en-fr", "--from", str(raw), "--out", str(tmp_path / "out")]
    assert main([*args, "--vocab-size", "300", "--workers", "1", "--quiet"]) == 0
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert (manifest["src_lang"], manifest["tgt_lang"]) == ("en", "fr")
    assert main([*args, "--src", "de", "--force"]) == 2
    assert "fixes the languages" in capsys.readouterr().err
    # the recipe's own filter and vocabulary, with what the command line changes
    assert main([*args, "--vocab-size", "300", "--max-tokens-per-side", "40", "--seed", "5",
                 "--workers", "1", "--quiet", "--force"]) == 0  # fmt: skip
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["filters"]["max_tokens_per_side"] == 40
    assert manifest["filters"]["max_len_ratio"] == wmt14.MAX_LEN_RATIO
    assert (manifest["vocab"]["src"]["size"], manifest["vocab"]["seed"]) == (300, 5)


def write_multi30k(raw: Path) -> Path:
    raw.mkdir(parents=True, exist_ok=True)
    for stem, n in (("train", 150), ("val", 20), ("test_2016_flickr", 10)):
        pairs = rows(n, seed=n)
        for lang in ("en", "de"):
            write_text(raw / f"{stem}.{lang}.gz", [r["translation"][lang] for r in pairs], gz=True)
    return raw


def test_multi30k_from_local_files(tmp_path: Path) -> None:
    raw = write_multi30k(tmp_path / "raw")
    args = ["prepare", "multi30k", "--from", str(raw), "--out", str(tmp_path / "out")]
    assert main([*args, "--vocab-size", "300", "--workers", "1", "--quiet"]) == 0
    assert len(BinarizedDataset(tmp_path / "out", "test")) == 10
    src_vocab, _ = load_vocabs(tmp_path / "out")
    first_val = gzip.decompress((raw / "val.en.gz").read_bytes()).decode().split("\n")[0]
    assert src_vocab.decode(BinarizedDataset(tmp_path / "out", "valid")[0][0]) == first_val


def test_multi30k_reversed_direction_and_missing_files(tmp_path: Path) -> None:
    raw = write_multi30k(tmp_path / "raw")
    options = PrepareOptions(src="de", tgt="en", vocab_size=300, workers=1, quiet=True)
    manifest = multi30k.prepare_multi30k(raw, tmp_path / "out", options)
    assert (manifest["src_lang"], manifest["tgt_lang"]) == ("de", "en")
    (raw / "val.de.gz").unlink()
    with pytest.raises(DataError, match=r"missing Multi30k files: val\.de\.gz"):
        multi30k.raw_prefixes(raw)


def test_multi30k_download_writes_each_file_whole(tmp_path: Path, monkeypatch) -> None:
    source = write_multi30k(tmp_path / "server")
    fetched = []

    def fake_urlretrieve(url: str, dest: Path) -> None:
        fetched.append(url.rsplit("/", 1)[-1])
        shutil.copyfile(source / url.rsplit("/", 1)[-1], dest)

    monkeypatch.setattr(multi30k.urllib.request, "urlretrieve", fake_urlretrieve)
    raw = multi30k.download(tmp_path / "raw")
    assert sorted(fetched) == sorted(p.name for p in source.iterdir())
    assert multi30k.raw_prefixes(raw)["test"] == raw / "test_2016_flickr"
    multi30k.download(tmp_path / "raw")  # already there: nothing fetched again
    assert len(fetched) == 6

    def offline(url: str, dest: Path) -> None:
        Path(dest).write_bytes(b"partial")
        raise OSError("network unreachable")

    monkeypatch.setattr(multi30k.urllib.request, "urlretrieve", offline)
    with pytest.raises(DataError, match="cannot download .*train.en.gz: network unreachable"):
        multi30k.download(tmp_path / "elsewhere")
    assert list((tmp_path / "elsewhere").iterdir()) == []
