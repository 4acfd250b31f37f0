"""Directories that appear whole or not at all: checkpoints and exports.

    with new_directory(path) as tmp:      # a temporary directory beside `path`
        ...                               # write the files into tmp
    # renamed to `path` when the block succeeds (an earlier `path` replaced), else removed

The files get the modes the umask gives any file the user writes (not the private ones of
a temporary directory), so that a server running as another user can read them, and are
flushed to disk before the rename makes them visible. A process killed at any moment leaves
either the old directory or the new one under `path`, never a mix; one killed between the
two renames of a replacement leaves the old one under `.NAME.old-PID`, where
`restore_replaced` finds it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def new_directory(path: Path) -> Iterator[Path]:
    """Yield a temporary directory beside `path`, renamed to `path` if the block succeeds
    and removed if it fails (see the module docstring)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    try:
        yield tmp
        _settle(tmp, umask())
        replace_dir(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone already after the rename


def _settle(directory: Path, mask: int) -> None:
    """Give every file and directory under `directory` (itself included) the umask's modes,
    and flush every file to disk."""
    os.chmod(directory, 0o777 & ~mask)
    for entry in directory.rglob("*"):
        if entry.is_dir():
            os.chmod(entry, 0o777 & ~mask)
            continue
        os.chmod(entry, 0o666 & ~mask)
        with open(entry, "rb") as handle:
            os.fsync(handle.fileno())


def umask() -> int:
    """The process's umask: from /proc on Linux; elsewhere by setting it and putting it back
    (which, for that instant, applies 022 to files other threads create)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def replace_dir(tmp: Path, path: Path) -> None:
    """Rename `tmp` to `path`; an existing `path` is moved aside first and removed after.

    Whatever interrupts the two renames (an error, Ctrl-C), the previous directory is put
    back under its name; a process killed between them leaves it under `.NAME.old-PID`."""
    old = path.with_name(f".{path.name}.old-{os.getpid()}") if path.exists() else None
    try:
        if old is not None:
            os.replace(path, old)
        os.replace(tmp, path)
    except BaseException:
        if old is not None and old.exists() and not path.exists():
            os.replace(old, path)  # put the previous directory back under its name
        raise
    _fsync_dir(path.parent)  # the renames themselves reach the disk
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def restore_replaced(directory: Path, complete: str) -> list[Path]:
    """Put back, under their names, directories that a process killed inside `replace_dir`
    left under `.NAME.old-PID` with no `NAME` beside them, if they hold the file `complete`
    (a checkpoint's metadata: written last); -> those put back."""
    restored = []
    for old in sorted(directory.glob(".*.old-*")):
        name = old.name[1:].rsplit(".old-", 1)[0]
        if old.is_dir() and (old / complete).is_file() and not (directory / name).exists():
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
