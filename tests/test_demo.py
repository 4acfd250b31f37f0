"""`aiayn demo --fast`: the README's main job, end to end, in seconds."""

import re

from aiayn.checkpoint import load_checkpoint
from aiayn.cli import main
from aiayn.demo import demo_config


def test_fast_demo_runs_end_to_end(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--fast", "--out", str(out)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert re.fullmatch(r"BLEU \d+\.\d\d", lines[-1])  # the last line is the score
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
