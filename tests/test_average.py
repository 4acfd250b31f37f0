"""Checkpoint averaging (sec. 6.1): the mean of the weights; one architecture only."""

from __future__ import annotations

import pytest
import torch

from aiayn.average import average_checkpoints, average_weights, last_checkpoints
from aiayn.checkpoint import Checkpoint, load_checkpoint
from aiayn.cli import main
from aiayn.errors import CheckpointError
from aiayn.checkpoint import save_checkpoint
from aiayn.config import Config
from aiayn.model.transformer import Transformer
from conftest import tiny_model_config
from tiny_checkpoint import tiny_vocab


def save_tiny_checkpoint(path, seed: int = 0, **model):
    """A d_model-16 checkpoint whose random weights depend on `seed`."""
    vocab = tiny_vocab()
    config = Config(model=tiny_model_config(vocab_size=vocab.size, **model))
    torch.manual_seed(seed)
    return save_checkpoint(path, Transformer(config.model), config, vocab, vocab)


def test_two_checkpoints_average_to_their_mean(tmp_path):
    a = save_tiny_checkpoint(tmp_path / "a", seed=1)
    b = save_tiny_checkpoint(tmp_path / "b", seed=2)
    wa, wb = Checkpoint(a).read_weights(), Checkpoint(b).read_weights()
    assert any(not torch.equal(wa[k], wb[k]) for k in wa)
    out = average_checkpoints([a, b], tmp_path / "avg")
    averaged = Checkpoint(out).read_weights()
    for name in wa:
        torch.testing.assert_close(averaged[name], (wa[name] + wb[name]) / 2)
    loaded = load_checkpoint(out)  # a plain checkpoint: translate can load it
    assert loaded.meta["averaged_from"] == [str(a.resolve()), str(b.resolve())]


def test_averaging_one_checkpoint_is_the_identity(tmp_path):
    a = save_tiny_checkpoint(tmp_path / "a")
    for name, tensor in average_weights([a]).items():
        assert torch.equal(tensor, Checkpoint(a).read_weights()[name])


def test_different_architectures_are_refused_with_the_difference_named(tmp_path):
    a = save_tiny_checkpoint(tmp_path / "a")
    b = save_tiny_checkpoint(tmp_path / "b", d_ff=64)
    with pytest.raises(CheckpointError, match=r"different architectures \(model.d_ff: 32 vs 64\)"):
        average_weights([a, b])
    assert not (tmp_path / "avg").exists()


def test_cli_last_n_of_a_run_and_inputs(tmp_path, capsys):
    run = tmp_path / "run" / "checkpoints"
    for step in (1, 2, 3):
        save_tiny_checkpoint(run / f"step-{step:06d}", seed=step)
    assert [p.name for p in last_checkpoints(tmp_path / "run", 2)] == ["step-000002", "step-000003"]
    assert main(["average", "--last", "2", str(tmp_path / "run"), "--out", str(tmp_path / "avg")]) == 0
    expected = average_weights([run / "step-000002", run / "step-000003"])
    for name, tensor in Checkpoint(tmp_path / "avg").read_weights().items():
        assert torch.equal(tensor, expected[name])
    assert main(["average", "--last", "4", str(tmp_path / "run"), "--out", str(tmp_path / "x")]) == 2
    assert "3 step checkpoint(s) found, 4 asked for" in capsys.readouterr().err
    save_tiny_checkpoint(tmp_path / "big", d_model=32)
    args = ["average", "--inputs", str(run / "step-000001"), str(tmp_path / "big")]
    assert main([*args, "--out", str(tmp_path / "y")]) == 2
    assert "different architectures" in capsys.readouterr().err and not (tmp_path / "y").exists()
    assert main(["average", "--inputs", str(run / "step-000001"), "--out", str(tmp_path / "avg")]) == 2
    assert "already exists" in capsys.readouterr().err


def test_an_output_that_holds_an_input_is_refused_and_left_as_it_was(tmp_path, capsys):
    # `--out` the run directory itself, with --force, would have replaced every checkpoint
    # of the run by their average.
    run = tmp_path / "run" / "checkpoints"
    for step in (1, 2):
        save_tiny_checkpoint(run / f"step-{step:06d}", seed=step)
    before = Checkpoint(run / "step-000001").read_weights()
    for out in (tmp_path / "run", run / "step-000001"):
        args = ["average", "--last", "2", str(tmp_path / "run"), "--out", str(out), "--force"]
        assert main(args) == 2
        assert f"{out}: is or holds the input checkpoint" in capsys.readouterr().err
    assert sorted(p.name for p in run.iterdir()) == ["step-000001", "step-000002"]
    for name, tensor in Checkpoint(run / "step-000001").read_weights().items():
        assert torch.equal(tensor, before[name])


def test_force_replaces_only_a_checkpoint(tmp_path, capsys):
    a = save_tiny_checkpoint(tmp_path / "a", seed=1)
    mine = tmp_path / "mine"
    (mine / "other-run").mkdir(parents=True)
    (mine / "notes.txt").write_text("precious")
    args = ["average", "--inputs", str(a), "--out", str(mine), "--force"]
    assert main(args) == 2
    assert "exists and is not an aiayn checkpoint" in capsys.readouterr().err
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt", "other-run"]
    assert main(["average", "--inputs", str(a), "--out", str(tmp_path / "avg")]) == 0
    assert main(["average", "--inputs", str(a), "--out", str(tmp_path / "avg"), "--force"]) == 0


def test_every_input_must_be_an_aiayn_checkpoint(tmp_path, capsys):
    a = save_tiny_checkpoint(tmp_path / "a", seed=1)
    b = save_tiny_checkpoint(tmp_path / "b", seed=2)
    (a / "checkpoint.json").unlink()  # only the last input's metadata used to be read
    assert main(["average", "--inputs", str(a), str(b), "--out", str(tmp_path / "avg")]) == 2
    assert f"{a}: not an aiayn checkpoint" in capsys.readouterr().err
    assert not (tmp_path / "avg").exists()


def test_missing_directories_are_named_as_missing(tmp_path, capsys):
    # They were "config.yaml is missing" and "0 step checkpoint(s) found".
    a = save_tiny_checkpoint(tmp_path / "a", seed=1)
    out = ["--out", str(tmp_path / "avg")]
    assert main(["average", "--inputs", str(tmp_path / "nope"), str(a), *out]) == 2
    assert f"{tmp_path / 'nope'}: no such checkpoint directory" in capsys.readouterr().err
    assert main(["average", "--last", "2", str(tmp_path / "norun"), *out]) == 2
    assert f"{tmp_path / 'norun'}: no such directory" in capsys.readouterr().err
