"""Every recipe in configs/ (the paper's, Table 3's rows, Multi30k) loads, builds its model
and takes one training step on tiny data."""

from pathlib import Path

import pytest
import torch

from aiayn.config import load_config, preset
from aiayn.model.transformer import Transformer
from aiayn.loss import label_smoothed_loss
from aiayn.train.schedule import make_optimizer, noam_lr, set_lr

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
RECIPES = sorted(CONFIGS.rglob("*.yaml"))
TABLE3_ROWS = sorted(p.stem for p in (CONFIGS / "table3").glob("*.yaml"))


def test_every_table3_row_has_a_config():
    from aiayn.config import PRESETS

    assert TABLE3_ROWS == sorted(set(PRESETS) - {"base", "big"})
    assert {"wmt14_en_de_base", "wmt14_en_de_big", "wmt14_en_fr_big", "multi30k"} <= {
        p.stem for p in RECIPES
    }


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_recipe_builds_and_takes_one_training_step(path):
    config = load_config(str(path), ["model.vocab_size=300"])  # tiny data's vocabulary
    model = Transformer(config.model)
    optimizer = make_optimizer(model.parameters(), config.train)
    set_lr(optimizer, noam_lr(1, config.model.d_model, config.train.warmup, config.train.lr_scale))
    src = torch.randint(4, 300, (2, 5))
    tgt_in, tgt_out = torch.randint(4, 300, (2, 4)), torch.randint(4, 300, (2, 4))
    before = model.encoder[0].ffn.w_1.weight.detach().clone()
    smoothed, _ = label_smoothed_loss(model(src, tgt_in), tgt_out, config.train.eps_ls, pad_id=0)
    smoothed.backward()
    optimizer.step()
    assert torch.isfinite(smoothed)
    assert not torch.equal(before, model.encoder[0].ffn.w_1.weight)


def test_paper_recipes_say_what_the_paper_says():
    base = load_config(str(CONFIGS / "wmt14_en_de_base.yaml"))
    big = load_config(str(CONFIGS / "wmt14_en_de_big.yaml"))
    fr = load_config(str(CONFIGS / "wmt14_en_fr_big.yaml"))
    assert base.model == preset("base").model and big.model == preset("big").model
    assert (base.train.max_steps, big.train.max_steps) == (100000, 300000)
    assert (base.train.keep_last, big.train.keep_last) == (5, 20)
    assert (big.model.p_drop, fr.model.p_drop) == (0.3, 0.1)
    for config in (base, big, fr):
        assert config.train.update_tokens == 25000 and config.train.warmup == 4000
        assert config.train.save_every_minutes == 10 and config.train.eps_ls == 0.1
        assert (config.decode.beam, config.decode.alpha, config.decode.max_len_offset) == (4, 0.6, 50)
