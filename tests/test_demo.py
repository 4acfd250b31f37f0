"""`aiayn demo --fast`: the README's main job, end to end, in seconds."""

import re

import pytest

from aiayn.checkpoint import load_checkpoint
from aiayn.cli import main
from aiayn.demo import _claim, demo_config
from aiayn.errors import ConfigError


# What the fast demo's model scores, measured on one machine: BLEU 27.26 (chrF 51.0) with
# `aiayn demo --fast`, 28.48 with one torch thread (sums in another order). The same run with
# train.lr_scale=0 (the weights never leave their initialisation): BLEU 0.04 (chrF 2.9); this
# model after 100 updates (warm-up 30): 1.08; the 6-update fast demo this floor replaced:
# 0.00 ("." for every sentence). A floor of 10 lies well between: an untrained, collapsed or
# broken model cannot reach it, a trained one clears it with room for other CPUs' rounding.
BLEU_FLOOR = 10.0


def test_fast_demo_runs_end_to_end(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--fast", "--out", str(out)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert re.fullmatch(r"BLEU \d+\.\d\d", lines[-1])  # the last line is the score
    assert float(lines[-1].split()[1]) >= BLEU_FLOOR, lines[-1]
    assert any(line.startswith("  REF  ") for line in lines)  # examples with references
    ckpt = load_checkpoint(out / "checkpoint")
    assert len(ckpt.meta["averaged_from"]) == 3  # the final model is an average
    for split in ("train", "valid", "test"):
        assert (out / "corpus" / f"{split}.de").stat().st_size > 0
        assert (out / "data" / f"{split}.tgt.bin").stat().st_size > 0


def test_demo_config_is_the_paper_recipe_at_demo_size(tmp_path):
    config = demo_config(tmp_path / "data", tmp_path)
    assert config.train.betas == (0.9, 0.98) and config.train.eps_ls == 0.1
    assert (config.decode.beam, config.decode.alpha) == (4, 0.6)
    assert config.model.norm == "post" and config.model.tie_embeddings
    assert config.data.dir == str(tmp_path / "data")
    assert config.train.out_dir == str(tmp_path / "train")


def test_demo_refuses_a_directory_that_is_not_a_demos_and_deletes_nothing(tmp_path, capsys):
    # A demo replaces its corpus/, data/, train/ and checkpoint/ on every run: an --out that
    # names some other directory by mistake must lose nothing.
    other = tmp_path / "project"
    (other / "data").mkdir(parents=True)
    (other / "data" / "notes.txt").write_text("keep me")
    assert main(["demo", "--fast", "--out", str(other)]) == 2
    assert "not a demo's" in capsys.readouterr().err
    assert sorted(p.name for p in other.rglob("*")) == ["data", "notes.txt"]
    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert main(["demo", "--fast", "--out", str(a_file)]) == 2
    assert "not a directory" in capsys.readouterr().err and a_file.read_text() == "x"
    # a demo's own directory (what `make demo` reruns into) is claimed again
    ours = _claim(tmp_path / "ours")
    (ours / "checkpoint").mkdir()
    assert _claim(ours) == ours
    for extra in [None, "notes.txt"]:  # a demo's from before the mark: only what it writes
        older = tmp_path / f"older-{extra}"
        (older / "corpus").mkdir(parents=True)
        (older / "corpus" / "train.en").write_text("a\n")
        if extra is None:
            assert _claim(older) == older
            continue
        (older / extra).write_text("not a demo's")
        with pytest.raises(ConfigError, match="not a demo's"):
            _claim(older)
