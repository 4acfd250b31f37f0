"""The programs outside Python that the tests drive: a Chromium for the web page's tests
(tests/serve_browser.py) and curl for the README's curl examples. `make test` (and so CI,
whose `.ci/run` is `make test`) runs this file first:

    python tests/system_programs.py install

It installs what is missing where this user may: Debian's packages through apt-get (as root,
or with sudo that asks no password), else Playwright's own Chromium (`playwright install
chromium`, where the network allows). What it cannot get it names in one line; the tests that
need it skip with that line as their reason, except under CI (`CI=true`), where a missing
program fails: the install then exits 1 and the tests fail instead of skipping.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

DEBIAN_CHROMIUM = Path("/usr/bin/chromium")  # Debian's package `chromium`
HOW = {
    "chromium": "`sudo apt-get install chromium` (Debian) or "
                "`.venv/bin/python -m playwright install chromium`",
    "curl": "`sudo apt-get install curl`",
}  # fmt: skip


def under_ci() -> bool:
    """CI sets CI=true: there a missing program is a failure, not a skip."""
    return os.environ.get("CI", "").lower() == "true"


def playwright_chromium() -> Path | None:
    """The Chromium that `playwright install chromium` downloaded, or None."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    with sync_playwright() as playwright:
        path = Path(playwright.chromium.executable_path)
    return path if path.is_file() else None


def chromium_path() -> Path | None:
    """Debian's Chromium if installed (the one the tests are written against), else
    Playwright's own, else None."""
    found = shutil.which("chromium")
    if found:
        return Path(found)
    return DEBIAN_CHROMIUM if DEBIAN_CHROMIUM.is_file() else playwright_chromium()


FINDERS: dict[str, Callable[[], object]] = {
    "chromium": chromium_path,
    "curl": lambda: shutil.which("curl"),
}


def missing_line(program: str) -> str:
    """The one line said when `program` cannot be had: what skips, and how to get it."""
    return f"{program} not found: {HOW[program]} installs it (the tests that drive it skip without it)"


def missing(programs=tuple(FINDERS)) -> list[str]:
    return [name for name in programs if FINDERS[name]() is None]


def _apt_prefix() -> list[str] | None:
    """How this user runs apt-get: as root, through sudo without a password, or not at all."""
    if shutil.which("apt-get") is None:
        return None
    if os.geteuid() == 0:
        return []
    sudo = shutil.which("sudo")
    if sudo and subprocess.run([sudo, "-n", "true"], capture_output=True).returncode == 0:
        return [sudo, "-n"]
    return None


def install(run: Callable[[list[str]], int] | None = None) -> int:
    """Install the missing programs where this user may; -> 0, or 1 where one is still
    missing under CI. Each still missing is named in one line on stderr."""
    run = run or (lambda command: subprocess.run(command).returncode)
    lacking = missing()
    apt = _apt_prefix() if lacking else None
    if lacking and apt is not None:
        env = ["env", "DEBIAN_FRONTEND=noninteractive"]
        run([*apt, "apt-get", "update", "-q"])
        run([*apt, *env, "apt-get", "install", "-y", "-q", *lacking])
        lacking = missing()
    if "chromium" in lacking:
        run([sys.executable, "-m", "playwright", "install", "chromium"])
        lacking = missing()
    for name in lacking:
        print(missing_line(name), file=sys.stderr)
    return 1 if lacking and under_ci() else 0


def require(program: str) -> None:
    """In a test: skip with the one line if `program` is missing, or fail under CI."""
    import pytest

    if FINDERS[program]() is not None:
        return
    if under_ci():
        pytest.fail(f"CI=true and {missing_line(program)}")
    pytest.skip(missing_line(program))


if __name__ == "__main__":
    if sys.argv[1:] != ["install"]:
        sys.exit("usage: python tests/system_programs.py install")
    sys.exit(install())
