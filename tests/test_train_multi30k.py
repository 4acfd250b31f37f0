"""On real data (Multi30k, when the shared copy is present): a small Transformer trained for
about a minute and a half on one CPU thread brings the dev perplexity far below where it
started (a random model's is about the vocabulary size)."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

import pytest

from aiayn.config import Config, apply_overrides
from aiayn.recipes.multi30k import OPTIONS, prepare_multi30k
from aiayn.train import distributed
from aiayn.train.trainer import Trainer, train
from aiayn.train.validate import validation_loss
from conftest import SHARED_DATA
from tiny_run import one_thread  # noqa: F401 (autouse fixture)

MULTI30K = SHARED_DATA / "multi30k"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (MULTI30K / "train.en.gz").is_file(), reason=f"no Multi30k at {MULTI30K}"),
]


def test_a_small_model_learns_multi30k_in_a_minute_and_a_half(tmp_path: Path) -> None:
    data = tmp_path / "prepared"
    options = replace(OPTIONS, vocab_size=4000, vocab_sample_sentences=20_000, workers=1,
                      quiet=True)  # fmt: skip  # the recipe's: no cleaning
    prepare_multi30k(MULTI30K, data, options)
    config = apply_overrides(Config(), [
        f"data.dir={data}", f"train.out_dir={tmp_path / 'run'}", "train.device=cpu",
        "model.d_model=128", "model.n_heads=4", "model.d_ff=256", "model.n_layers=2",
        "data.max_tokens=1500", "train.update_tokens=3000", "train.warmup=300",
        "train.max_time_minutes=1.4", "train.valid_every_steps=0", "train.valid_bleu_lines=20",
        "train.save_every_minutes=0", "train.log_every_steps=20",
    ])  # fmt: skip
    fresh = Trainer(config, distributed.setup("cpu"), resume=None)
    start = validation_loss(fresh.loss, fresh.data.valid, 1500, fresh.env, nullcontext())
    assert start["ppl"] > 1000  # about the 4000-piece vocabulary: a random model
    result = train(config)
    assert result.stopped == "max_time" and result.steps >= 40
    end = result.last_valid
    assert end["tokens"] == start["tokens"] and 0.0 <= end["bleu"] <= 100.0
    assert end["ppl"] < start["ppl"] / 10, (start, end)
