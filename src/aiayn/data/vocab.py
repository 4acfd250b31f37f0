"""Subword vocabulary: byte-pair encoding with sentencepiece (sec. 5.1).

The paper encodes WMT14 En-De with "byte-pair encoding, which has a shared source-target
vocabulary of about 37000 tokens" and En-Fr with a 32000 word-piece vocabulary. We train
one sentencepiece BPE model on both languages' text (joint); separate source and target
models are an option (then the model cannot tie its embeddings).

Choices that make the vocabulary safe to build on:
- Fixed special ids, pad=0, unk=1, bos=2, eos=3, checked whenever a model is loaded, so
  batching and the model can rely on them.
- Lossless: normalization `identity` and `remove_extra_whitespaces=False` keep text as is
  (the default NFKC rules rewrite e.g. "ﬁ" to "fi" and collapse spaces), and
  `byte_fallback=True` spells characters unseen in training as UTF-8 bytes instead of
  <unk>. So `decode(encode(s)) == s` for any str but one: sentencepiece writes spaces as
  "\u2581" (LOWER ONE EIGHTH BLOCK), and that character in the input decodes as a space,
  with no escape for it. `roundtrip_failures` reports such lines; `aiayn prepare` warns
  with their count among the first validation lines.
- Bounded memory on large corpora: training text is streamed to a temporary file and
  sentencepiece samples `sample_sentences` lines from it (`input_sentence_size` with
  `shuffle_input_sentence`), so a 9M-sentence corpus costs what the sample costs.
- Identity: `sha256` hashes the model file's bytes; shards and checkpoints record it and
  refuse a different vocabulary. A `Vocab` loads from a path or from the bytes, so a
  checkpoint directory can carry its own copy.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import sentencepiece as spm

from aiayn.errors import DataError
from aiayn.jsonfile import read_object

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3


class Vocab:
    """A trained sentencepiece model with fixed special ids; encode/decode text losslessly."""

    def __init__(self, model_bytes: bytes, source: str = "<bytes>") -> None:
        self.model_bytes = bytes(model_bytes)
        self.sha256 = hashlib.sha256(self.model_bytes).hexdigest()
        self.id_space = self.sha256  # what its ids mean: its pieces (`MarianVocab.id_space`)
        self._sp = spm.SentencePieceProcessor()
        try:
            self._sp.LoadFromSerializedProto(self.model_bytes)
        except (RuntimeError, OSError) as err:
            raise DataError(f"{source}: not a sentencepiece model ({err})") from err
        found = (self._sp.pad_id(), self._sp.unk_id(), self._sp.bos_id(), self._sp.eos_id())
        if found != (PAD_ID, UNK_ID, BOS_ID, EOS_ID):
            raise DataError(
                f"{source}: special ids (pad, unk, bos, eos) are {found}, expected "
                f"{(PAD_ID, UNK_ID, BOS_ID, EOS_ID)}; train it with `Vocab.train`"
            )

    # --- construction -------------------------------------------------------------------
    @classmethod
    def from_bytes(cls, model_bytes: bytes) -> Vocab:
        """A vocabulary from a model file's bytes (e.g. the copy inside a checkpoint)."""
        return cls(model_bytes)

    @classmethod
    def load(cls, path: str | Path) -> Vocab:
        """Load `X.model`; if `X.json` metadata sits beside it, check it describes this model."""
        path = Path(path)
        if not path.is_file():
            raise DataError(f"{path}: no such vocabulary file")
        vocab = cls(path.read_bytes(), source=str(path))
        meta_path = metadata_path(path)
        if meta_path.is_file():
            recorded = read_object(meta_path, DataError).get("sha256")
            if recorded != vocab.sha256:
                raise DataError(
                    f"{meta_path}: records sha256 {recorded} but {path.name} hashes to "
                    f"{vocab.sha256}; the model file was replaced"
                )
        return vocab

    @classmethod
    def train(
        cls,
        sentences: Iterable[str],
        vocab_size: int,
        *,
        sample_sentences: int = 2_000_000,
        seed: int = 1,
        threads: int = 2,
        character_coverage: float = 0.9995,
        split_by_script: bool = True,
    ) -> Vocab:
        """Train a BPE model on `sentences` (streamed to a temporary file, then sampled).

        `sample_sentences` bounds memory on large corpora; `seed` makes the sample (and so the
        model) reproducible. `split_by_script` is sentencepiece's rule that no piece mixes
        letters with other characters; false lets one piece be "(NP", a linearized tree's
        bracket (`aiayn.parsing.linearize`). Raises DataError when the text is too small for
        `vocab_size`.
        """
        with tempfile.TemporaryDirectory(prefix="aiayn-vocab-") as tmp:
            text_path = Path(tmp) / "train.txt"
            n_lines = write_lines(sentences, text_path)
            if n_lines == 0:
                raise DataError("no training text for the vocabulary (every line was empty)")
            return cls._train_file(text_path, vocab_size, sample_sentences, seed, threads,
                                   character_coverage, split_by_script)  # fmt: skip

    @classmethod
    def _train_file(
        cls,
        text_path: Path,
        vocab_size: int,
        sample_sentences: int,
        seed: int,
        threads: int,
        character_coverage: float,
        split_by_script: bool,
    ) -> Vocab:
        model = io.BytesIO()
        spm.set_random_generator_seed(seed)  # sentencepiece's sampler has no per-call seed
        try:
            spm.SentencePieceTrainer.train(
                # An iterator, not `input=path`: the model would record the temporary path,
                # and two identical trainings would hash differently.
                sentence_iterator=_read_back(text_path),
                model_writer=model,
                vocab_size=vocab_size,
                model_type="bpe",
                pad_id=PAD_ID,
                unk_id=UNK_ID,
                bos_id=BOS_ID,
                eos_id=EOS_ID,
                normalization_rule_name="identity",
                remove_extra_whitespaces=False,
                allow_whitespace_only_pieces=True,
                byte_fallback=True,
                character_coverage=character_coverage,
                split_by_unicode_script=split_by_script,
                input_sentence_size=sample_sentences,
                shuffle_input_sentence=True,
                num_threads=max(1, threads),
                minloglevel=2,
            )
        except RuntimeError as err:
            # "INTERNAL: src/trainer_interface.cc(744) [check] Vocabulary size too high ...":
            # the user's part is after sentencepiece's source location and failed check.
            reason = re.sub(r"^[A-Z_]+: \S+\(\d+\) \[.*?\] ?", "", str(err)) or str(err)
            raise DataError(f"cannot train a {vocab_size}-token vocabulary: {reason}") from err
        return cls(model.getvalue())

    def save(self, path: str | Path, **extra_meta: object) -> Path:
        """Write `X.model` and its metadata `X.json` (special ids, size, sha256, `extra_meta`)."""
        path = Path(path)
        path.write_bytes(self.model_bytes)
        meta = {
            "format": "sentencepiece",
            "model_type": "bpe",
            "normalization": "identity",
            "byte_fallback": True,
            "size": self.size,
            "pad_id": PAD_ID,
            "unk_id": UNK_ID,
            "bos_id": BOS_ID,
            "eos_id": EOS_ID,
            "sha256": self.sha256,
            **extra_meta,
        }
        metadata_path(path).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        return path

    # --- use ----------------------------------------------------------------------------
    @property
    def size(self) -> int:
        return self._sp.get_piece_size()

    def __len__(self) -> int:
        return self.size

    spm_bytes = property(lambda self: self.model_bytes)  # the sentencepiece model, as saved
    pad_id = property(lambda self: PAD_ID)
    unk_id = property(lambda self: UNK_ID)
    bos_id = property(lambda self: BOS_ID)
    eos_id = property(lambda self: EOS_ID)

    def encode(self, text: str) -> list[int]:
        """Subword ids of `text`, without bos/eos (batching adds those)."""
        return self._sp.encode(text)

    def encode_batch(self, texts: Sequence[str], threads: int = 1) -> list[list[int]]:
        """`encode` over many texts (sentencepiece's own threads if `threads` > 1). With one
        thread, text by text: sentencepiece's batch call starts a thread pool even for one
        thread, which costs more than encoding a sentence, the more so on a busy CPU."""
        if threads <= 1:
            return [self._sp.encode(text) for text in texts]
        return self._sp.encode(list(texts), num_threads=threads)

    def decode(self, ids: Sequence[int]) -> str:
        """Text of `ids`; pad, bos and eos are control symbols and decode to nothing."""
        return self._sp.decode([int(i) for i in ids])

    def surfaces(self, ids: Sequence[int]) -> list[str]:
        """The text each id contributes to `decode(ids)`, in order (they concatenate to it):
        "▁" as a space where it is one; a character spelled as bytes belongs to its last
        byte, the others give ""; control symbols give "". Word alignments need it."""
        return [p.surface for p in self._sp.decode_ids_as_proto([int(i) for i in ids]).pieces]

    def piece(self, token_id: int) -> str:
        """The subword string of one id (for attention plots and debugging)."""
        return self._sp.id_to_piece(int(token_id))

    def roundtrip_failures(self, texts: Iterable[str], limit: int = 10) -> list[str]:
        """Texts (up to `limit`) that encode to <unk> or do not decode back unchanged."""
        failures = []
        for text in texts:
            ids = self.encode(text)
            if UNK_ID in ids or self.decode(ids) != text:
                failures.append(text)
                if len(failures) >= limit:
                    break
        return failures

    def __repr__(self) -> str:
        return f"Vocab(size={self.size}, sha256={self.sha256[:12]})"


def metadata_path(model_path: str | Path) -> Path:
    """`vocab.model` -> `vocab.json`: the metadata file that sits beside a model."""
    return Path(model_path).with_suffix(".json")


def write_lines(lines: Iterable[str], path: str | Path) -> int:
    """Stream non-empty `lines` to a UTF-8 file, one per line; return how many were written."""
    count = 0
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        for line in lines:
            if line.strip():
                handle.write(line.replace("\n", " "))
                handle.write("\n")
                count += 1
    return count


def _read_back(path: Path) -> Iterator[str]:
    with open(path, encoding="utf-8", newline="\n") as handle:
        for line in handle:
            yield line[:-1]


def cpu_threads(requested: int | None = None) -> int:
    """Threads/workers to use: `requested`, else every core this process may use."""
    if requested:
        return requested
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
