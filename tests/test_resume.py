"""Exact resume: 10 + 10 updates equal 20 bit for bit; a run killed at any moment (SIGKILL,
even mid-write) leaves a complete checkpoint to resume from; Ctrl-C saves and exits 130."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import aiayn.checkpoint as checkpoint
import aiayn.train.resume as run_state
from aiayn.checkpoint import Checkpoint
from aiayn.cli import main
from aiayn.config import save_yaml
from aiayn.errors import ConfigError
from aiayn.train.run_dir import resume_candidates, step_checkpoints, step_name
from aiayn.train.trainer import train
from tiny_run import one_thread, prepared_data, tiny_config  # noqa: F401 (autouse fixture)

# dropout on (so the RNG matters), small batches (so 20 updates cross an epoch), a validation
# and a checkpoint inside the run
EXACT = ("model.p_drop=0.1", "data.max_tokens=200", "train.accum_steps=4",
         "train.save_every_steps=10", "train.valid_every_steps=5")  # fmt: skip


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return prepared_data(tmp_path_factory.mktemp("data"))


def test_ten_plus_ten_updates_equal_twenty_bit_for_bit(data, tmp_path, monkeypatch):
    whole = train(tiny_config(data, tmp_path / "whole", *EXACT))
    assert whole.epoch >= 1  # the data position is restored across an epoch boundary
    first = train(tiny_config(data, tmp_path / "split", *EXACT, "train.max_steps=10"))
    assert first.steps == 10
    second = train(tiny_config(data, tmp_path / "split", *EXACT), resume=tmp_path / "split")
    assert second.steps == 20
    a, b = Checkpoint(whole.final_checkpoint).read_weights(), Checkpoint(second.final_checkpoint).read_weights()
    assert all(torch.equal(a[name], b[name]) for name in a)
    state_a, tensors_a = Checkpoint(whole.final_checkpoint).trainer_state
    state_b, tensors_b = Checkpoint(second.final_checkpoint).trainer_state
    assert state_a["sampler"] == state_b["sampler"] and state_a["rng"] == state_b["rng"]
    assert all(torch.equal(tensors_a[name], tensors_b[name]) for name in tensors_a)
    # the test has teeth: without the RNG states (dropout masks) the weights differ
    monkeypatch.setattr(run_state, "restore_rng", lambda *args: torch.manual_seed(123))
    other = train(tiny_config(data, tmp_path / "split", *EXACT, "train.out_dir=" +
                              str(tmp_path / "other")), resume=first.final_checkpoint)  # fmt: skip
    c = Checkpoint(other.final_checkpoint).read_weights()
    assert not all(torch.equal(a[name], c[name]) for name in a)


def _start(args: list[str], **kwargs) -> subprocess.Popen:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    return subprocess.Popen([sys.executable, *args], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, **kwargs)  # fmt: skip


def _wait_for(predicate, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None:
            raise AssertionError(f"training exited with {proc.returncode}: {proc.stderr.read()}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("timed out waiting for the training process")
        time.sleep(0.05)


def _newest_step(out: Path) -> int:
    found = step_checkpoints(out / "checkpoints")
    return found[-1][0] if found else 0


# `aiayn train ARGS...` that SIGKILLs itself at one chosen moment, installed from outside the
# library: `python -c KILL_AT MOMENT N ARGS...`. N counts what the moment names.
KILL_AT = """
import os, shutil, signal, sys
from pathlib import Path
import aiayn.checkpoint as checkpoint
from aiayn.model.transformer import Transformer

moment, n = sys.argv[1], int(sys.argv[2])
step = f"step-{n:06d}"

def die():
    os.kill(os.getpid(), signal.SIGKILL)

if moment in ("update", "validation"):  # the n-th forward of this process, training or dev
    real_encode, calls = Transformer.encode, []
    def encode(self, *args, **kwargs):
        if self.training == (moment == "update"):  # the trainer validates in eval mode
            calls.append(1)
            if len(calls) == n:
                die()
        return real_encode(self, *args, **kwargs)
    Transformer.encode = encode
