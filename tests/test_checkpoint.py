import errno
import json
import os
import pickle
from pathlib import Path

import pytest
import torch
from safetensors import SafetensorError
from safetensors.torch import save_file

import aiayn.atomic_dir as atomic_dir
import aiayn.checkpoint as checkpoint
from aiayn.checkpoint import (
    SHARED_VOCAB,
    WEIGHTS,
    load_checkpoint,
    model_weights,
    Checkpoint,
    save_checkpoint,
)
from aiayn.config import Config
from aiayn.data.vocab import Vocab
from aiayn.errors import CheckpointError
from aiayn.model.transformer import Transformer
from conftest import tiny_model_config

WORDS = "the cat sat on a mat der Hund die Katze sitzt auf einer Matte".split()


@pytest.fixture(scope="module")
def vocab():
    import random

    rng = random.Random(0)
    lines = [" ".join(rng.choice(WORDS) for _ in range(8)) for _ in range(300)]
    return Vocab.train(lines, vocab_size=300)


def _saved(tmp_path, vocab, **overrides):
    config = Config(model=tiny_model_config(vocab_size=vocab.size, **overrides))
    model = Transformer(config.model)
    path = save_checkpoint(tmp_path / "ckpt", model, config, vocab, vocab, meta={"step": 7})
    return path, model, config


def _as_if_written_elsewhere(path):
    """Drop the weights' digest from the metadata, as a checkpoint written by another tool
    (or by aiayn before it recorded one) lacks it: its weights file may then be swapped."""
    meta = json.loads((path / checkpoint.META).read_text())
    del meta["weights_sha256"]
    (path / checkpoint.META).write_text(json.dumps(meta))


def test_round_trip_is_exact_and_tied_weights_stay_tied(tmp_path, vocab):
    path, model, config = _saved(tmp_path, vocab)
    loaded = load_checkpoint(path)
    assert loaded.config == config and loaded.meta["step"] == 7
    assert loaded.model.src_embed is loaded.model.tgt_embed
    for name, tensor in model_weights(model).items():
        torch.testing.assert_close(model_weights(loaded.model)[name], tensor, rtol=0, atol=0)
    assert loaded.tgt_vocab.sha256 == vocab.sha256 and not loaded.model.training


def test_rewriting_replaces_atomically_and_leaves_no_temporaries(tmp_path, vocab):
    path, _, _ = _saved(tmp_path, vocab)
    _saved(tmp_path, vocab)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_non_finite_weights_are_refused_and_the_old_checkpoint_survives(tmp_path, vocab):
    path, model, config = _saved(tmp_path, vocab)
    with torch.no_grad():
        model.encoder[0].ffn.w_1.weight[0, 0] = float("nan")
    with pytest.raises(CheckpointError, match="non-finite"):
        save_checkpoint(path, model, config, vocab, vocab)
    load_checkpoint(path)  # still the good one
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_a_foreign_checkpoints_non_finite_weights_or_odd_version_are_named(tmp_path, vocab):
    path, model, config = _saved(tmp_path, vocab)
    weights = Checkpoint(path).read_weights()
    weights["encoder.0.ffn.w_1.weight"][0, 0] = float("inf")
    save_file(weights, str(path / WEIGHTS))  # written by something other than aiayn
    _as_if_written_elsewhere(path)
    with pytest.raises(CheckpointError, match=r"non-finite weights in encoder\.0\.ffn\.w_1"):
        load_checkpoint(path)
    path, _, _ = _saved(tmp_path, vocab)
    meta = json.loads((path / checkpoint.META).read_text())
    for version, message in (("2", "version '2' is not a number"), (99, "version 99 is newer")):
        (path / checkpoint.META).write_text(json.dumps({**meta, "version": version}))
        with pytest.raises(CheckpointError, match=message):
            load_checkpoint(path)


def test_truncated_weights_are_a_clear_error(tmp_path, vocab):
    path, _, _ = _saved(tmp_path, vocab)
    data = (path / WEIGHTS).read_bytes()
    (path / WEIGHTS).write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        load_checkpoint(path)


