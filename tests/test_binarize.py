"""Binarized shards: what is written is what the vocabulary encodes, memory-mapped back."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from aiayn.data import binarize as bz
from aiayn.data.corpus import LengthFilter
from aiayn.data.vocab import Vocab
from aiayn.errors import DataError

WORDS = "the a cat dog sat on mat house tree green red big small runs over with and man".split()


def pairs(n: int, seed: int = 0) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        src = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 15)))
        out.append((src, " ".join(w[::-1] + "en" for w in src.split())))
    return out


@pytest.fixture(scope="module")
def vocab() -> Vocab:
    return Vocab.train([s for p in pairs(300) for s in p], 320, threads=1)


def binarized(tmp: Path, data: list[tuple[str, str]], vocab: Vocab, **kwargs) -> dict:
    counts = bz.binarize_split(data, tmp, "train", vocab, vocab, **kwargs)
    manifest = {
        "format": bz.FORMAT,
        "version": bz.FORMAT_VERSION,
        "dtype": bz.token_dtype(vocab.size).name,
        "vocab": {side: {"file": "vocab.model", "sha256": vocab.sha256} for side in bz.SIDES},
        "splits": {"train": counts},
    }
    bz.write_manifest(tmp, manifest)
    return counts


def test_token_dtype() -> None:
    assert bz.token_dtype(37000) == np.uint16
    assert bz.token_dtype(65536) == np.uint16
    assert bz.token_dtype(65537) == np.int32


def test_dataset_returns_what_the_vocabulary_encodes(tmp_path: Path, vocab: Vocab) -> None:
    data = pairs(50, seed=1)
    counts = binarized(tmp_path, data, vocab, chunk_size=7)
    ds = bz.BinarizedDataset(tmp_path, "train")
    assert len(ds) == counts["pairs"] == 50
    for i, (src, tgt) in enumerate(data):
        got_src, got_tgt = ds[i]
        assert got_src.dtype == np.int64 and got_src.tolist() == vocab.encode(src)
        assert got_tgt.tolist() == vocab.encode(tgt)
    assert ds.src_lengths.tolist() == [len(vocab.encode(s)) for s, _ in data]
    assert ds.tgt_lengths.tolist() == [len(vocab.encode(t)) for _, t in data]
    assert counts["src_tokens"] == int(ds.src_lengths.sum())
    assert counts["tgt_max_len"] == int(ds.tgt_lengths.max())
    assert ds[-1][0].tolist() == vocab.encode(data[-1][0])
    with pytest.raises(IndexError):
        ds[50]


def test_file_layout_is_flat_tokens_and_offsets(tmp_path: Path, vocab: Vocab) -> None:
    data = [("the cat", "eht tacen"), ("a dog runs", "a god snur")]
    binarized(tmp_path, data, vocab)
    tokens = np.fromfile(tmp_path / "train.src.bin", dtype=np.uint16)
    offsets = np.fromfile(tmp_path / "train.src.idx", dtype=np.int64)
    expected = [vocab.encode(s) for s, _ in data]
    assert offsets.tolist() == [0, len(expected[0]), len(expected[0]) + len(expected[1])]
    assert tokens.tolist() == expected[0] + expected[1]


def test_worker_pool_writes_the_same_bytes(tmp_path: Path, vocab: Vocab) -> None:
    data = pairs(200, seed=2)
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir(), two.mkdir()
    bz.binarize_split(data, one, "train", vocab, vocab, workers=1, chunk_size=16)
    bz.binarize_split(data, two, "train", vocab, vocab, workers=2, chunk_size=16)
    for name in ("train.src.bin", "train.src.idx", "train.tgt.bin", "train.tgt.idx"):
        assert (one / name).read_bytes() == (two / name).read_bytes(), name


def test_encoding_reads_only_a_few_chunks_ahead(vocab: Vocab) -> None:
    """Bounded memory: the reader is never more than 4 * workers chunks ahead of the writer."""
    pulled, lead = [0], []

    def chunks():
        for chunk in bz._chunks(pairs(400, seed=3), 10):
            pulled[0] += 1
            yield chunk

    encoder = bz._ChunkEncoder(vocab, vocab, LengthFilter(), np.dtype(np.uint16))
    for done, _ in enumerate(bz._encode_stream(chunks(), encoder, workers=2), start=1):
        lead.append(pulled[0] - done)
    assert len(lead) == 40 and max(lead) <= 4 * 2


def test_length_filter_counts_what_it_removes(tmp_path: Path, vocab: Vocab) -> None:
    data = pairs(100, seed=4)
    limit = LengthFilter(max_tokens=12, max_ratio=1.3)
    counts = binarized(tmp_path, data, vocab, length_filter=limit)
    reasons = [limit.reason(len(vocab.encode(s)), len(vocab.encode(t))) for s, t in data]
    assert counts["dropped"].get("too_long", 0) == reasons.count("too_long") > 0
    assert counts["dropped"].get("ratio", 0) == reasons.count("ratio")
    assert counts["pairs"] == reasons.count(None) == len(bz.BinarizedDataset(tmp_path, "train"))


def test_shards_refuse_a_different_vocabulary(tmp_path: Path, vocab: Vocab) -> None:
    binarized(tmp_path, pairs(10), vocab)
    bz.check_vocab(tmp_path, vocab)
    other = Vocab.train([s for p in pairs(300, seed=7) for s in p], 300, threads=1)
    with pytest.raises(DataError, match="built with a different vocabulary"):
        bz.check_vocab(tmp_path, other)


def test_ids_beyond_the_vocabulary_are_found_before_training(tmp_path: Path, vocab: Vocab) -> None:
    binarized(tmp_path, pairs(10), vocab)
    data = bz.BinarizedDataset(tmp_path, "train")
    data.check_ids(vocab.size, vocab.size)
    tokens = np.memmap(tmp_path / "train.tgt.bin", dtype=data._tgt.dtype, mode="r+")
    tokens[3] = vocab.size + 5  # same size, corrupt content
    tokens.flush()
    with pytest.raises(DataError, match=rf"train\.tgt\.bin: token id {vocab.size + 5} in a"):
        bz.BinarizedDataset(tmp_path, "train").check_ids(vocab.size, vocab.size)


def test_damaged_directories_are_reported(tmp_path: Path, vocab: Vocab) -> None:
    with pytest.raises(DataError, match="manifest.json: no such file"):
        bz.BinarizedDataset(tmp_path, "train")
    binarized(tmp_path, pairs(10), vocab)
    with pytest.raises(DataError, match="no split 'valid'"):
        bz.BinarizedDataset(tmp_path, "valid")
    with open(tmp_path / "train.tgt.bin", "ab") as handle:
        handle.write(b"\0\0")
    with pytest.raises(DataError, match=r"train\.tgt\.bin: \d+ bytes, expected"):
        bz.BinarizedDataset(tmp_path, "train")
    idx = tmp_path / "train.src.idx"
    for damaged in (b"", idx.read_bytes()[:-3]):  # empty, or cut inside an offset
        idx.write_bytes(damaged)
        with pytest.raises(DataError, match=r"train\.src\.idx: \d+ bytes, not an index"):
            bz.BinarizedDataset(tmp_path, "train")
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    manifest["version"] = 99
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DataError, match="version 99"):
        bz.load_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text("[1, 2]")
    with pytest.raises(DataError, match="manifest.json: not a JSON object"):
        bz.load_manifest(tmp_path)
