"""Output files that are replaced whole or not at all: what `aiayn translate -o FILE` writes.

A regular file (or one a link points to) is written under a temporary name beside it and
renamed over it, with its mode, once every line is written, so that bad input or Ctrl-C
halfway leaves an existing file as it was (and a new one absent). Anything else (/dev/stdout,
a pipe, a file in a folder where nothing new may be created) is written as it is.

    with AtomicOutput("out.de") as out:      # replaced on leaving the block without error
        out.handle.write("...")
"""

from __future__ import annotations

import os
import stat
import sys

from aiayn.errors import ConfigError


class AtomicOutput:
    """Where a command writes: stdout (`path` None), or the file `path` (see above)."""

    def __init__(self, path: str | None) -> None:
        self.path, self.tmp, self.created = path, None, False
        if path is None:
            self.handle = sys.stdout
            return
        existed = os.path.exists(path)
        open(path, "a", encoding="utf-8").close()  # cannot be written: fails now, naming it
        self.created = not existed
        real = os.path.realpath(path)  # a link's target is replaced, the link kept
        info = os.stat(real)
        if stat.S_ISREG(info.st_mode) and not real.startswith(("/dev/", "/proc/")):
            folder, name = os.path.split(real)
            tmp = os.path.join(folder, f".{name}.tmp-{os.getpid()}")
            try:
                self.handle = open(tmp, "w", encoding="utf-8", newline="\n")
                os.chmod(tmp, stat.S_IMODE(info.st_mode))
                self.tmp, self.real = tmp, real
                return
            except OSError:  # a folder that takes no new files: write the file itself
                pass
        self.handle = open(path, "w", encoding="utf-8", newline="\n")

    def close(self, complete: bool) -> None:
        """Publish the written file (`complete`), or leave the old one (or none) in place."""
        if self.path is None:
            return
        self.handle.close()
        if self.tmp is not None and complete:
            os.replace(self.tmp, self.real)
        elif self.tmp is not None:
            os.remove(self.tmp)
            if self.created:
                os.remove(self.path)

    def __enter__(self) -> AtomicOutput:
        return self

    def __exit__(self, kind, value, traceback) -> None:
        self.close(complete=kind is None)


def refuse_output_among_inputs(output: str | None, *inputs: str | None) -> None:
    """An output file that is also an input would be emptied before it is read."""
    if output is None or not os.path.exists(output):
        return
    for name in inputs:
        if name is not None and os.path.exists(name) and os.path.samefile(output, name):
            raise ConfigError(f"{output}: is also an input ({name}); write the output elsewhere")
