"""What the exports (CTranslate2, HuggingFace, Argos) share: the refusal of a model the target
cannot represent, the number of positions a table must hold, the vocabulary as strings,
and an output directory that appears whole or not at all.

An export is written into a temporary directory beside OUT and renamed into place only
when complete (as `aiayn.checkpoint` writes checkpoints), so a failed or interrupted export
leaves no half-written OUT; an existing OUT is replaced only with `force`, and only if an
earlier export wrote it (its `aiayn-export.json`) or it is empty.
"""

from __future__ import annotations

import contextlib
import json
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from aiayn.atomic_dir import new_directory
from aiayn.checkpoint import Checkpoint
from aiayn.config import Config, ModelConfig
from aiayn.data.vocab import Vocab
from aiayn.errors import ExportError

MARKER = "aiayn-export.json"


def refuse_unrepresentable(target: str, problems: list[str]) -> None:
    """One clear error naming everything `target` cannot represent; nothing if empty."""
    if problems:
        raise ExportError(f"cannot export to {target}: {'; '.join(problems)}")


def restricted_attention(config: ModelConfig) -> list[str]:
    """The problem of a model with restricted self-attention, which neither target has."""
    if not config.attention_window:
        return []
    return [f"its self-attention sees every position, this model's only those within "
            f"model.attention_window={config.attention_window}"]  # fmt: skip


def n_positions(config: Config) -> int:
    """Positions a table must hold: sources are cut to `model.max_len` tokens (`Translator`),
    and the decoder is fed bos plus at most `max_len + max_len_offset - 1` tokens (sec. 6.1:
    output length up to input length + 50)."""
    return config.model.max_len + config.decode.max_len_offset


# How the exported model's length penalty, length ** alpha, compares with the checkpoint's
# (`decode.length_penalty`): the exports' READMEs say so.
PENALTY = {
    "gnmt": "not by aiayn's ((5 + length) / 6) ** alpha, so beam search may pick other "
    "hypotheses than `aiayn translate`",
    "power": "as the checkpoint's `decode.length_penalty: power` does",
}


def channel_order(d_model: int) -> torch.Tensor:
    """(d_model,) PERM: Marian's channel j holds aiayn's channel PERM[j], so that the
    interleaved sinusoids (sin on even channels, sec. 3.5) become Marian's [sin | cos]
    halves; `export/huggingface.py` permutes by it, `convert/huggingface.py` back."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def pieces(vocab: Vocab) -> list[str]:
    """The vocabulary's subword strings in id order: the token names both libraries use."""
    return [vocab.piece(i) for i in range(vocab.size)]


def array(tensor: torch.Tensor) -> np.ndarray:
    """A float32 numpy copy (CTranslate2 quantizes spec arrays in place: never the model's)."""
    return tensor.detach().to(device="cpu", dtype=torch.float32).numpy().copy()


def write_marker(directory: Path, target: str, ckpt: Checkpoint, **extra: object) -> None:
    """`aiayn-export.json`: what was exported, from which weights, and how."""
    meta = {"format": "aiayn-export", "target": target,
            "weights_sha256": ckpt.meta.get("weights_sha256"), **extra}  # fmt: skip
    (directory / MARKER).write_text(json.dumps(meta, indent=1) + "\n", "utf-8")


def is_export(out: Path) -> bool:
    """Whether `out` is an earlier export (or an empty directory): a directory holding
    `aiayn-export.json`, or a zip archive (an Argos package) holding one."""
    if out.is_symlink():
        return False
    if out.is_dir():
        return (out / MARKER).is_file() or not any(out.iterdir())
    if not zipfile.is_zipfile(out):
        return False
    with zipfile.ZipFile(out) as archive:
        return any(Path(name).name == MARKER for name in archive.namelist())


def check_output(out: Path, force: bool) -> None:
    """Refuse an OUT that exists (unless `force`) or that is not an earlier export."""
    if not out.exists() and not out.is_symlink():
        return
    if not is_export(out):
        raise ExportError(f"{out}: exists and is not an aiayn export; refusing to replace it")
    if not force:
        raise ExportError(f"{out}: exists; --force replaces it")


@contextlib.contextmanager
def written_atomically(out: str | Path, force: bool = False) -> Iterator[Path]:
    """Yield a temporary directory beside `out`; renamed to `out` if the block succeeds,
    removed if it fails, so `out` is never half-written (`atomic_dir.new_directory`)."""
    out = Path(out)
    check_output(out, force)
    with new_directory(out) as tmp:
        yield tmp