elif moment == "weights":  # half of step n's weights file written
    real_save = checkpoint.save_file
    def save_file(tensors, filename, *args, **kwargs):
        real_save(tensors, filename, *args, **kwargs)
        if step in filename and filename.endswith(checkpoint.WEIGHTS):
            os.truncate(filename, os.path.getsize(filename) // 2)
            die()
    checkpoint.save_file = save_file
elif moment == "renames":  # (n unused) best/ moved aside, its replacement not yet renamed into place
    real_replace = os.replace
    def replace(src, dst, *args, **kwargs):
        real_replace(src, dst, *args, **kwargs)
        if Path(src).name == "best":
            die()
    os.replace = replace
elif moment == "pruning":  # step n's weights deleted, the rest of it not yet
    real_rmtree = shutil.rmtree
    def rmtree(path, *args, **kwargs):
        if Path(path).name in (step, f".{step}.deleting"):
            (Path(path) / checkpoint.WEIGHTS).unlink()
            die()
        real_rmtree(path, *args, **kwargs)
    shutil.rmtree = rmtree
from aiayn.cli import main
sys.exit(main(["train", *sys.argv[3:]]))
"""

# dropout on (the RNG matters), 2 micro-batches an update, a save every update (so pruning
# too: keep_last 2), a validation every 3 (`best/` replaced)
KILLED = ("model.p_drop=0.1", "train.accum_steps=2", "train.save_every_steps=1",
          "train.keep_last=2", "train.valid_every_steps=3")  # fmt: skip


def _killed_at(moment: str, n: int, args: list[str]) -> None:
    proc = _start(["-c", KILL_AT, moment, str(n), *args])
    try:
        _, stderr = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == -signal.SIGKILL, f"{moment}: exited {proc.returncode}: {stderr}"


def _same_as_reference(out: Path, reference: Path) -> list[int]:
    """Every complete checkpoint of the killed run (step-* and best/) holds exactly the
    weights of the uninterrupted run at its step; -> the steps present."""
    saved = step_checkpoints(out / "checkpoints")
    kept = [path for _, path in saved]
    if (out / "checkpoints" / "best").is_dir():
        kept.append(out / "checkpoints" / "best")
    for path in kept:
        step = Checkpoint(path).meta["step"]
        ours, theirs = Checkpoint(path).read_weights(), Checkpoint(reference / step_name(step)).read_weights()
        assert all(torch.equal(ours[name], theirs[name]) for name in theirs), path
    return [step for step, _ in saved]


def test_sigkill_at_each_moment_loses_nothing_and_the_resumed_run_is_exact(data, tmp_path):
    """Killed (SIGKILL: no handler runs) mid-update, mid-write of a checkpoint's weights,
    between the two renames that replace `best/`, during validation and while pruning an
    old checkpoint, one after the other, each run resumed from what its predecessor left:
    every complete checkpoint survives each kill, each resume starts from the newest, and
    the end equals an uninterrupted run's bit for bit."""
    end = 12
    whole = train(tiny_config(data, tmp_path / "whole", *KILLED, f"train.max_steps={end}",
                              "train.keep_last=100"))  # fmt: skip
    reference = whole.out_dir / "checkpoints"
    out, ckpts = tmp_path / "run", tmp_path / "run" / "checkpoints"
    save_yaml(tiny_config(data, out, *KILLED, "train.max_steps=100"), tmp_path / "c.yaml")
    resume = ["--resume", str(out)]

    _killed_at("update", 6, [str(tmp_path / "c.yaml")])  # update 3, its second micro-batch
    assert _same_as_reference(out, reference) == [1, 2]
    _killed_at("weights", 5, resume)  # updates 3-4, then step 5's weights half written
    assert _same_as_reference(out, reference) == [3, 4]
    assert len(list(ckpts.glob(".step-000005.tmp-*"))) == 1  # the half-written one, aside
    _killed_at("renames", 0, resume)  # update 5, then update 6's new best/
    assert _same_as_reference(out, reference) == [4, 5]
    assert not (ckpts / "best").exists() and len(list(ckpts.glob(".best.old-*"))) == 1
    _killed_at("validation", 2, resume)  # the old best/ put back; update 6's validation
    assert _same_as_reference(out, reference) == [4, 5]
    assert Checkpoint(ckpts / "best").meta["step"] == 3 and not list(ckpts.glob(".*"))
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert [(r["event"], r["step"]) for r in log[-2:]] == [("start", 5), ("train", 6)]
    _killed_at("pruning", 5, resume)  # updates 6-7, then step 5 pruned (keep_last 2)
    assert _same_as_reference(out, reference) == [6, 7]
    assert (ckpts / ".step-000005.deleting").is_dir()

    result = train(tiny_config(data, out, *KILLED, f"train.max_steps={end}"), resume=out)
    assert result.steps == end and _same_as_reference(out, reference) == [end - 1, end]
    state, tensors = Checkpoint(ckpts / step_name(end)).trainer_state
    state_ref, tensors_ref = Checkpoint(reference / step_name(end)).trainer_state
    assert state["sampler"] == state_ref["sampler"] and state["rng"] == state_ref["rng"]
    assert all(torch.equal(tensors[name], tensors_ref[name]) for name in tensors_ref)
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if r["event"] == "start"] == [0, 2, 4, 5, 5, 7]
    assert not list(ckpts.glob(".*"))  # the killed runs' temporaries are gone
    assert sorted(p.name for p in ckpts.iterdir()) == ["best", "step-000011", "step-000012"]