def test_other_architecture_is_a_clear_error(tmp_path, vocab):
    path, _, _ = _saved(tmp_path, vocab)
    other, _, _ = _saved(tmp_path / "o", vocab, d_ff=48)
    (path / WEIGHTS).write_bytes((other / WEIGHTS).read_bytes())
    _as_if_written_elsewhere(path)
    with pytest.raises(CheckpointError, match="shape mismatch"):
        load_checkpoint(path)


def test_flipped_bytes_inside_the_weights_are_caught_by_their_digest(tmp_path, vocab):
    # Finite numbers, a valid file: only the SHA-256 recorded at save time tells.
    path, _, _ = _saved(tmp_path, vocab)
    data = bytearray((path / WEIGHTS).read_bytes())
    header = int.from_bytes(data[:8], "little")
    data[8 + header + 100 : 8 + header + 140] = b"\x3e" * 40  # 0x3e3e3e3e: 0.186
    (path / WEIGHTS).write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="truncated or corrupt: its SHA-256 differs"):
        load_checkpoint(path)
    _as_if_written_elsewhere(path)
    load_checkpoint(path)  # without a digest the same bytes load: the check is what caught it


def test_attention_has_no_biases_unless_configured_and_either_round_trips(tmp_path, vocab):
    for attention_bias in (False, True):
        path, model, _ = _saved(tmp_path / str(attention_bias), vocab, attention_bias=attention_bias)
        has_bias = {n for n in model_weights(model) if "_attn.w_" in n and n.endswith(".bias")}
        assert bool(has_bias) == attention_bias
        assert set(model_weights(load_checkpoint(path).model)) == set(model_weights(model))


def test_a_config_saved_before_attention_bias_existed_loads_with_biases(tmp_path, vocab):
    # Checkpoints list every config key; older ones lack `attention_bias` and had biases.
    path, model, _ = _saved(tmp_path, vocab, attention_bias=True)
    config_file = path / checkpoint.CONFIG
    lines = config_file.read_text("utf-8").splitlines(keepends=True)
    config_file.write_text("".join(x for x in lines if "attention_bias" not in x), "utf-8")
    loaded = load_checkpoint(path)
    assert loaded.config.model.attention_bias
    for name, tensor in model_weights(model).items():
        torch.testing.assert_close(model_weights(loaded.model)[name], tensor, rtol=0, atol=0)


def test_the_attention_window_round_trips_and_older_configs_load_with_full_attention(
    tmp_path, vocab
):
    path, _, _ = _saved(tmp_path, vocab, attention_window=3)
    assert load_checkpoint(path).config.model.attention_window == 3
    config_file = path / checkpoint.CONFIG
    lines = config_file.read_text("utf-8").splitlines(keepends=True)
    config_file.write_text("".join(x for x in lines if "attention_window" not in x), "utf-8")
    assert load_checkpoint(path).config.model.attention_window == 0


def test_biased_weights_under_a_bias_free_config_name_the_option(tmp_path, vocab):
    path, _, _ = _saved(tmp_path, vocab, attention_bias=True)
    config_file = path / checkpoint.CONFIG
    text = config_file.read_text("utf-8").replace("attention_bias: true", "attention_bias: false")
    config_file.write_text(text, "utf-8")
    with pytest.raises(CheckpointError, match="set model.attention_bias: true"):
        load_checkpoint(path)


def test_missing_vocabulary_is_a_clear_error(tmp_path, vocab):
    path, _, _ = _saved(tmp_path, vocab)
    (path / SHARED_VOCAB).unlink()
    with pytest.raises(CheckpointError, match="vocab.model is missing or invalid"):
        load_checkpoint(path)


class _Payload:
    def __reduce__(self):
        import pathlib

        return (pathlib.Path.touch, (pathlib.Path(self.marker),))


