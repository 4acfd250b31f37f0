"""The BPE vocabulary: fixed special ids, lossless round trips, identity by hash."""

from __future__ import annotations

import hashlib
import io
import json
import random
from pathlib import Path

import pytest
import sentencepiece as spm
from hypothesis import given, settings
from hypothesis import strategies as st

from aiayn.data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Vocab, metadata_path
from aiayn.errors import DataError

WORDS = "the a cat dog sat on mat house tree green red big small runs over with and man".split()


def sentences(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))) for _ in range(n)]


@pytest.fixture(scope="module")
def vocab() -> Vocab:
    return Vocab.train(sentences(300), 300, threads=1)


def test_special_ids_and_size(vocab: Vocab) -> None:
    assert (vocab.pad_id, vocab.unk_id, vocab.bos_id, vocab.eos_id) == (0, 1, 2, 3)
    assert (PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2, 3)
    assert vocab.size == len(vocab) == 300
    assert vocab.piece(PAD_ID) == "<pad>" and vocab.piece(EOS_ID) == "</s>"


@pytest.mark.parametrize(
    "text",
    [
        "the cat sat on the mat",
        "  two leading, two inner  spaces and a trailing one ",
        "Ω≈ç√ 日本語 🙂 tab\there, NBSP\u00a0, ligature ﬁ, combining e\u0301",
        "",
        "UPPER case Words never seen 12345",
    ],
)
def test_round_trip_is_exact_without_unk(vocab: Vocab, text: str) -> None:
    ids = vocab.encode(text)
    assert vocab.decode(ids) == text
    assert UNK_ID not in ids


SPACE_MARK = "\u2581"  # sentencepiece's own spelling of a space


@settings(max_examples=200, deadline=None)
@given(
    st.text(
        alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters=SPACE_MARK),
        max_size=40,
    )
)
def test_round_trip_holds_for_any_text(vocab: Vocab, text: str) -> None:
    """identity normalization + byte fallback: no input is altered or mapped to <unk>."""
    assert vocab.roundtrip_failures([text]) == []


def test_the_space_mark_is_the_one_character_that_does_not_round_trip(vocab: Vocab) -> None:
    # Documented in aiayn.data.vocab: it decodes as a space, and the check reports it.
    text = f"a{SPACE_MARK}b"
    assert vocab.decode(vocab.encode(text)) == "a b"
    assert vocab.roundtrip_failures(["a b", text]) == [text]


def test_decode_skips_control_symbols(vocab: Vocab) -> None:
    ids = vocab.encode("a dog")
    assert vocab.decode([BOS_ID, *ids, EOS_ID, PAD_ID, PAD_ID]) == "a dog"


def test_encode_batch_matches_encode(vocab: Vocab) -> None:
    texts = sentences(20, seed=5)
    assert vocab.encode_batch(texts) == [vocab.encode(t) for t in texts]
    assert vocab.encode_batch(texts, threads=2) == [vocab.encode(t) for t in texts]


def test_save_load_and_bytes_agree(vocab: Vocab, tmp_path: Path) -> None:
    path = vocab.save(tmp_path / "vocab.model", languages=["en", "de"])
    meta = json.loads(metadata_path(path).read_text())
    assert meta["sha256"] == vocab.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert (meta["pad_id"], meta["unk_id"], meta["bos_id"], meta["eos_id"]) == (0, 1, 2, 3)
    assert meta["languages"] == ["en", "de"] and meta["size"] == 300
    loaded, from_bytes = Vocab.load(path), Vocab.from_bytes(path.read_bytes())
    text = "the big dog runs"
    assert loaded.sha256 == from_bytes.sha256 == vocab.sha256
    assert loaded.encode(text) == from_bytes.encode(text) == vocab.encode(text)


def test_replaced_model_file_is_detected(vocab: Vocab, tmp_path: Path) -> None:
    path = vocab.save(tmp_path / "vocab.model")
    other = Vocab.train(sentences(300, seed=9), 280, threads=1)
    path.write_bytes(other.model_bytes)
    with pytest.raises(DataError, match="the model file was replaced"):
        Vocab.load(path)
    path.write_bytes(vocab.model_bytes)
    meta = tmp_path / "vocab.json"
    damages = [('{"sha256": "ab', "unreadable or not valid JSON"), ("[1]", "not a JSON object")]
    for damaged, message in damages:
        meta.write_text(damaged)  # truncated, or not an object: named, not a traceback
        with pytest.raises(DataError, match=f"vocab.json: {message}"):
            Vocab.load(path)


def test_same_seed_same_model_even_when_sampling() -> None:
    text = sentences(400, seed=3)
    first = Vocab.train(text, 290, sample_sentences=200, seed=4, threads=1)
    again = Vocab.train(text, 290, sample_sentences=200, seed=4, threads=1)
    assert first.sha256 == again.sha256


def test_foreign_models_are_refused(tmp_path: Path) -> None:
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences(200)), model_writer=model, vocab_size=30, minloglevel=2
    )  # sentencepiece's defaults: unk=0, bos=1, eos=2, no pad
    with pytest.raises(DataError, match=r"special ids \(pad, unk, bos, eos\) are"):
        Vocab.from_bytes(model.getvalue())
    with pytest.raises(DataError, match="not a sentencepiece model"):
        Vocab.from_bytes(b"not a model")
    with pytest.raises(DataError, match="no such vocabulary file"):
        Vocab.load(tmp_path / "missing.model")


def test_too_large_a_vocabulary_is_a_clear_error() -> None:
    # sentencepiece's own words, without its source location and failed check
    with pytest.raises(DataError, match=r"cannot train a 5000-token vocabulary: Vocabulary "
                       r"size too high \(5000\)\. Please set it to a value <= \d+\.$"):  # fmt: skip
        Vocab.train(sentences(50), 5000, threads=1)
    with pytest.raises(DataError, match="no training text"):
        Vocab.train(["", "  "], 300)
