"""Tiny prepared data and configs for the training tests: a few hundred demo-corpus pairs,
a 400-piece vocabulary, a d_model-16 model; a run of 20 updates takes about a second."""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

import pytest
import torch

from aiayn.config import Config, apply_overrides
from aiayn.data.demo_corpus import DemoSplits, demo_splits, write_splits
from aiayn.data.prepare import prepare
from aiayn.data.prepare_options import PrepareOptions
from conftest import tiny_model_config


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread: on a shared 2-core machine more threads only spin against others."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@functools.lru_cache(maxsize=None)
def _prepared(root: str, n_train: int) -> Path:
    out = Path(root) / "prepared"
    if (out / "manifest.json").is_file():
        return out
    splits: DemoSplits = demo_splits(n_train=n_train, n_valid=40, n_test=1, seed=7)
    raw = write_splits(splits, Path(root) / "raw")
    prepare(train=raw["train"], valid=raw["valid"], out=out,
            options=PrepareOptions(vocab_size=400, workers=1, quiet=True))  # fmt: skip
    return out


def prepared_data(tmp_root: Path, n_train: int = 300) -> Path:
    """A prepared directory (built once per `tmp_root`, e.g. a session temp dir)."""
    return _prepared(str(tmp_root), n_train)


def tiny_config(data_dir: Path, out_dir: Path, *overrides: str) -> Config:
    """A d_model-16 model on `data_dir`, small batches, no clock-based saves."""
    config = Config(model=tiny_model_config())
    base = [
        f"data.dir={data_dir}", "data.max_tokens=200", f"train.out_dir={out_dir}",
        "train.update_tokens=300", "train.warmup=10", "train.max_steps=20",
        "train.save_every_minutes=0", "train.valid_every_steps=0", "train.device=cpu",
        "train.log_every_steps=1",
    ]  # fmt: skip
    return apply_overrides(config, [*base, *overrides])


def copy_run(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst
