"""`AtomicOutput`: an output file is replaced whole or not at all; links, modes and devices
are respected. (The `aiayn translate -o` tests in test_translate.py run it end to end.)"""

from __future__ import annotations

import os
import stat

import pytest

from aiayn.errors import ConfigError
from aiayn.outfile import AtomicOutput, refuse_output_among_inputs


def test_an_existing_file_is_replaced_only_when_complete(tmp_path):
    out = tmp_path / "out.txt"
    out.write_text("old\n", encoding="utf-8")
    with pytest.raises(KeyError):
        with AtomicOutput(str(out)) as writer:
            writer.handle.write("half\n")
            writer.handle.flush()
            assert out.read_text(encoding="utf-8") == "old\n"  # not yet replaced
            raise KeyError("bad input halfway")
    assert out.read_text(encoding="utf-8") == "old\n"
    assert os.listdir(tmp_path) == ["out.txt"]  # no temporary left behind
    with AtomicOutput(str(out)) as writer:
        writer.handle.write("new\n")
    assert out.read_text(encoding="utf-8") == "new\n" and os.listdir(tmp_path) == ["out.txt"]


def test_a_new_file_is_absent_after_a_failure(tmp_path):
    out = tmp_path / "new.txt"
    writer = AtomicOutput(str(out))
    writer.handle.write("half\n")
    writer.close(complete=False)
    assert os.listdir(tmp_path) == []


def test_a_link_keeps_pointing_at_its_target_whose_mode_is_kept(tmp_path):
    real, link = tmp_path / "real.txt", tmp_path / "link.txt"
    real.write_text("old\n", encoding="utf-8")
    real.chmod(0o640)
    link.symlink_to(real)
    with AtomicOutput(str(link)) as writer:
        writer.handle.write("new\n")
    assert link.is_symlink() and real.read_text(encoding="utf-8") == "new\n"
    assert stat.S_IMODE(real.stat().st_mode) == 0o640


def test_a_device_is_written_as_it_is_and_stdout_is_not_closed(capsys):
    with AtomicOutput(os.devnull) as writer:
        assert writer.tmp is None
        writer.handle.write("gone\n")
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)
    with AtomicOutput(None) as writer:
        writer.handle.write("to stdout\n")
    assert capsys.readouterr().out == "to stdout\n"


def test_an_unwritable_output_fails_at_once_naming_it(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        AtomicOutput(str(tmp_path / "no-dir" / "out.txt"))
    assert err.value.filename.endswith("no-dir/out.txt")


def test_an_output_that_is_an_input_is_refused(tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("x\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="is also an input"):
        refuse_output_among_inputs(str(src), None, str(src))
    refuse_output_among_inputs(str(tmp_path / "other.txt"), str(src))  # absent: nothing to lose