def test_ctrl_c_saves_a_checkpoint_and_exits_130(data, tmp_path):
    out = tmp_path / "run"
    save_yaml(tiny_config(data, out, "train.max_steps=100000", "train.save_every_steps=2"),
              tmp_path / "c.yaml")  # fmt: skip
    proc = _start(["-m", "aiayn", "train", str(tmp_path / "c.yaml")])
    _wait_for(lambda: _newest_step(out) >= 2, proc)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "SIGINT: saving a checkpoint" in stderr and "training stopped (interrupted)" in stderr
    end = json.loads((out / "train_log.jsonl").read_text().splitlines()[-1])
    assert end["event"] == "end" and end["stopped"] == "interrupted"
    newest = resume_candidates(out)[0]
    assert Checkpoint(newest).trainer_state[0]["loop"]["step"] == end["step"]


def test_disk_full_mid_run_stops_clearly_and_the_last_checkpoint_resumes(
    data, tmp_path, monkeypatch, capsys
):
    real = checkpoint.save_file

    def full_from_step_3(tensors, filename, *args, **kwargs):
        if ".step-000003.tmp-" in filename:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), filename)
        return real(tensors, filename, *args, **kwargs)

    monkeypatch.setattr(checkpoint, "save_file", full_from_step_3)
    out = tmp_path / "run"
    save_yaml(tiny_config(data, out, "train.save_every_steps=1"), tmp_path / "c.yaml")
    assert main(["train", str(tmp_path / "c.yaml")]) == 2
    err = capsys.readouterr().err
    assert "aiayn train: error: " in err and "step-000003: cannot write the checkpoint" in err
    assert "No space left on device" in err
    saved = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert saved == ["step-000001", "step-000002"]  # step 3's temporary is gone too
    monkeypatch.setattr(checkpoint, "save_file", real)
    assert train(tiny_config(data, out, "train.max_steps=4"), resume=out).steps == 4


def test_the_trainer_uses_fused_adam_and_resumes_a_per_parameter_adams_state():
    """A checkpoint's optimizer state says what Adam has seen, not how to compute it: the
    state of a per-parameter (unfused) Adam loads into the trainer's fused one, which then
    takes the same step."""
    from aiayn.config import TrainConfig
    from aiayn.train.schedule import make_optimizer
    from aiayn.train.state_json import optimizer_from_json, optimizer_to_json

    torch.manual_seed(0)
    start = [torch.randn(5, 3), torch.randn(7)]
    grads = [[torch.randn_like(p) for p in start] for _ in range(3)]

    def adam(params, fused):
        return torch.optim.Adam(params, lr=1e-2, betas=(0.9, 0.98), eps=1e-9, fused=fused)

    def step(optimizer, params, g):
        for p, gp in zip(params, g):
            p.grad = gp.clone()
        optimizer.step()

    plain = [p.clone().requires_grad_() for p in start]
    plain_opt = adam(plain, fused=False)
    for g in grads[:2]:
        step(plain_opt, plain, g)
    scalars, tensors = optimizer_to_json(plain_opt)
    tensors = {name: t.clone() for name, t in tensors.items()}  # as if read from the file
    resumed = [p.detach().clone().requires_grad_() for p in plain]
    fused_opt = make_optimizer(resumed, TrainConfig())
    assert fused_opt.param_groups[0]["fused"] is True
    optimizer_from_json(fused_opt, scalars, tensors)
    assert fused_opt.param_groups[0]["fused"] is True and fused_opt.param_groups[0]["lr"] == 1e-2
    step(plain_opt, plain, grads[2])
    step(fused_opt, resumed, grads[2])
    for a, b in zip(resumed, plain):
        torch.testing.assert_close(a, b)


