"""MarianMT's vocabulary (the OPUS-MT models'), one side of it, beside aiayn's `Vocab`.

A MarianMT directory splits text with two sentencepiece models, `source.spm` for sources and
`target.spm` for targets, and numbers the pieces with one table, `vocab.json` (piece -> id),
shared by both sides and by the model's one embedding matrix (sec. 3.4). Its special ids
are not aiayn's: `</s>` is 0, `<unk>` 1, `<pad>` usually the last id, and the decoder
starts from `<pad>`. A `MarianVocab` is one side: that side's sentencepiece model and the
shared table. It has `Vocab`'s interface (encode, decode, piece, size, the special ids,
sha256, save / load), so `Translator`, the server, the attention views and `prepare` use it
as they use a `Vocab`; a checkpoint with `model.vocab_format: marian` holds two of them.

Encoding is `MarianTokenizer`'s: a leading language code `>>xx<<` (the multilingual
OPUS-MT models name the target language so) is one token, the rest is split by the side's
sentencepiece model, and a piece the table lacks is `<unk>`. Decoding drops the special
tokens (`skip_special_tokens`) and joins the pieces with the side's model.

On disk a side is one file: a header line, then JSON holding the table, the special ids and
the sentencepiece model (base64), so that a checkpoint stays self-contained and loads
without pickles. `load_vocab` and `vocab_from_bytes` open either kind of vocabulary.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterable, Sequence
from pathlib import Path

import sentencepiece as spm

from aiayn.data.vocab import Vocab, metadata_path
from aiayn.errors import DataError
from aiayn.jsonfile import read_object

HEADER = b"aiayn-marian-vocab 1\n"
SUFFIX = ".marian"  # a `MarianVocab` file; a `Vocab` is a sentencepiece `.model`
SPECIALS = ("pad_id", "unk_id", "bos_id", "eos_id")


class MarianVocab:
    """One side of a MarianMT vocabulary: a sentencepiece model and the shared id table."""

    def __init__(
        self, spm_bytes: bytes, pieces: Sequence[str], *, pad_id: int, unk_id: int, bos_id: int,
        eos_id: int, source: str = "<bytes>",
    ) -> None:  # fmt: skip
        """`pieces[i]`: the piece of id i (vocab.json inverted); the special ids index it."""
        self.spm_bytes, self.pieces = bytes(spm_bytes), list(pieces)
        self.ids = dict(pad_id=pad_id, unk_id=unk_id, bos_id=bos_id, eos_id=eos_id)
        bad = {k: v for k, v in self.ids.items() if not 0 <= v < len(self.pieces)}
        if bad or len(set(self.pieces)) != len(self.pieces):
            problem = f"special ids {bad} outside" if bad else "a piece twice in"
            raise DataError(f"{source}: {problem} its {len(self.pieces)}-piece table")
        self._index = {piece: i for i, piece in enumerate(self.pieces)}
        self._sp = spm.SentencePieceProcessor()
        try:
            self._sp.LoadFromSerializedProto(self.spm_bytes)
        except (RuntimeError, OSError) as err:
            raise DataError(f"{source}: not a sentencepiece model ({err})") from err
        table = {"pieces": self.pieces, **self.ids}
        # The ids' meaning, one for both sides: what embeddings and shards depend on.
        self.id_space = hashlib.sha256(json.dumps(table).encode("utf-8")).hexdigest()
        encoded = base64.b64encode(self.spm_bytes).decode("ascii")
        self.model_bytes = HEADER + json.dumps({**table, "spm": encoded}).encode("utf-8")
        self.sha256 = hashlib.sha256(self.model_bytes).hexdigest()

    # --- construction -------------------------------------------------------------------
    @classmethod
    def from_bytes(cls, blob: bytes, source: str = "<bytes>") -> MarianVocab:
        """A side from its file's bytes (`model_bytes`)."""
        if not blob.startswith(HEADER):
            raise DataError(f"{source}: not a MarianMT vocabulary written by aiayn")
        try:
            data = json.loads(blob[len(HEADER) :].decode("utf-8"))
            spm_bytes = base64.b64decode(data["spm"], validate=True)
            ids = {name: int(data[name]) for name in SPECIALS}
            pieces = data["pieces"]
        except (ValueError, KeyError, TypeError) as err:
            raise DataError(f"{source}: a corrupt MarianMT vocabulary ({err})") from None
        if not isinstance(pieces, list) or not all(isinstance(p, str) for p in pieces):
            raise DataError(f"{source}: a corrupt MarianMT vocabulary (pieces)")
        return cls(spm_bytes, pieces, **ids, source=source)

    @classmethod
    def load(cls, path: str | Path) -> MarianVocab:
        """Load a side's file; if its metadata sits beside it, check it describes this file."""
        path = Path(path)
        if not path.is_file():
            raise DataError(f"{path}: no such vocabulary file")
        vocab = cls.from_bytes(path.read_bytes(), source=str(path))
        meta_path = metadata_path(path)
        if meta_path.is_file() and read_object(meta_path, DataError).get("sha256") != vocab.sha256:
            raise DataError(f"{meta_path}: describes another file than {path.name}")
        return vocab

    def save(self, path: str | Path, **extra_meta: object) -> Path:
        """Write the side's file and its metadata (`X.json`: size, special ids, sha256)."""
        path = Path(path)
        path.write_bytes(self.model_bytes)
        meta = {"format": "marian", "size": self.size, **self.ids, "sha256": self.sha256,
                **extra_meta}  # fmt: skip
        metadata_path(path).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        return path

    # --- use ----------------------------------------------------------------------------
    size = property(lambda self: len(self.pieces))
    pad_id = property(lambda self: self.ids["pad_id"])
    unk_id = property(lambda self: self.ids["unk_id"])
    bos_id = property(lambda self: self.ids["bos_id"])
    eos_id = property(lambda self: self.ids["eos_id"])

    def __len__(self) -> int:
        return self.size

    def encode(self, text: str) -> list[int]:
        """Ids of `text`, without eos (batching adds it), as `MarianTokenizer` numbers them."""
        return self.encode_batch([text])[0]

    def encode_batch(self, texts: Sequence[str], threads: int = 1) -> list[list[int]]:
        """`encode` over many texts in one sentencepiece call."""
        codes, rests = zip(*map(_language_code, texts)) if texts else ((), ())
        split = self._sp.encode(list(rests), out_type=str, num_threads=threads)
        unk = self.unk_id
        return [[self._index.get(p, unk) for p in [*code, *ps]] for code, ps in zip(codes, split)]

    def decode(self, ids: Sequence[int]) -> str:
        """Text of `ids`; the special tokens decode to nothing (`skip_special_tokens`)."""
        skip = set(self.ids.values())
        pieces = [self.pieces[i] for i in map(int, ids) if i not in skip and i < self.size]
        return self._sp.decode_pieces(pieces).replace("\u2581", " ").strip()

    def piece(self, token_id: int) -> str:
        """The piece of one id (for attention plots, exports and debugging)."""
        return self.pieces[int(token_id)]

    def roundtrip_failures(self, texts: Iterable[str], limit: int = 10) -> list[str]:
        """Texts (up to `limit`) that encode to <unk> or do not decode back unchanged
        (sentencepiece's normalization rewrites some: expect a few)."""
        failures = []
        for text in texts:
            ids = self.encode(text)
            if self.unk_id in ids or self.decode(ids) != text:
                failures.append(text)
                if len(failures) >= limit:
                    break
        return failures

    def __repr__(self) -> str:
        return f"MarianVocab(size={self.size}, sha256={self.sha256[:12]})"


def _language_code(text: str) -> tuple[list[str], str]:
    """`>>fra<< text` -> ([">>fra<<"], " text"), as `MarianTokenizer` splits it."""
    end = text.find("<<") if text.startswith(">>") else -1
    return ([text[: end + 2]], text[end + 2 :]) if end != -1 else ([], text)


AnyVocab = Vocab | MarianVocab


def vocab_options(vocab: AnyVocab) -> dict[str, object]:
    """The `model.*` options a (target) vocabulary fixes: its special ids and its format."""
    kind = "marian" if isinstance(vocab, MarianVocab) else "sentencepiece"
    return dict(vocab_format=kind, pad_id=vocab.pad_id, bos_id=vocab.bos_id, eos_id=vocab.eos_id)


def load_vocab(path: str | Path) -> AnyVocab:
    """A vocabulary file of either kind, by its suffix (`.marian`, else sentencepiece)."""
    return MarianVocab.load(path) if Path(path).suffix == SUFFIX else Vocab.load(path)


def vocab_from_bytes(blob: bytes) -> AnyVocab:
    """A vocabulary of either kind from its file's bytes (`model_bytes`)."""
    return MarianVocab.from_bytes(blob) if blob.startswith(HEADER) else Vocab.from_bytes(blob)
