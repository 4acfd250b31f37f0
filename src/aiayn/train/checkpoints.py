"""The checkpoints of one training run, under `<train.out_dir>/checkpoints/`:

    step-000123/   a full checkpoint (model + trainer state), one per save; the last
                   `train.keep_last` are kept (sec. 6.1 averages the last 5 or 20)
    best/          the weights with the best dev NLL so far (no trainer state)

Every directory is written by `aiayn.checkpoint` under a temporary dot-name and renamed
into place, and an old one is renamed to a dot-name before it is deleted, so a process
killed at any moment leaves only complete checkpoints under `step-*` names.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path

from aiayn.checkpoint import META, TRAINER_JSON, TRAINER_TENSORS
from aiayn.errors import CheckpointError

CHECKPOINTS, BEST = "checkpoints", "best"
_STEP = re.compile(r"^step-(\d+)$")


def step_name(step: int) -> str:
    return f"step-{step:06d}"


def step_checkpoints(directory: str | Path) -> list[tuple[int, Path]]:
    """(step, path) of the complete `step-*` checkpoints in `directory`, oldest first."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = []
    for path in directory.iterdir():
        match = _STEP.match(path.name)
        if match and (path / META).is_file():
            found.append((int(match.group(1)), path))
    return sorted(found)


def checkpoints_dir(path: str | Path) -> Path:
    """`path/checkpoints` when `path` is a run's out_dir, else `path` itself."""
    path = Path(path)
    return path / CHECKPOINTS if (path / CHECKPOINTS).is_dir() else path


def resume_candidates(path: str | Path) -> list[Path]:
    """Checkpoints to resume from, newest first: `path` itself if it is a checkpoint, else the
    `step-*` checkpoints with trainer state under it (or under its `checkpoints/`)."""
    path = Path(path)
    if (path / META).is_file():
        return [path]
    found = [
        p
        for _, p in reversed(step_checkpoints(checkpoints_dir(path)))
        if (p / TRAINER_JSON).is_file() and (p / TRAINER_TENSORS).is_file()
    ]
    if not found:
        raise CheckpointError(f"{path}: no checkpoint with trainer state to resume from")
    return found


class RunCheckpoints:
    """Writes, prunes and finds the checkpoints of one run (used on rank 0 only)."""

    def __init__(self, out_dir: str | Path, keep_last: int) -> None:
        self.dir = Path(out_dir) / CHECKPOINTS
        self.keep_last = keep_last

    def clean_temporaries(self) -> None:
        """Remove what a killed run left half-written or half-deleted (dot-names only)."""
        if self.dir.is_dir():
            for path in self.dir.glob(".*"):
                if path.is_dir() and re.search(r"\.(tmp-|old-|deleting)", path.name):
                    shutil.rmtree(path, ignore_errors=True)

    def save_step(self, step: int, write: Callable[[Path], Path]) -> Path:
        """`write(dir)` to `step-<step>`, then delete all but the newest `keep_last`."""
        path = write(self.dir / step_name(step))
        for _, old in step_checkpoints(self.dir)[: -self.keep_last]:
            self._delete(old)
        return path

    def save_best(self, write: Callable[[Path], Path]) -> Path:
        return write(self.dir / BEST)

    @property
    def best(self) -> Path | None:
        path = self.dir / BEST
        return path if (path / META).is_file() else None

    def _delete(self, path: Path) -> None:
        doomed = path.with_name(f".{path.name}.deleting")
        path.rename(doomed)  # atomic: never a partial checkpoint under a step-* name
        shutil.rmtree(doomed, ignore_errors=True)
