"""Checkpoints: self-contained directories, written atomically, loaded without pickles.

A checkpoint directory holds everything `aiayn translate` needs and nothing it must trust:

    model.safetensors          weights (tied matrices stored once)
    config.yaml                the full `Config` the model was built from
    vocab.model (+ .json)      the joint sentencepiece vocabulary, or
    src_vocab.model, tgt_vocab.model (+ .json) for separate vocabularies, or
    src_vocab.marian, tgt_vocab.marian (+ .json) a MarianMT vocabulary's two sides
    checkpoint.json            format tag, step, creation time, what it was averaged from
    trainer_state.json         (training checkpoints) scalars, RNG states, data position
    trainer_state.safetensors  (training checkpoints) optimizer tensors

It is written under a temporary name in the same parent directory and renamed into place,
so a crash never leaves a half-written checkpoint under the final name. Weights load only
through safetensors and configs through `yaml.safe_load`: a pickle in the directory is
never opened.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from aiayn.config import Config, from_dict, to_dict
from aiayn.data.binarize import MANIFEST
from aiayn.data.marian_vocab import SUFFIX, MarianVocab, load_vocab
from aiayn.data.vocab import Vocab
from aiayn.errors import AiaynError, CheckpointError
from aiayn.jsonfile import read_object
from aiayn.model.transformer import Transformer

FORMAT = "aiayn-checkpoint"
VERSION = 1
WEIGHTS = "model.safetensors"
CONFIG = "config.yaml"
META = "checkpoint.json"
SHARED_VOCAB, SRC_VOCAB, TGT_VOCAB = "vocab.model", "src_vocab.model", "tgt_vocab.model"
MARIAN_VOCABS = f"src_vocab{SUFFIX}", f"tgt_vocab{SUFFIX}"  # `model.vocab_format: marian`
TRAINER_JSON, TRAINER_TENSORS = "trainer_state.json", "trainer_state.safetensors"


@dataclass
class Checkpoint:
    """A loaded checkpoint: the model (eval mode), its config, vocabularies and metadata."""

    model: Transformer
    config: Config
    src_vocab: Vocab
    tgt_vocab: Vocab
    meta: dict[str, Any] = field(default_factory=dict)


def model_weights(model: Transformer) -> dict[str, torch.Tensor]:
    """The state dict with each tied matrix once (under its first name), contiguous, on CPU."""
    seen: set[int] = set()
    weights = {}
    for name, tensor in model.state_dict().items():
        if tensor.data_ptr() in seen:  # a tied matrix under its second name
            continue
        seen.add(tensor.data_ptr())
        weights[name] = tensor.detach().to("cpu").contiguous()
    return weights


def save_checkpoint(
    path: str | Path,
    model: Transformer,
    config: Config,
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    meta: dict[str, Any] | None = None,
    trainer_state: dict[str, Any] | None = None,
    trainer_tensors: dict[str, torch.Tensor] | None = None,
) -> Path:
    """Write a checkpoint directory atomically; refuses non-finite weights."""
    weights = model_weights(model)
    return save_weights_checkpoint(
        path, weights, config, src_vocab, tgt_vocab, meta, trainer_state, trainer_tensors
    )


def save_weights_checkpoint(
    path: str | Path,
    weights: dict[str, torch.Tensor],
    config: Config,
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    meta: dict[str, Any] | None = None,
    trainer_state: dict[str, Any] | None = None,
    trainer_tensors: dict[str, torch.Tensor] | None = None,
) -> Path:
    """`save_checkpoint` from a weights dict (e.g. an average of several checkpoints).
    An existing `path` is replaced only if it is a checkpoint or an empty directory."""
    bad = _non_finite(weights)
    if bad:
        raise CheckpointError(f"refusing to save non-finite weights in {', '.join(bad[:5])}")
    path = Path(path)
    _check_replaceable(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    # mkdtemp makes the directory private (0700), and safetensors its files (0600); a
    # checkpoint gets the modes the umask gives any file the user writes, so that a server
    # running as another user can load it.
    umask = _umask()
    os.chmod(tmp, 0o777 & ~umask)
    try:
        save_file(weights, str(tmp / WEIGHTS), metadata={"format": FORMAT})
        (tmp / CONFIG).write_text(yaml.safe_dump(to_dict(config), sort_keys=False), "utf-8")
        for name, vocab in zip(vocab_files(config), (src_vocab, tgt_vocab)):
            if name.endswith(SUFFIX) != isinstance(vocab, MarianVocab):
                raise CheckpointError(f"model.vocab_format={config.model.vocab_format} and "
                                      f"a {type(vocab).__name__}: not a checkpoint")  # fmt: skip
            vocab.save(tmp / name)
        header = {"format": FORMAT, "version": VERSION, "created": time.time(), **(meta or {}),
                  "weights_sha256": _sha256(tmp / WEIGHTS)}  # fmt: skip
        _write_json(tmp / META, header)
        if trainer_state is not None:
            _write_json(tmp / TRAINER_JSON, trainer_state)
            save_file(trainer_tensors or {}, str(tmp / TRAINER_TENSORS))
        _settle_files(tmp, 0o666 & ~umask)
        _replace_dir(tmp, path)
    except (OSError, SafetensorError) as err:  # disk full (safetensors: SafetensorError), I/O
        shutil.rmtree(tmp, ignore_errors=True)
        reason = err.strerror if isinstance(err, OSError) and err.strerror else err
        raise CheckpointError(
            f"{path}: cannot write the checkpoint ({reason}); any previous one is kept"
        ) from err
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def load_checkpoint(
    path: str | Path, device: str | torch.device = "cpu", dtype: torch.dtype | None = None
) -> Checkpoint:
    """Load a checkpoint directory into an eval-mode model; every failure is a CheckpointError
    that names the directory and the problem."""
    path = Path(path)
    meta = read_meta(path)
    config = read_config(path)
    src_vocab, tgt_vocab = read_vocabs(path, config)
    model = Transformer(config.model)
    weights = read_weights(path)
    bad = _non_finite(weights)  # aiayn never saves such weights; another writer might have
    if bad:
        raise CheckpointError(f"{path}: non-finite weights in {', '.join(bad[:5])}")
    load_weights_into(model, weights, path)
    model.to(device=device, dtype=dtype).eval()
    return Checkpoint(model, config, src_vocab, tgt_vocab, meta)


def read_meta(path: Path) -> dict[str, Any]:
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
    meta = _read_json(path / META)
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
    """The checkpoint's config. A checkpoint config lists every key; one without
    `model.attention_bias` was saved before that key existed, when attention had biases."""
    if not path.is_dir():
        raise CheckpointError(f"{path}: no such checkpoint directory")
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


def read_vocabs(path: Path, config: Config) -> tuple[Vocab, Vocab]:
    vocabs = []
    for name in vocab_files(config):
        try:
            vocabs.append(load_vocab(path / name))
        except AiaynError as err:
            raise CheckpointError(f"{path}: vocabulary {name} is missing or invalid ({err})") from None
    src_vocab, tgt_vocab = vocabs
    m = config.model
    ids = (tgt_vocab.pad_id, tgt_vocab.bos_id, tgt_vocab.eos_id)
    if ids != (m.pad_id, m.bos_id, m.eos_id) or src_vocab.eos_id != m.eos_id:
        raise CheckpointError(
            f"{path}: the vocabulary's (pad, bos, eos) ids are {ids}, the config's "
            f"(model.pad_id, model.bos_id, model.eos_id) = {(m.pad_id, m.bos_id, m.eos_id)}"
        )
    if m.vocab_format == "marian" and src_vocab.id_space != tgt_vocab.id_space:
        raise CheckpointError(f"{path}: the two sides of its MarianMT vocabulary number "
                              "their pieces differently")  # fmt: skip
    sizes = (src_vocab.size if not config.model.shared_vocab else None, tgt_vocab.size)
    if sizes != (config.model.src_vocab_size, config.model.vocab_size):
        raise CheckpointError(
            f"{path}: vocabulary sizes {sizes} do not match the config's "
            f"(src_vocab_size, vocab_size) = {(config.model.src_vocab_size, config.model.vocab_size)}"
        )
    return src_vocab, tgt_vocab


def _non_finite(weights: dict[str, torch.Tensor]) -> list[str]:
    """Names of the floating-point tensors holding a NaN or an infinity."""
    return [name for name, t in weights.items() if t.is_floating_point() and not t.isfinite().all()]


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    """The checkpoint's weights, checked against the SHA-256 its metadata records (flipped
    bytes inside a tensor leave a valid file of finite, wrong numbers; checkpoints written
    by earlier versions have no digest, and load unchecked)."""
    expected = read_meta(path).get("weights_sha256")
    file = path / WEIGHTS
    if not file.is_file():
        raise CheckpointError(f"{path}: {WEIGHTS} is missing")
    try:
        if expected is not None and _sha256(file) != expected:
            raise CheckpointError(
                f"{file}: truncated or corrupt: its SHA-256 differs from the one recorded in "
                f"{META} when it was written"
            )
        return load_file(str(file))
    except (SafetensorError, OSError, ValueError) as err:
        raise CheckpointError(f"{file}: truncated or corrupt safetensors file ({err})") from None


def _sha256(file: Path) -> str:
    digest = hashlib.sha256()
    with open(file, "rb") as handle:
        while block := handle.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()


def load_weights_into(model: Transformer, weights: dict[str, torch.Tensor], where: Path) -> None:
    """Copy `weights` into `model`, naming every missing, unexpected or mis-shaped tensor."""
    expected = model_weights(model)
    shared = weights.get("positional.weight")
    if "tgt_positional.weight" in expected and "tgt_positional.weight" not in weights and (
        shared is not None
    ):  # saved before the decoder had learned positions of its own: the model
        # was trained with the encoder's table in both stacks, so both get it
        weights = {**weights, "tgt_positional.weight": shared}
    missing = sorted(set(expected) - set(weights))
    unexpected = sorted(set(weights) - set(expected))
    shapes = [
        f"{k} {tuple(weights[k].shape)} vs {tuple(v.shape)}"
        for k, v in expected.items()
        if k in weights and weights[k].shape != v.shape
    ]
    if missing or unexpected or shapes:
        problems = []
        if missing:
            problems.append(f"missing {', '.join(missing[:5])}")
        if unexpected:
            problems.append(f"unexpected {', '.join(unexpected[:5])}")
            if any("_attn.w_" in k and k.endswith(".bias") for k in unexpected):
                problems.append("attention biases: set model.attention_bias: true in its config")
        if shapes:
            problems.append(f"shape mismatch {'; '.join(shapes[:5])}")
        raise CheckpointError(
            f"{where}: weights do not fit the architecture in its config ({'; '.join(problems)})"
        )
    with torch.no_grad():
        params = dict(model.named_parameters(remove_duplicate=False))
        params.update(model.named_buffers(remove_duplicate=False))
        for name, tensor in weights.items():
            params[name].copy_(tensor)


def read_trainer_state(path: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """The trainer's JSON state and tensors; a CheckpointError if the checkpoint has none."""
    if not (path / TRAINER_JSON).is_file() or not (path / TRAINER_TENSORS).is_file():
        raise CheckpointError(f"{path}: has no trainer state (an averaged checkpoint cannot resume)")
    try:
        tensors = load_file(str(path / TRAINER_TENSORS))
    except (SafetensorError, OSError, ValueError) as err:
        raise CheckpointError(f"{path / TRAINER_TENSORS}: truncated or corrupt ({err})") from None
    return _read_json(path / TRAINER_JSON), tensors


