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

Its plain part (metadata, config, vocabularies) is read by `aiayn.data.checkpoint_vocabs`,
which the data stage uses alone (`prepare --vocab-from`); this module adds the weights.
It is written whole or not at all (`atomic_dir.new_directory`). Weights load only through
safetensors and configs through `yaml.safe_load`: a pickle in the directory is never opened.

    save_checkpoint(path, model, config, src_vocab, tgt_vocab, meta)   # the one way to save
    ckpt = Checkpoint(path)          # opened once: its metadata read and checked
    ckpt.config, ckpt.src_vocab, ckpt.trainer_state  # each read when first asked for
    ckpt.read_weights()              # the weights, checked against their recorded digest
    ckpt = load_checkpoint(path)     # opened, vocabularies read, `ckpt.model` built
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
from pathlib import Path
from typing import Any

import torch
import yaml
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from aiayn.atomic_dir import new_directory
from aiayn.config import Config, to_dict
from aiayn.data.binarize import MANIFEST
from aiayn.data.checkpoint_vocabs import (
    CONFIG,
    FORMAT,
    META,
    SHARED_VOCAB,  # noqa: F401 (the layout's names are also `aiayn.checkpoint`'s)
    VERSION,
    read_config,
    read_meta,
    read_vocabs,
    vocab_files,
)
from aiayn.data.marian_vocab import SUFFIX, MarianVocab
from aiayn.data.vocab import Vocab
from aiayn.errors import CheckpointError
from aiayn.jsonfile import read_object
from aiayn.model.transformer import Transformer

WEIGHTS = "model.safetensors"
TRAINER_JSON, TRAINER_TENSORS = "trainer_state.json", "trainer_state.safetensors"


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
    model: Transformer | dict[str, torch.Tensor],
    config: Config,
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    meta: dict[str, Any] | None = None,
    trainer_state: tuple[dict[str, Any], dict[str, torch.Tensor]] | None = None,
) -> Path:
    """Write a checkpoint directory whole or not at all: `model`'s weights (or a weights
    dict, e.g. an average of checkpoints), and `trainer_state` (JSON, tensors) for a resume.
    Refuses non-finite weights; an existing `path` is replaced only if it is a checkpoint or
    an empty directory. A failure (a full disk) is a CheckpointError; any previous one stays."""
    weights = model_weights(model) if isinstance(model, Transformer) else model
    bad = _non_finite(weights)
    if bad:
        raise CheckpointError(f"refusing to save non-finite weights in {', '.join(bad[:5])}")
    path = Path(path)
    _check_replaceable(path)
    try:
        with new_directory(path) as tmp:
            save_file(weights, str(tmp / WEIGHTS), metadata={"format": FORMAT})
            (tmp / CONFIG).write_text(yaml.safe_dump(to_dict(config), sort_keys=False), "utf-8")
            for name, vocab in dict(zip(vocab_files(config), (src_vocab, tgt_vocab))).items():
                if name.endswith(SUFFIX) != isinstance(vocab, MarianVocab):
                    raise CheckpointError(f"model.vocab_format={config.model.vocab_format} and "
                                          f"a {type(vocab).__name__}: not a checkpoint")  # fmt: skip
                vocab.save(tmp / name)
            header = {"format": FORMAT, "version": VERSION, "created": time.time(),
                      **(meta or {}), "weights_sha256": _sha256(tmp / WEIGHTS)}  # fmt: skip
            if trainer_state is not None:
                _write_json(tmp / TRAINER_JSON, trainer_state[0])
                save_file(trainer_state[1], str(tmp / TRAINER_TENSORS))
            _write_json(tmp / META, header)  # last: a directory with it is complete
    except (OSError, SafetensorError) as err:  # disk full (safetensors: SafetensorError), I/O
        reason = err.strerror if isinstance(err, OSError) and err.strerror else err
        raise CheckpointError(
            f"{path}: cannot write the checkpoint ({reason}); any previous one is kept"
        ) from err
    return path