def test_a_pickle_is_never_loaded(tmp_path):
    directory = tmp_path / "foreign"
    directory.mkdir()
    payload = _Payload()
    payload.marker = str(tmp_path / "pwned")
    (directory / "model.pt").write_bytes(pickle.dumps(payload))
    with pytest.raises(CheckpointError, match="never loads pickle"):
        load_checkpoint(directory)
    assert not (tmp_path / "pwned").exists()


def test_trainer_state_round_trip_and_absence(tmp_path, vocab):
    config = Config(model=tiny_model_config(vocab_size=vocab.size))
    model = Transformer(config.model)
    state = {"step": 3, "rng": [1, 2]}
    tensors = {"adam.0.exp_avg": torch.randn(3)}
    path = save_checkpoint(tmp_path / "c", model, config, vocab, vocab, None, (state, tensors))
    got_state, got_tensors = Checkpoint(path).trainer_state
    assert got_state == state and torch.equal(got_tensors["adam.0.exp_avg"], tensors["adam.0.exp_avg"])
    plain, _, _ = _saved(tmp_path, vocab)
    with pytest.raises(CheckpointError, match="no trainer state"):
        Checkpoint(plain).trainer_state


def _plant_pickles(directory, marker):
    """A payload that would create `marker` if unpickled, under names a loader might try."""
    payload = _Payload()
    payload.marker = str(marker)
    data = pickle.dumps(payload)
    for name in ("model.pt", "optimizer.pt", "trainer_state.pkl"):
        (directory / name).write_bytes(data)
    return data


def test_pickles_beside_or_instead_of_the_weights_never_run(tmp_path, vocab):
    path, _, _ = _saved(tmp_path, vocab)
    marker = tmp_path / "pwned"
    data = _plant_pickles(path, marker)
    load_checkpoint(path)  # the safetensors weights load; the pickles are not opened
    assert not marker.exists()
    (path / WEIGHTS).write_bytes(data)  # a pickle under the weights' name
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        load_checkpoint(path)
    assert not marker.exists()


