"""Checkpoint averaging (sec. 6.1): "For the base models, we used a single model obtained by
averaging the last 5 checkpoints, which were written at 10-minute intervals. For the big
models, we averaged the last 20 checkpoints."

    aiayn average --last 5 runs/base --out runs/base/avg5
    aiayn average --inputs runs/a/checkpoints/step-090000 runs/a/checkpoints/step-100000 --out avg

The result is a plain checkpoint (no trainer state): `aiayn translate` loads it like any
other. Only checkpoints of one architecture and one vocabulary can be averaged; anything
else is refused with the difference named.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import torch

from aiayn.checkpoint import (
    read_config,
    read_meta,
    read_vocabs,
    read_weights,
    save_weights_checkpoint,
)
from aiayn.errors import CheckpointError
from aiayn.train.checkpoints import checkpoints_dir, step_checkpoints


def last_checkpoints(directory: str | Path, n: int) -> list[Path]:
    """The newest `n` step checkpoints of a run (its out_dir or its checkpoints/), oldest first."""
    if n < 1:
        raise CheckpointError(f"--last needs at least 1 checkpoint, got {n}")
    if not Path(directory).is_dir():
        raise CheckpointError(f"{directory}: no such directory")
    found = [path for _, path in step_checkpoints(checkpoints_dir(directory))]
    if len(found) < n:
        raise CheckpointError(
            f"{directory}: {len(found)} step checkpoint(s) found, {n} asked for "
            "(train.keep_last must be at least the number you average)"
        )
    return found[-n:]


def average_weights(paths: Sequence[str | Path]) -> dict[str, torch.Tensor]:
    """The element-wise mean of the checkpoints' weights (accumulated in float64).

    Raises CheckpointError naming the first difference if the checkpoints do not share
    one architecture (config.model, tensor names and shapes) and one vocabulary.
    """
    paths = [Path(p) for p in paths]
    if not paths:
        raise CheckpointError("no checkpoints to average")
    first = paths[0]
    _check_same_kind(paths)
    first_weights = read_weights(first)
    dtypes = {name: t.dtype for name, t in first_weights.items()}
    total = {name: t.to(torch.float64) for name, t in first_weights.items()}
    for path in paths[1:]:
        weights = read_weights(path)
        _check_same_tensors(first, total, path, weights)
        for name, tensor in weights.items():
            if tensor.is_floating_point():
                total[name] += tensor.to(torch.float64)
            elif not torch.equal(tensor, total[name].to(tensor.dtype)):
                raise CheckpointError(f"{path}: integer tensor {name} differs from {first}'s")
    return {
        name: (t / len(paths) if dtypes[name].is_floating_point else t).to(dtypes[name])
        for name, t in total.items()
    }


def average_checkpoints(paths: Sequence[str | Path], out: str | Path) -> Path:
    """Average `paths` into a new checkpoint directory `out` (config and vocabulary of the
    last; its metadata lists what was averaged). An `out` that is, or holds, one of `paths`
    (say the run's own directory) is refused: writing it would delete that checkpoint."""
    paths = [Path(p) for p in paths]
    out = Path(out)
    root = out.resolve()
    held = [p for p in paths if p.resolve().is_relative_to(root)] if out.exists() else []
    if held:
        raise CheckpointError(
            f"{out}: is or holds the input checkpoint {held[0]}; write the average elsewhere"
        )
    weights = average_weights(paths)
    newest = paths[-1]
    config = read_config(newest)
    src_vocab, tgt_vocab = read_vocabs(newest, config)
    meta = {
        "step": read_meta(newest).get("step"),
        "averaged_from": [str(p.resolve()) for p in paths],
    }
    return save_weights_checkpoint(out, weights, config, src_vocab, tgt_vocab, meta)


def _check_same_kind(paths: list[Path]) -> None:
    """One config.model and one vocabulary for all."""
    first = paths[0]
    config = read_config(first)
    vocabs = [v.sha256 for v in read_vocabs(first, config)]
    for path in paths[1:]:
        other = read_config(path)
        if other.model != config.model:
            ours, theirs = dataclasses.asdict(config.model), dataclasses.asdict(other.model)
            diff = ", ".join(
                f"model.{k}: {ours[k]} vs {theirs[k]}" for k in ours if ours[k] != theirs[k]
            )
            raise CheckpointError(
                f"cannot average {first} and {path}: different architectures ({diff})"
            )
        if [v.sha256 for v in read_vocabs(path, other)] != vocabs:
            raise CheckpointError(f"cannot average {first} and {path}: different vocabularies")


def _check_same_tensors(first: Path, reference: dict, path: Path, weights: dict) -> None:
    if set(weights) != set(reference):
        extra = sorted(set(weights) ^ set(reference))[:5]
        raise CheckpointError(
            f"cannot average {first} and {path}: different weight names ({', '.join(extra)})"
        )
    for name, tensor in weights.items():
        if tensor.shape != reference[name].shape:
            raise CheckpointError(
                f"cannot average {first} and {path}: {name} has shape "
                f"{tuple(reference[name].shape)} vs {tuple(tensor.shape)}"
            )
