"""The checkpoints of one training run, under `<train.out_dir>/checkpoints/`:

    step-000123/   a full checkpoint (model + trainer state), one per save; the last
                   `train.keep_last` are kept (sec. 6.1 averages the last 5 or 20)
    best/          the weights with the best dev NLL so far (no trainer state)
    abandoned-after-step-000100/   what a run resumed from step 100 found newer than it
                   (`RunCheckpoints.set_aside_after`); never read or deleted by aiayn

Every directory is written by `aiayn.checkpoint` under a temporary dot-name and renamed
into place, and an old one is renamed to a dot-name before it is deleted, so a process
killed at any moment leaves only complete checkpoints under `step-*` names.
"""

from __future__ import annotations

import re
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path

from aiayn.checkpoint import META, TRAINER_JSON, TRAINER_TENSORS, read_meta, restore_replaced
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
    if not path.is_dir():
        raise CheckpointError(f"{path}: no such directory to resume from")
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
        """Remove what a killed run left half-written or half-deleted (dot-names only), after
        putting back a checkpoint it was killed while replacing (`restore_replaced`)."""
        if self.dir.is_dir():
            for path in restore_replaced(self.dir):
                warnings.warn(f"{path}: put back; the run was killed while replacing it")
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

    def set_aside_after(self, step: int) -> tuple[Path, list[str]] | None:
        """Move the checkpoints of steps after `step` (and a `best/` saved after it) into
        `abandoned-after-step-<step>/`; -> (that directory, what moved), or None.

        A run resumed from an older checkpoint of its own directory (to branch off before a
        divergence, or because the newest could not be read) continues from `step`. Left in
        place, the newer checkpoints would pass for its own: pruning keeps the highest step
        numbers, so it would delete the resumed run's new checkpoints; `--resume` and
        `average --last` would take the abandoned ones; `best/` would be overwritten by any
        model better than the best up to `step`. Moved, they are kept and out of the way."""
        newer = [path for saved, path in step_checkpoints(self.dir) if saved > step]
        best = self.best
        if best is not None:
            try:
                best_step = read_meta(best).get("step")
            except CheckpointError:
                best_step = None  # unreadable: its step cannot vouch for it
            if not isinstance(best_step, int) or best_step > step:
                newer.append(best)
        if not newer:
            return None
        target, n = self.dir / f"abandoned-after-{step_name(step)}", 1
        while target.exists():
            n += 1
            target = self.dir / f"abandoned-after-{step_name(step)}-{n}"
        target.mkdir()
        for path in newer:
            path.rename(target / path.name)
        return target, [path.name for path in newer]

    def _delete(self, path: Path) -> None:
        doomed = path.with_name(f".{path.name}.deleting")
        path.rename(doomed)  # atomic: never a partial checkpoint under a step-* name
        shutil.rmtree(doomed, ignore_errors=True)