class Checkpoint:
    """A checkpoint directory, opened once: its metadata is read and checked here, and the
    config, vocabularies and trainer state are each read when first asked for (the weights,
    large, at each `read_weights`).
    Every failure is a CheckpointError that names the directory and the problem."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.meta: dict[str, Any] = read_meta(self.path)
        self.model: Transformer | None = None  # set by `load`

    def load(self, device: str | torch.device = "cpu", dtype: torch.dtype | None = None) -> Transformer:
        """The model in eval mode, on `device`, in `dtype` (None: as saved); also `self.model`."""
        model = Transformer(self.config.model)
        load_weights_into(model, self.read_weights(), self.path)
        self.model = model.to(device=device, dtype=dtype).eval()
        return self.model

    @functools.cached_property
    def config(self) -> Config:
        """The full config the model was built from (`read_config`)."""
        return read_config(self.path)

    @functools.cached_property
    def vocabs(self) -> tuple[Vocab, Vocab]:
        """(source, target) vocabularies (the same object twice for a shared one), checked
        against the config: their special ids, sizes and (MarianMT's) numbering."""
        return read_vocabs(self.path, self.config)

    @functools.cached_property
    def languages(self) -> tuple[str | None, str | None]:
        """(source, target) codes: those the metadata records (training writes the prepared
        data's), else those of the prepared data's manifest, where the checkpoint's data
        directory still is (checkpoints saved before they were recorded); None where neither
        says."""
        meta = self.meta.get("languages")
        if isinstance(meta, dict):
            found = meta.get("source"), meta.get("target")
            if all(isinstance(code, str) for code in found):
                return found
        data_dir = self.config.data.dir
        manifest = Path(data_dir) / MANIFEST if data_dir else None
        try:
            data = json.loads(manifest.read_text(encoding="utf-8")) if manifest else {}
        except (OSError, ValueError):
            data = {}
        return data.get("src_lang"), data.get("tgt_lang")

    @property
    def src_vocab(self) -> Vocab:
        return self.vocabs[0]

    @property
    def tgt_vocab(self) -> Vocab:
        return self.vocabs[1]

    def read_weights(self) -> dict[str, torch.Tensor]:
        """The weights (read anew at each call: they are large), checked against the SHA-256 the metadata records (flipped bytes inside
        a tensor leave a valid file of finite, wrong numbers; checkpoints written by earlier
        versions have no digest, and load unchecked) and for non-finite values."""
        file, expected = self.path / WEIGHTS, self.meta.get("weights_sha256")
        if not file.is_file():
            raise CheckpointError(f"{self.path}: {WEIGHTS} is missing")
        try:
            if expected is not None and _sha256(file) != expected:
                raise CheckpointError(
                    f"{file}: truncated or corrupt: its SHA-256 differs from the one recorded "
                    f"in {META} when it was written"
                )
            weights = load_file(str(file))
        except (SafetensorError, OSError, ValueError) as err:
            raise CheckpointError(f"{file}: truncated or corrupt safetensors file ({err})") from None
        bad = _non_finite(weights)  # aiayn never saves such weights; another writer might have
        if bad:
            raise CheckpointError(f"{self.path}: non-finite weights in {', '.join(bad[:5])}")
        return weights

    @functools.cached_property
    def trainer_state(self) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        """The trainer's JSON state and tensors; a CheckpointError if the checkpoint has none."""
        path = self.path
        if not (path / TRAINER_JSON).is_file() or not (path / TRAINER_TENSORS).is_file():
            raise CheckpointError(f"{path}: has no trainer state (an averaged checkpoint cannot resume)")
        try:
            tensors = load_file(str(path / TRAINER_TENSORS))
        except (SafetensorError, OSError, ValueError) as err:
            raise CheckpointError(f"{path / TRAINER_TENSORS}: truncated or corrupt ({err})") from None
        return _read_json(path / TRAINER_JSON), tensors


def load_checkpoint(
    path: str | Path, device: str | torch.device = "cpu", dtype: torch.dtype | None = None
) -> Checkpoint:
    """Open a checkpoint directory, read its vocabularies and build its model (eval mode,
    `ckpt.model`): everything translation needs, each part checked."""
    ckpt = Checkpoint(path)
    ckpt.vocabs  # noqa: B018 (read now: a missing vocabulary fails here, not mid-translation)
    ckpt.load(device, dtype)
    return ckpt


def _non_finite(weights: dict[str, torch.Tensor]) -> list[str]:
    """Names of the floating-point tensors holding a NaN or an infinity."""
    return [name for name, t in weights.items() if t.is_floating_point() and not t.isfinite().all()]


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


def _read_json(file: Path) -> dict[str, Any]:
    return read_object(file, CheckpointError)


def _write_json(file: Path, data: dict[str, Any]) -> None:
    file.write_text(json.dumps(data, indent=1) + "\n", "utf-8")


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


