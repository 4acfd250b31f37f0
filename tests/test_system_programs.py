"""`make test` gets the programs the tests drive, or names each missing one in one line: its
tests then skip with that line, except under CI, where they fail (tests/system_programs.py)."""

from __future__ import annotations

import pytest

import system_programs
from system_programs import install, missing_line, require


@pytest.fixture
def nothing_found(monkeypatch):
    """A machine with neither program, and no apt-get this user may run."""
    monkeypatch.setattr(system_programs, "FINDERS", {"chromium": lambda: None, "curl": lambda: None})
    monkeypatch.setattr(system_programs, "_apt_prefix", lambda: None)


def test_a_missing_program_skips_with_its_one_line(nothing_found, monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception) as skipped:
        require("chromium")
    assert str(skipped.value) == missing_line("chromium")
    assert "\n" not in missing_line("chromium") and "apt-get install chromium" in missing_line("chromium")


def test_under_ci_a_missing_program_fails(nothing_found, monkeypatch):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true and curl not found"):
        require("curl")


def test_install_without_a_way_names_each_program_and_fails_only_under_ci(nothing_found, monkeypatch, capsys):
    ran = []
    monkeypatch.delenv("CI", raising=False)
    assert install(run=lambda command: ran.append(command) or 1) == 0
    assert ran and ran[0][1:] == ["-m", "playwright", "install", "chromium"]  # its own download
    assert capsys.readouterr().err.splitlines() == [missing_line("chromium"), missing_line("curl")]
    monkeypatch.setenv("CI", "true")
    assert install(run=lambda command: 1) == 1


def test_install_asks_apt_for_the_missing_packages_where_this_user_may(monkeypatch):
    found = {"chromium": None, "curl": "/usr/bin/curl"}
    monkeypatch.setattr(system_programs, "FINDERS", {k: (lambda k=k: found[k]) for k in found})
    monkeypatch.setattr(system_programs, "_apt_prefix", lambda: ["sudo", "-n"])
    ran = []

    def run(command):
        ran.append(command)
        if "install" in command and command[:2] == ["sudo", "-n"]:
            found["chromium"] = "/usr/bin/chromium"  # apt-get installed it
        return 0

    monkeypatch.setenv("CI", "true")
    assert install(run=run) == 0
    assert ran[0] == ["sudo", "-n", "apt-get", "update", "-q"]
    assert ran[1][:2] == ["sudo", "-n"] and ran[1][-1] == "chromium" and "curl" not in ran[1]
    assert len(ran) == 2  # nothing more once apt-get has it