def test_resuming_a_biased_run_without_its_option_names_the_option(data, tmp_path):
    # Runs started before `attention_bias` existed had attention biases; their recipe, run
    # again with --resume, now builds a bias-free model: the error says what to add.
    first = train(tiny_config(data, tmp_path / "run", "model.attention_bias=true",
                              "train.max_steps=2"))  # fmt: skip
    with pytest.raises(checkpoint.CheckpointError, match="add model.attention_bias=true"):
        train(tiny_config(data, tmp_path / "run", "train.max_steps=4"), resume=first.final_checkpoint)


def test_a_new_run_into_a_runs_out_dir_is_refused_and_nothing_there_changes(data, tmp_path):
    # Mixed in, the new run's pruning would delete its own checkpoints as the oldest (or the
    # old run's), and its worse model would replace `best/`.
    old = train(tiny_config(data, tmp_path / "run", "train.max_steps=6",
                            "train.save_every_steps=2", "train.valid_every_steps=6"))  # fmt: skip
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "run").rglob("*")}
    with pytest.raises(ConfigError, match=r"already holds a run .*step-000006.*--resume"):
        train(tiny_config(data, tmp_path / "run", "train.max_steps=2"))
    other = train(tiny_config(data, tmp_path / "other", "train.max_steps=2"))
    with pytest.raises(ConfigError, match="already holds a run"):  # another run's
        train(tiny_config(data, tmp_path / "run", "train.max_steps=4"), resume=other.out_dir)
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "run").rglob("*")} == before
    # continuing the run itself, from its newest or an older checkpoint, is what --resume is for
    assert train(tiny_config(data, tmp_path / "run", "train.max_steps=8"),
                 resume=old.out_dir).steps == 8  # fmt: skip
    older = tmp_path / "run" / "checkpoints" / "step-000006"
    again = train(tiny_config(data, tmp_path / "run", "train.max_steps=10"), resume=older)
    assert again.steps == 10


def test_resuming_an_older_checkpoint_sets_the_newer_ones_aside(data, tmp_path):
    # Branching off at step 4 of a run that reached 6: left in place, step 6 passed for the
    # newest, so pruning deleted the resumed run's own step 5, `--resume` and `average --last`
    # took the abandoned line, and a model worse than step 6's best could replace `best/`.
    run, ckpts = tmp_path / "run", tmp_path / "run" / "checkpoints"
    train(tiny_config(data, run, "train.max_steps=6", "train.save_every_steps=2",
                      "train.keep_last=2", "train.valid_every_steps=6"))  # fmt: skip
    step6, best = Checkpoint(ckpts / "step-000006").read_weights(), Checkpoint(ckpts / "best").read_weights()
    aside = ckpts / "abandoned-after-step-000004"
    with pytest.warns(UserWarning, match=f"moved the newer step-000006, best to {aside}"):
        again = train(tiny_config(data, run, "train.max_steps=5", "train.save_every_steps=1",
                                  "train.keep_last=1"), resume=ckpts / "step-000004")  # fmt: skip
    assert again.final_checkpoint == ckpts / "step-000005" and again.final_checkpoint.is_dir()
    assert [p.name for _, p in step_checkpoints(ckpts)] == ["step-000005"]
    assert resume_candidates(run)[0] == ckpts / "step-000005"
    assert sorted(p.name for p in aside.iterdir()) == ["best", "step-000006"]  # nothing lost
    for kept, saved in ((aside / "step-000006", step6), (aside / "best", best)):
        assert all(torch.equal(t, saved[name]) for name, t in Checkpoint(kept).read_weights().items())


