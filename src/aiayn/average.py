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

from collections.abc import Sequence
from pathlib import Path

import torch

from aiayn.checkpoint import Checkpoint, save_checkpoint
from aiayn.config import model_differences
from aiayn.errors import CheckpointError, ConfigError
from aiayn.train.run_dir import checkpoints_dir, step_checkpoints


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
    if not paths:
        raise CheckpointError("no checkpoints to average")
    ckpts = [Checkpoint(p) for p in paths]
    _check_same_kind(ckpts)
    first = ckpts[0].path
    first_weights = ckpts[0].read_weights()
    dtypes = {name: t.dtype for name, t in first_weights.items()}
    total = {name: t.to(torch.float64) for name, t in first_weights.items()}
    for ckpt in ckpts[1:]:
        path, weights = ckpt.path, ckpt.read_weights()
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
    newest = Checkpoint(paths[-1])
    meta = {"step": newest.meta.get("step"), "averaged_from": [str(p.resolve()) for p in paths]}
    return save_checkpoint(out, weights, newest.config, *newest.vocabs, meta)


def _check_same_kind(ckpts: list[Checkpoint]) -> None:
    """One config.model and one vocabulary for all."""
    first = ckpts[0]
    vocabs = [v.sha256 for v in first.vocabs]
    for other in ckpts[1:]:
        diff = model_differences(first.config.model, other.config.model)
        if diff:
            raise CheckpointError(f"cannot average {first.path} and {other.path}: different "
                                  f"architectures ({', '.join(diff)})")  # fmt: skip
        if [v.sha256 for v in other.vocabs] != vocabs:
            raise CheckpointError(f"cannot average {first.path} and {other.path}: different vocabularies")


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


def average_run(
    out: str | Path, last: int | None = None, directory: str | Path | None = None,
    inputs: Sequence[str | Path] | None = None, force: bool = False,
) -> list[Path]:  # fmt: skip
    """`aiayn average`: the newest `last` step checkpoints of the run `directory`, or the
    checkpoints `inputs`, averaged into `out` (which must not exist unless `force`);
    -> the checkpoints averaged."""
    if (last is None) == (inputs is None) or (last is not None) != (directory is not None):
        raise ConfigError("give either --last N DIR, or --inputs CKPT [CKPT ...]")
    if Path(out).exists() and not force:
        raise ConfigError(f"{out}: already exists (use --force to replace it)")
    paths = last_checkpoints(directory, last) if last is not None else [Path(p) for p in inputs]
    average_checkpoints(paths, out)
    return paths
