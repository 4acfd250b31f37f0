"""A training run's directory (`train.out_dir`): claimed for one run, and its checkpoints,
under `<train.out_dir>/checkpoints/`:

    step-000123/   a full checkpoint (model + trainer state), one per save; the last
                   `train.keep_last` are kept (sec. 6.1 averages the last 5 or 20)
    best/          the weights with the best dev NLL so far (no trainer state)
    abandoned-after-step-000100/   what a run resumed from step 100 found newer than it
                   (`RunDir.set_aside_after`); never read or deleted by aiayn

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

from aiayn.atomic_dir import restore_replaced
from aiayn.checkpoint import META, TRAINER_JSON, TRAINER_TENSORS, Checkpoint
from aiayn.errors import CheckpointError, ConfigError

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


class RunDir:
    """One run's out_dir: refuses another run's, writes, prunes and finds the checkpoints.

    `resume_from`: the checkpoint the run resumes from, if any. A run's checkpoints in
    out_dir are continued (a resume from that run), never mixed with a new run's: its
    pruning would delete the new run's checkpoints as the older ones (or the old run's), and
    `best/` would be overwritten by a worse model; so anything else is refused here."""

    def __init__(self, out_dir: str | Path, keep_last: int, resume_from: Path | None) -> None:
        self.out_dir = Path(out_dir)
        if self.out_dir.exists() and not self.out_dir.is_dir():
            raise ConfigError(f"train.out_dir={out_dir} is a file; it must be a directory")
        self.dir = self.out_dir / CHECKPOINTS
        self.keep_last = keep_last
        found = step_checkpoints(self.dir)
        if found and not (resume_from is not None and self.holds(resume_from)):
            raise ConfigError(
                f"train.out_dir={out_dir} already holds a run (checkpoints up to "
                f"{found[-1][1].name}); continue it with --resume {out_dir}, or set another "
                "train.out_dir"
            )

    def holds(self, path: Path) -> bool:
        """Whether `path` is one of this run's checkpoints."""
        return path.parent.resolve() == self.dir.resolve()

    def open_at(self, step: int, resumed: bool) -> None:
        """Before the first update (rank 0): clean what a killed run left (`clean_temporaries`)
        and, resuming from `step`, set aside what is newer (`set_aside_after`), saying so."""
        self.clean_temporaries()
        aside = self.set_aside_after(step) if resumed else None
        if aside is not None:
            target, moved = aside
            warnings.warn(
                f"resumed from step {step}: moved the newer {', '.join(moved)} to {target}, so "
                "that this run's checkpoints are one line of history"
            )

    def clean_temporaries(self) -> None:
        """Remove what a killed run left half-written or half-deleted (dot-names only), after
        putting back a checkpoint it was killed while replacing (`restore_replaced`)."""
        if self.dir.is_dir():
            for path in restore_replaced(self.dir, META):
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
                best_step = Checkpoint(best).meta.get("step")
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