@pytest.mark.parametrize(
    "damage, named",
    [("no sampler", "lacks 'sampler'"), ("no rng tensor", "lacks 'rng.0.torch'"),
     ("newer version", "trainer state version 99"), ("odd loop", "malformed trainer state")],
)  # fmt: skip
def test_a_damaged_trainer_state_is_named_and_the_previous_checkpoint_resumes(
    data, tmp_path, damage, named
):
    from safetensors.torch import load_file, save_file

    run = tmp_path / "run"
    train(tiny_config(data, run, "train.max_steps=4", "train.save_every_steps=2"))
    newest = run / "checkpoints" / "step-000004"
    state = json.loads((newest / "trainer_state.json").read_text())
    if damage == "no sampler":
        del state["sampler"]
    elif damage == "no rng tensor":
        tensors = load_file(newest / "trainer_state.safetensors")
        del tensors["rng.0.torch"]
        save_file(tensors, newest / "trainer_state.safetensors")
    elif damage == "newer version":
        state["version"], state["loop"]["new_field"] = 99, 1
    else:
        state["loop"]["surprise"] = 1
    (newest / "trainer_state.json").write_text(json.dumps(state))
    with pytest.raises(checkpoint.CheckpointError, match=f"could be resumed: .*{named}"):
        train(tiny_config(data, run, "train.max_steps=6"), resume=newest)
    with pytest.warns(UserWarning, match=f"skipping {newest}: .*{named}"):
        result = train(tiny_config(data, run, "train.max_steps=6", "train.save_every_steps=2"),
                       resume=run)  # fmt: skip
    assert result.steps == 6 and result.final_checkpoint.name == "step-000006"
    assert (run / "checkpoints" / "abandoned-after-step-000002" / "step-000004").is_dir()


def test_a_resume_takes_adams_betas_and_eps_from_its_config_and_says_so(data, tmp_path):
    # The optimizer state is the checkpoint's, its settings the run's: config.yaml of the
    # new checkpoints records the overrides, so they must be what the updates use.
    from aiayn.config import TrainConfig
    from aiayn.train.schedule import make_optimizer
    from aiayn.train.state_json import optimizer_from_json, optimizer_to_json

    params = [torch.randn(3, requires_grad=True)]
    saved = make_optimizer(params, TrainConfig())
    params[0].grad = torch.ones(3)
    saved.step()
    scalars, tensors = optimizer_to_json(saved)
    resumed = make_optimizer(params, TrainConfig(betas=(0.5, 0.9), adam_eps=1e-6))
    changed = optimizer_from_json(resumed, scalars, tensors)
    assert changed == ["betas (0.9, 0.98) -> (0.5, 0.9)", "eps 1e-09 -> 1e-06"]
    group = resumed.param_groups[0]
    assert group["betas"] == (0.5, 0.9) and group["eps"] == 1e-6
    assert torch.equal(resumed.state[params[0]]["exp_avg"], saved.state[params[0]]["exp_avg"])
    assert optimizer_from_json(make_optimizer(params, TrainConfig()), scalars, tensors) == []
    train(tiny_config(data, tmp_path / "run", "train.max_steps=2"))
    changes = r"Adam's betas \(0.9, 0.98\) -> \(0.5, 0.9\), eps 1e-09 -> 1e-06 from .* not an exact"
    with pytest.warns(UserWarning, match=changes):
        train(tiny_config(data, tmp_path / "run", "train.max_steps=3", "train.betas=[0.5,0.9]",
                          "train.adam_eps=1e-6"), resume=tmp_path / "run")  # fmt: skip


def test_resuming_from_a_missing_directory_says_it_is_missing(tmp_path):
    with pytest.raises(checkpoint.CheckpointError, match="nope: no such directory to resume"):
        resume_candidates(tmp_path / "nope")


def test_a_row_e_run_saved_with_one_shared_table_says_it_cannot_resume(data, tmp_path):
    # Its weights load into both tables (for translating, averaging), but its optimizer
    # state has one parameter fewer: resuming ended in a traceback from torch.
    from safetensors.torch import load_file, save_file

    run = tmp_path / "run"
    config = tiny_config(data, run, "model.positional=learned", "model.max_len=64",
                         "train.max_steps=2")  # fmt: skip
    last = train(config).final_checkpoint
    weights = load_file(last / "model.safetensors")
    del weights["tgt_positional.weight"]  # as saved before the decoder had its own
    save_file(weights, last / "model.safetensors", metadata={"format": "aiayn-checkpoint"})
    meta = json.loads((last / "checkpoint.json").read_text())
    del meta["weights_sha256"]  # nor was a digest recorded then
    (last / "checkpoint.json").write_text(json.dumps(meta))
    checkpoint.load_checkpoint(last)  # translating works
    with pytest.raises(checkpoint.CheckpointError, match="shared one table of learned positions"):
        train(tiny_config(data, run, "model.positional=learned", "model.max_len=64",
                          "train.max_steps=4"), resume=last)  # fmt: skip
