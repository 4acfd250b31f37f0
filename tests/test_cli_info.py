import json
import sys
import warnings

from aiayn.cli import main
from aiayn.config import ModelConfig
from aiayn.model.transformer import parameter_count


def test_info_json_has_params_and_every_model_field(capsys):
    assert main(["info", "big", "--vocab-size", "40000", "--json", "d_ff=1000"]) == 0
    info = json.loads(capsys.readouterr().out)
    for field in ModelConfig.__dataclass_fields__:
        assert field in info
    assert info["d_ff"] == 1000 and info["vocab_size"] == 40000 and info["d_k"] == 64
    expected = ModelConfig(vocab_size=40000, d_model=1024, n_heads=16, d_ff=1000, p_drop=0.3)
    assert info["params"] == parameter_count(expected)


def test_info_text_and_config_file(tmp_path, capsys):
    (tmp_path / "m.yaml").write_text("model:\n  d_model: 256\n  n_layers: 2\n")
    assert main(["info", str(tmp_path / "m.yaml")]) == 0
    out = capsys.readouterr().out
    assert "d_model" in out and "256" in out and "params" in out


def test_info_bad_preset_is_a_clear_error(capsys):
    assert main(["info", "bass"]) == 2
    err = capsys.readouterr().err
    assert "bass" in err and "base" in err and "Traceback" not in err


def test_a_second_ctrl_c_ends_any_command_with_one_line_and_code_130(capsys, monkeypatch):
    # `train` saves on the first Ctrl-C and exits 130 itself; a second one, or one during
    # `prepare` or `translate`, reaches the command line as KeyboardInterrupt.
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr("aiayn.cli._run_info", interrupted)
    assert main(["info", "base"]) == 130
    assert capsys.readouterr().err == "aiayn info: interrupted\n"


def test_warnings_print_as_one_line_of_the_command(tmp_path, capsys):
    # Python's default shows the file, line number and source line of the warnings.warn call.
    from tiny_checkpoint import save_tiny_checkpoint

    ckpt = save_tiny_checkpoint(tmp_path / "learned", positional="learned", max_len=12)
    src = tmp_path / "long.txt"
    src.write_text(" ".join(["the cat sat on a mat"] * 6) + "\n", encoding="utf-8")
    with warnings.catch_warnings():  # as Python shows a warning when nothing records it
        warnings.simplefilter("always")
        warnings.showwarning = lambda message, category, filename, lineno, file=None, line=None: (
            sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))
        )
        assert main(["translate", "--checkpoint", str(ckpt), "-i", str(src)]) == 0
    err = capsys.readouterr().err
    assert err.startswith("aiayn translate: warning: ") and "truncated" in err
    assert "warnings.warn" not in err and ".py:" not in err
    with warnings.catch_warnings(record=True) as seen:  # a caller recording still records
        warnings.simplefilter("always")
        assert main(["translate", "--checkpoint", str(ckpt), "-i", str(src)]) == 0
    assert any("truncated" in str(w.message) for w in seen)