def _read_json(file: Path) -> dict[str, Any]:
    return read_object(file, CheckpointError)


def _write_json(file: Path, data: dict[str, Any]) -> None:
    file.write_text(json.dumps(data, indent=1) + "\n", "utf-8")


def _settle_files(directory: Path, mode: int) -> None:
    """Give every file `mode` and flush it to disk before the rename makes the checkpoint
    visible."""
    for file in directory.iterdir():
        os.chmod(file, mode)
        with open(file, "rb") as handle:
            os.fsync(handle.fileno())


def _check_replaceable(path: Path) -> None:
    """Refuse to replace anything but a checkpoint (or an empty directory): a mistyped output
    path must not delete a user's files."""
    if not path.exists() and not path.is_symlink():
        return
    if path.is_dir() and not path.is_symlink():
        if (path / META).is_file() or not any(path.iterdir()):
            return
    raise CheckpointError(
        f"{path}: exists and is not an aiayn checkpoint; refusing to replace it (choose "
        "another path, or remove it yourself)"
    )


def _umask() -> int:
    """The process's umask: from /proc on Linux; elsewhere by setting it and putting it back
    (which, for that instant, applies 022 to files other threads create)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


def _replace_dir(tmp: Path, path: Path) -> None:
    """Rename `tmp` to `path`; an existing `path` is moved aside first and removed after.

    Whatever interrupts the two renames (an error, Ctrl-C), the previous checkpoint is put
    back under its name; a process killed between them leaves it under `.NAME.old-PID`,
    where `restore_replaced` finds it."""
    old = path.with_name(f".{path.name}.old-{os.getpid()}") if path.exists() else None
    try:
        if old is not None:
            os.replace(path, old)
        os.replace(tmp, path)
    except BaseException:
        if old is not None and old.exists() and not path.exists():
            os.replace(old, path)  # put the previous checkpoint back under its name
        raise
    _fsync_dir(path.parent)  # the renames themselves reach the disk
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def restore_replaced(directory: Path) -> list[Path]:
    """Put back, under their names, complete checkpoints that a process killed inside
    `_replace_dir` left under `.NAME.old-PID` with no `NAME` beside them; -> those put back."""
    restored = []
    for old in sorted(directory.glob(".*.old-*")):
        name = old.name[1:].rsplit(".old-", 1)[0]
        if old.is_dir() and (old / META).is_file() and not (directory / name).exists():
            os.replace(old, directory / name)
            restored.append(directory / name)
    return restored


def _fsync_dir(directory: Path) -> None:
    handle = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(handle)
    except OSError:  # some file systems cannot sync a directory; the rename stands
        pass
    finally:
        os.close(handle)