@pytest.mark.parametrize("fault", ["safetensors", "json"])
def test_disk_full_while_saving_keeps_the_previous_checkpoint(tmp_path, vocab, monkeypatch, fault):
    path, model, config = _saved(tmp_path, vocab)
    before = {p.name: p.read_bytes() for p in path.iterdir()}
    if fault == "safetensors":  # what safetensors raises on a full disk (seen on a tmpfs)
        message = "Error while serializing: I/O error: No space left on device (os error 28)"
        error: Exception = SafetensorError(message)
    else:
        error = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def full(*args, **kwargs):
        raise error

    monkeypatch.setattr(checkpoint, "save_file" if fault == "safetensors" else "_write_json", full)
    with torch.no_grad():
        model.encoder[0].ffn.w_1.weight.add_(1.0)
    with pytest.raises(CheckpointError, match="cannot write the checkpoint.*No space left"):
        save_checkpoint(path, model, config, vocab, vocab, meta={"step": 8})
    assert {p.name: p.read_bytes() for p in path.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # no temporary left
    assert load_checkpoint(path).meta["step"] == 7


def test_a_failed_final_rename_puts_the_previous_checkpoint_back(tmp_path, vocab, monkeypatch):
    path, model, config = _saved(tmp_path, vocab)
    before = {p.name: p.read_bytes() for p in path.iterdir()}
    real_replace = os.replace

    def replace(src, dst):  # the old checkpoint moves aside, then the new one cannot land
        if ".tmp-" in Path(src).name and Path(dst) == path:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        real_replace(src, dst)

    monkeypatch.setattr(atomic_dir.os, "replace", replace)
    with pytest.raises(CheckpointError, match="cannot write the checkpoint"):
        save_checkpoint(path, model, config, vocab, vocab, meta={"step": 8})
    assert {p.name: p.read_bytes() for p in path.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_ctrl_c_between_the_two_renames_puts_the_previous_checkpoint_back(
    tmp_path, vocab, monkeypatch
):
    # Ctrl-C raises wherever the process is: here after the old checkpoint moved aside and
    # before the new one landed, which used to leave only `.ckpt.old-PID`, deleted next start.
    path, model, config = _saved(tmp_path, vocab)
    before = {p.name: p.read_bytes() for p in path.iterdir()}
    real_replace = os.replace

    def replace(src, dst):
        if ".tmp-" in Path(src).name:
            raise KeyboardInterrupt
        real_replace(src, dst)

    monkeypatch.setattr(atomic_dir.os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(path, model, config, vocab, vocab, meta={"step": 8})
    assert {p.name: p.read_bytes() for p in path.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_a_checkpoint_a_killed_process_left_aside_is_put_back_not_deleted(tmp_path, vocab):
    # SIGKILL between the two renames leaves the only copy under `.NAME.old-PID`; a run's
    # start cleans its temporaries, and must first put such a checkpoint back.
    from aiayn.train.run_dir import RunDir

    runs = RunDir(tmp_path, keep_last=5, resume_from=None)
    config = Config(model=tiny_model_config(vocab_size=vocab.size))
    best = save_checkpoint(runs.dir / "best", Transformer(config.model), config, vocab, vocab)
    weights = (best / WEIGHTS).read_bytes()
    os.replace(best, runs.dir / ".best.old-4242")
    save_checkpoint(runs.dir / "step-000002", Transformer(config.model), config, vocab, vocab)
    os.replace(runs.dir / "step-000002", runs.dir / ".step-000002.old-4242")
    (runs.dir / "step-000002").mkdir()  # its replacement landed: the old one is garbage
    (runs.dir / ".step-000004.tmp-x").mkdir()  # a half-written one
    with pytest.warns(UserWarning, match="best: put back"):
        runs.clean_temporaries()
    assert sorted(p.name for p in runs.dir.iterdir()) == ["best", "step-000002"]
    assert (runs.best / WEIGHTS).read_bytes() == weights


def test_only_a_checkpoint_or_an_empty_directory_is_replaced(tmp_path, vocab):
    # A mistyped output path (`average --force --out ~/work`) must not delete the user's files.
    config = Config(model=tiny_model_config(vocab_size=vocab.size))
    model = Transformer(config.model)
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("keep me")
    (tmp_path / "file").write_text("keep me too")
    for path in (tmp_path / "notes", tmp_path / "file"):
        with pytest.raises(CheckpointError, match="exists and is not an aiayn checkpoint"):
            save_checkpoint(path, model, config, vocab, vocab)
    assert (tmp_path / "notes" / "todo.txt").read_text() == "keep me"
    assert (tmp_path / "file").read_text() == "keep me too"
    (tmp_path / "empty").mkdir()
    load_checkpoint(save_checkpoint(tmp_path / "empty", model, config, vocab, vocab))
    load_checkpoint(save_checkpoint(tmp_path / "empty", model, config, vocab, vocab))  # again
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "file", "notes"]


@pytest.mark.parametrize("umask, folder, file", [(0o022, 0o755, 0o644), (0o077, 0o700, 0o600),
                                                 (0o002, 0o775, 0o664)])  # fmt: skip
def test_a_checkpoint_gets_the_modes_of_the_umask(tmp_path, vocab, umask, folder, file):
    # mkdtemp's 0700 and safetensors' 0600 would keep a server of another user out.
    previous = os.umask(umask)
    try:
        path, _, _ = _saved(tmp_path, vocab)
    finally:
        os.umask(previous)
    assert path.stat().st_mode & 0o777 == folder
    assert {p.name: p.stat().st_mode & 0o777 for p in path.iterdir()} == {
        p.name: file for p in path.iterdir()
    }


def test_prepared_data_given_as_a_checkpoint_is_named_as_such(tmp_path):
    # Its token shards (*.bin) were listed as pickles that aiayn refuses to load.
    data = tmp_path / "data"
    data.mkdir()
    (data / "manifest.json").write_text("{}")
    (data / "train.src.bin").write_bytes(b"\0" * 8)
    with pytest.raises(CheckpointError, match="is prepared data .*not a checkpoint"):
        load_checkpoint(data)
