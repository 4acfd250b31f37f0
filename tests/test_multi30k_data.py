"""On real data (Multi30k, when the shared copy is present): the vocabulary is lossless on
every validation sentence, and token batches waste little on padding."""

from __future__ import annotations

import gzip
from dataclasses import replace
from pathlib import Path

import pytest

from aiayn.data.batching import TokenBatchSampler
from aiayn.data.binarize import BinarizedDataset, load_vocabs
from aiayn.data.vocab import UNK_ID
from aiayn.recipes.multi30k import OPTIONS, prepare_multi30k

MULTI30K = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "multi30k"

pytestmark = pytest.mark.skipif(
    not (MULTI30K / "train.en.gz").is_file(), reason=f"Multi30k not found at {MULTI30K}"
)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("multi30k") / "prepared"
    # 8000 joint pieces as the recipe; a 20k-sentence sample of the 58k keeps this quick.
    # The recipe's options (its corpus as published: no cleaning), sampled and quiet.
    options = replace(OPTIONS, vocab_sample_sentences=20_000, workers=2, quiet=True)
    prepare_multi30k(MULTI30K, out, options)
    return out


def read_gz(path: Path) -> list[str]:
    return gzip.decompress(path.read_bytes()).decode("utf-8").split("\n")[:-1]


def test_every_validation_sentence_round_trips(prepared: Path) -> None:
    vocab, _ = load_vocabs(prepared)
    assert vocab.size == 8000
    for lang in ("en", "de"):
        sentences = read_gz(MULTI30K / f"val.{lang}.gz")
        assert len(sentences) == 1014
        for sentence in sentences:
            ids = vocab.encode(sentence)
            assert UNK_ID not in ids and vocab.decode(ids) == sentence


def test_validation_shards_hold_the_same_sentences(prepared: Path) -> None:
    vocab, _ = load_vocabs(prepared)
    valid = BinarizedDataset(prepared, "valid")
    references = read_gz(MULTI30K / "val.de.gz")
    assert [vocab.decode(valid[i][1]) for i in range(len(valid))] == references


def test_padding_below_ten_percent_at_4096_tokens(prepared: Path) -> None:
    train = BinarizedDataset(prepared, "train")
    assert len(train) == 29_000
    sampler = TokenBatchSampler(train.src_lengths, train.tgt_lengths, max_tokens=4096, seed=1)
    stats = sampler.padding_stats()
    padding = 1 - stats["real_tokens"] / stats["padded_tokens"]
    assert padding < 0.10, f"{padding:.1%} of the batch tokens are padding"
