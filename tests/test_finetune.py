"""Fine-tuning: `aiayn prepare --vocab-from CKPT` encodes new text with a checkpoint's
vocabulary, and `aiayn train --init-from CKPT` starts a new run from its weights with a fresh
optimizer, schedule and data order; `--resume` still continues a run bit for bit. Tiny
models (d_model 16) on demo-corpus data, a few updates each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import marian_models as mm
from aiayn.checkpoint import Checkpoint, load_checkpoint
from aiayn.cli import main
from aiayn.convert import import_model
from aiayn.data.binarize import BinarizedDataset, load_vocabs
from aiayn.data.demo_corpus import demo_splits, write_splits
from aiayn.data.marian_vocab import MarianVocab
from aiayn.data.prepare import prepare
from aiayn.data.prepare_options import PrepareOptions
from aiayn.data.run_data import load_run_data
from aiayn.errors import CheckpointError, ConfigError, DataError
from aiayn.train.schedule import noam_lr
from aiayn.train.trainer import Trainer, train
from aiayn.train import distributed
from tiny_run import one_thread, prepared_data, tiny_config  # noqa: F401 (autouse fixture)


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """A checkpoint trained for 20 updates on the demo corpus (its own BPE)."""
    root = tmp_path_factory.mktemp("base")
    return train(tiny_config(prepared_data(root), root / "run")).final_checkpoint


@pytest.fixture(scope="module")
def new_text(tmp_path_factory) -> dict[str, Path]:
    """Other demo-corpus pairs (another seed): the data to adapt to."""
    splits = demo_splits(n_train=200, n_valid=20, n_test=5, seed=23)
    return write_splits(splits, tmp_path_factory.mktemp("new") / "raw")


def prepare_from(ckpt: Path, files: dict[str, Path], out: Path) -> Path:
    prepare(train=files["train"], valid=files["valid"], out=out,
            options=PrepareOptions(vocab_from=str(ckpt), workers=1, quiet=True))  # fmt: skip
    return out


def test_prepare_vocab_from_encodes_with_the_checkpoints_vocabulary(base, new_text, tmp_path):
    args = ["prepare", "--train", str(new_text["train"]), "--valid", str(new_text["valid"])]
    assert main([*args, "--vocab-from", str(base), "--out", str(tmp_path / "data"), "--quiet"]) == 0
    ckpt = load_checkpoint(base)
    src, tgt = load_vocabs(tmp_path / "data")
    assert src.model_bytes == tgt.model_bytes == ckpt.tgt_vocab.model_bytes  # no new BPE
    manifest = json.loads((tmp_path / "data" / "manifest.json").read_text())
    assert manifest["vocab"]["from_checkpoint"] == str(base.resolve())
    first = new_text["train"].with_suffix(".en").read_text(encoding="utf-8").splitlines()[0]
    encoded, _ = BinarizedDataset(tmp_path / "data", "train")[0]
    assert encoded.tolist() == ckpt.src_vocab.encode(first)


def test_prepare_vocab_from_refuses_a_vocabulary_size_too_and_what_is_no_checkpoint(
    base, new_text, tmp_path, capsys
):
    args = ["prepare", "--train", str(new_text["train"]), "--valid", str(new_text["valid"]),
            "--out", str(tmp_path / "data")]  # fmt: skip
    assert main([*args, "--vocab-from", str(base), "--vocab-size", "300"]) == 2
    assert "not both" in capsys.readouterr().err
    assert main([*args, "--vocab-from", str(new_text["train"].parent)]) == 2
    assert "not an aiayn checkpoint" in capsys.readouterr().err
    assert not (tmp_path / "data").exists()


def test_init_from_loads_the_weights_with_a_fresh_optimizer_and_schedule(base, new_text, tmp_path):
    data = prepare_from(base, new_text, tmp_path / "data")
    config = tiny_config(data, tmp_path / "run", "train.warmup=7", "train.lr_scale=0.5")
    env = distributed.setup("cpu")
    trainer = Trainer(config, env, None, init_from=base)
    expected = Checkpoint(base).read_weights()
    for name, tensor in trainer.model.state_dict().items():
        assert torch.equal(tensor, expected.get(name, tensor)), name
    assert trainer.state.step == 0 and trainer.optimizer.state_dict()["state"] == {}
    assert (trainer.data.sampler.epoch, trainer.data.sampler.index) == (0, 0)
    result = trainer.run()
    log = [json.loads(line) for line in (tmp_path / "run" / "train_log.jsonl").open()]
    first = next(r for r in log if r["event"] == "train")
    assert first["lr"] == pytest.approx(noam_lr(1, 16, 7) * 0.5)  # this run's schedule
    tuned = Checkpoint(result.final_checkpoint).read_weights()
    assert any(not torch.equal(tuned[k], expected[k]) for k in expected)  # and it trains


def test_init_from_refuses_another_vocabulary_architecture_or_a_resume(base, tmp_path, capsys):
    own = prepared_data(tmp_path / "other", n_train=200)  # its own BPE, of the same size
    with pytest.raises(DataError, match="prepare the data with `aiayn prepare --vocab-from"):
        train(tiny_config(own, tmp_path / "a"), init_from=base)
    data = Path(load_checkpoint(base).config.data.dir)
    with pytest.raises(ConfigError, match="its model.d_ff is 32, this run's 64; fine-tuning"):
        train(tiny_config(data, tmp_path / "b", "model.d_ff=64"), init_from=base)
    train(tiny_config(data, tmp_path / "c", "model.p_drop=0.3", "train.max_steps=1"),
          init_from=base)  # dropout is training, not architecture  # fmt: skip
    args = ["train", str(base / "config.yaml"), f"train.out_dir={tmp_path / 'd'}"]
    assert main([*args, "--init-from", str(base), "--resume", str(base)]) == 2
    assert "give one" in capsys.readouterr().err
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        train(tiny_config(data, tmp_path / "e"), init_from=tmp_path / "nothing")


def test_a_fine_tuning_run_resumes_bit_for_bit(base, new_text, tmp_path):
    data = prepare_from(base, new_text, tmp_path / "data")
    exact = ("model.p_drop=0.1", "train.accum_steps=2", "train.max_steps=8")
    whole = train(tiny_config(data, tmp_path / "whole", *exact), init_from=base)
    first = train(tiny_config(data, tmp_path / "split", *exact, "train.max_steps=4"),
                  init_from=base)  # fmt: skip
    assert first.steps == 4
    second = train(tiny_config(data, tmp_path / "split", *exact), resume=tmp_path / "split")
    a, b = Checkpoint(whole.final_checkpoint).read_weights(), Checkpoint(second.final_checkpoint).read_weights()
    assert second.steps == 8 and all(torch.equal(a[k], b[k]) for k in a)


def test_an_imported_opus_mt_model_fine_tunes_on_new_text(new_text, tmp_path):
    """MarianMT's vocabulary (two sentencepiece models, <pad> the decoder's start, </s> 0)
    through the whole path: prepare with it, train from the import, validate, translate."""
    directory = mm.build_marian(tmp_path / "hf")
    ckpt = import_model(directory, "huggingface", tmp_path / "opus")
    data = prepare_from(ckpt, new_text, tmp_path / "data")
    src, tgt = load_vocabs(data)
    assert isinstance(src, MarianVocab) and src.spm_bytes == (directory / "source.spm").read_bytes()
    assert tgt.spm_bytes == (directory / "target.spm").read_bytes()
    fresh = load_run_data(tiny_config(data, tmp_path / "fresh")).config.model  # the data's
    assert (fresh.vocab_format, fresh.pad_id, fresh.bos_id, fresh.eos_id) == (
        "marian", tgt.pad_id, tgt.pad_id, 0)  # fmt: skip
    args = ["train", str(ckpt / "config.yaml"), "--init-from", str(ckpt), f"data.dir={data}",
            f"train.out_dir={tmp_path / 'run'}", "train.max_steps=3", "train.warmup=2",
            "train.valid_every_steps=3", "train.valid_bleu_lines=4", "train.device=cpu",
            "data.max_tokens=400", "train.update_tokens=400",
            "train.save_every_minutes=0"]  # fmt: skip
    assert main(args) == 0
    log = [json.loads(line) for line in (tmp_path / "run" / "train_log.jsonl").open()]
    valid = next(r for r in log if r["event"] == "valid")
    assert valid["nll"] > 0 and "bleu" in valid
    tuned = tmp_path / "run" / "checkpoints" / "step-000003"
    assert load_checkpoint(tuned).config.model.vocab_format == "marian"
    (tmp_path / "in.txt").write_text("A man sleeps.\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    assert main(["translate", "--checkpoint", str(tuned), "-i", str(tmp_path / "in.txt"),
                 "-o", str(out), "--max-len-offset", "3"]) == 0  # fmt: skip
    assert len(out.read_text(encoding="utf-8").splitlines()) == 1
