"""The vocabularies a checkpoint directory carries, read without its model.

A checkpoint (see `aiayn.checkpoint`) is a directory whose metadata, config and vocabulary
files are plain data; only its weights need the model. This module reads the plain part:
the metadata's format check, the config, and the vocabularies checked against it.
`aiayn.checkpoint` opens checkpoints through it, and `prepare --vocab-from` uses it alone,
so that the data stage never imports the stages above it (data -> model -> checkpoints).

    read_meta(path), read_config(path), read_vocabs(path, config)   # each part
    checkpoint_vocabs(path)                                       # all three, in that order
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from aiayn.config import Config, from_dict
from aiayn.data.binarize import MANIFEST
from aiayn.data.marian_vocab import SUFFIX, AnyVocab, load_vocab
from aiayn.errors import AiaynError, CheckpointError
from aiayn.jsonfile import read_object

FORMAT = "aiayn-checkpoint"
VERSION = 1
CONFIG = "config.yaml"
META = "checkpoint.json"
SHARED_VOCAB, SRC_VOCAB, TGT_VOCAB = "vocab.model", "src_vocab.model", "tgt_vocab.model"
MARIAN_VOCABS = f"src_vocab{SUFFIX}", f"tgt_vocab{SUFFIX}"  # `model.vocab_format: marian`


def checkpoint_vocabs(checkpoint: str | Path) -> tuple[AnyVocab, AnyVocab]:
    """The (source, target) vocabularies of a checkpoint directory: `prepare --vocab-from`
    encodes new text with them, so that a model can go on training on it (fine-tuning).
    A CheckpointError says what the directory is if it is no checkpoint."""
    path = Path(checkpoint)
    read_meta(path)
    return read_vocabs(path, read_config(path))


def read_meta(path: Path) -> dict[str, Any]:
    """The checkpoint's metadata (`checkpoint.json`), its format and version checked; the
    error for a directory that is no checkpoint names what it is instead."""
    if not path.is_dir():
        raise CheckpointError(f"{path}: no such checkpoint directory")
    if not (path / META).is_file():
        if (path / MANIFEST).is_file():
            raise CheckpointError(
                f"{path}: is prepared data (made by `aiayn prepare`), not a checkpoint; "
                "checkpoints are under <train.out_dir>/checkpoints/"
            )
        pickles = sorted(p.name for p in path.glob("*") if p.suffix in (".pt", ".pth", ".pkl", ".bin"))
        hint = (
            f" (found {', '.join(pickles)}: aiayn never loads pickle files, which can run code)"
            if pickles
            else ""
        )
        raise CheckpointError(f"{path}: not an aiayn checkpoint, {META} is missing{hint}")
    meta = read_object(path / META, CheckpointError)
    if meta.get("format") != FORMAT:
        raise CheckpointError(f"{path / META}: format is {meta.get('format')!r}, not {FORMAT!r}")
    if not isinstance(meta.get("version", 0), int):
        raise CheckpointError(f"{path / META}: version {meta['version']!r} is not a number")
    if meta.get("version", 0) > VERSION:
        raise CheckpointError(
            f"{path}: checkpoint version {meta['version']} is newer than this aiayn ({VERSION})"
        )
    return meta


def read_config(path: Path) -> Config:
    """The full config the model was built from. A checkpoint config lists every key; one
    without `model.attention_bias` was saved before that key existed, when attention had
    biases."""
    try:
        data = yaml.safe_load((path / CONFIG).read_text("utf-8"))
        if isinstance(data, dict) and isinstance(data.get("model"), dict):
            data["model"].setdefault("attention_bias", True)
        return from_dict(data or {}, where=str(path / CONFIG))
    except FileNotFoundError:
        raise CheckpointError(f"{path}: {CONFIG} is missing") from None
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{path / CONFIG}: unreadable ({err})") from None
    except AiaynError as err:
        raise CheckpointError(f"{path}: bad config: {err}") from None


def vocab_files(config: Config) -> tuple[str, str]:
    """The (source, target) vocabulary file names of a checkpoint of this config."""
    if config.model.vocab_format == "marian":
        return MARIAN_VOCABS
    return (SHARED_VOCAB, SHARED_VOCAB) if config.model.shared_vocab else (SRC_VOCAB, TGT_VOCAB)


def read_vocabs(path: Path, config: Config) -> tuple[AnyVocab, AnyVocab]:
    """(source, target) vocabularies (the same object twice for a shared one), checked
    against the config: their special ids, sizes and (MarianMT's) numbering."""
    m, files = config.model, vocab_files(config)
    loaded: dict[str, AnyVocab] = {}
    for name in dict.fromkeys(files):
        try:
            loaded[name] = load_vocab(path / name)
        except AiaynError as err:
            raise CheckpointError(f"{path}: vocabulary {name} is missing or invalid ({err})") from None
    src_vocab, tgt_vocab = (loaded[name] for name in files)
    ids = (tgt_vocab.pad_id, tgt_vocab.bos_id, tgt_vocab.eos_id)
    if ids != (m.pad_id, m.bos_id, m.eos_id) or src_vocab.eos_id != m.eos_id:
        raise CheckpointError(
            f"{path}: the vocabulary's (pad, bos, eos) ids are {ids}, the config's "
            f"(model.pad_id, model.bos_id, model.eos_id) = {(m.pad_id, m.bos_id, m.eos_id)}"
        )
    if m.vocab_format == "marian" and src_vocab.id_space != tgt_vocab.id_space:
        raise CheckpointError(f"{path}: the two sides of its MarianMT vocabulary number "
                              "their pieces differently")  # fmt: skip
    sizes = (src_vocab.size if not m.shared_vocab else None, tgt_vocab.size)
    if sizes != (m.src_vocab_size, m.vocab_size):
        raise CheckpointError(
            f"{path}: vocabulary sizes {sizes} do not match the config's "
            f"(src_vocab_size, vocab_size) = {(m.src_vocab_size, m.vocab_size)}"
        )
    return src_vocab, tgt_vocab
