"""`torchrun --nproc_per_node 2` on CPU (gloo): both ranks end with the same weights, and
they equal one process accumulating twice as many micro-batches (sec. 5.1's batches split
over devices change nothing but the speed)."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from aiayn.checkpoint import Checkpoint
from aiayn.config import save_yaml
from aiayn.data.batching import TokenBatchSampler
from aiayn.data.binarize import BinarizedDataset
from aiayn.errors import ConfigError
from aiayn.train import distributed
from aiayn.train.trainer import train
from tiny_run import one_thread, prepared_data, tiny_config  # noqa: F401 (autouse fixture)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def even_budget(data: Path) -> int:
    """A batch budget whose epoch has an even number of batches: then 2 ranks share exactly
    the batches one process sees (an odd count would make the sampler split one)."""
    train_set = BinarizedDataset(data, "train")
    for max_tokens in range(200, 400, 10):
        if len(TokenBatchSampler(train_set.src_lengths, train_set.tgt_lengths, max_tokens)) % 2 == 0:
            return max_tokens
    raise AssertionError("no budget with an even batch count")


@pytest.mark.parametrize("compiled", [False, True])
def test_two_ranks_equal_one_process_with_twice_the_accumulation(tmp_path, compiled):
    """Also with `train.compile` on the ranks (DDP around the compiled network), against
    the eager single process."""
    data = prepared_data(tmp_path / "data")
    common = ("train.max_steps=3", "model.p_drop=0.0", f"data.max_tokens={even_budget(data)}")
    ranks = tiny_config(data, tmp_path / "ddp", *common, "train.accum_steps=1",
                        f"train.compile={str(compiled).lower()}")  # fmt: skip
    save_yaml(ranks, tmp_path / "c.yaml")
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
        "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
        "-m", "aiayn", "train", str(tmp_path / "c.yaml"),
    ]  # fmt: skip
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:  # the workers' own error lines first, then the tail
        causes = [line for line in done.stderr.splitlines()
                  if any(k in line for k in ("Error", "error:", "terminate", "what()"))]  # fmt: skip
        raise AssertionError("\n".join(causes[:20]) + "\n...\n" + done.stderr[-3000:])
    log = [json.loads(line) for line in (tmp_path / "ddp" / "train_log.jsonl").read_text().splitlines()]
    end = log[-1]
    assert end["event"] == "end" and end["step"] == 3
    digests = end["rank_weights_sha256"]
    assert len(digests) == 2 and digests[0] == digests[1]  # the ranks hold identical weights

    single = train(tiny_config(data, tmp_path / "one", *common, "train.accum_steps=2"))
    ddp = Checkpoint(tmp_path / "ddp" / "checkpoints" / "step-000003").read_weights()
    one = Checkpoint(single.final_checkpoint).read_weights()
    for name, tensor in one.items():
        torch.testing.assert_close(ddp[name], tensor, rtol=0, atol=1e-5)
    # Adam hides a constant gradient scale; the logged gradient norms and losses do not
    one_log = [json.loads(line) for line in (tmp_path / "one" / "train_log.jsonl").read_text().splitlines()]
    for key in ("grad_norm", "loss", "tokens"):
        ours = [r[key] for r in log if r["event"] == "train"]
        assert ours == pytest.approx([r[key] for r in one_log if r["event"] == "train"], rel=1e-5)
    valid = [r for r in log if r["event"] == "valid"][-1]  # each rank validated half the set
    assert valid["tokens"] == single.last_valid["tokens"]
    assert valid["nll"] == pytest.approx(single.last_valid["nll"], abs=1e-5)


# `aiayn train CONFIG`, but rank 1 dies abruptly (no cleanup, as an OOM kill or a segfault
# would) in its third micro-batch, after the ranks have begun to exchange gradients; it
# writes the moment (time.time()) to DIED first.
DIE_ON_RANK_1 = """
import os, sys, time
from aiayn.fast.loss import ChunkedRealTokenLoss
real, calls = ChunkedRealTokenLoss.forward, []
def loss(self, *args, **kwargs):
    calls.append(1)
    if os.environ["RANK"] == "1" and len(calls) == 3:
        with open(sys.argv[2] + ".tmp", "w") as stamp:
            stamp.write(repr(time.time()))
        os.replace(sys.argv[2] + ".tmp", sys.argv[2])
        os._exit(17)
    return real(self, *args, **kwargs)
ChunkedRealTokenLoss.forward = loss
from aiayn.cli import main
sys.exit(main(["train", sys.argv[1]]))
"""
# A hang guard, not a speed: the survivors' end is event-driven (their next collective finds
# the peer's socket closed; under torchrun the agent sees the death and stops them), while a
# hang would last gloo's collective timeout, 30 minutes. A busy machine may take tens of
# seconds to tear processes down; it does not take 5 minutes.
ENDS_WITHIN_S = 300  # from the rank's death to the end of the others


def _ended_after_death(procs: list[subprocess.Popen], died: Path) -> list[tuple[int, str]]:
    """Wait for the death (the start may be slow on a loaded machine), then at most
    ENDS_WITHIN_S for every process to end (a hang guard); -> their (exit code, stderr)."""
    deadline = time.monotonic() + 300
    while not died.exists() and any(p.poll() is None for p in procs):
        assert time.monotonic() < deadline, "rank 1 never reached its third micro-batch"
        time.sleep(0.05)
    assert died.exists(), [p.stderr.read() for p in procs]
    death = float(died.read_text())
    ended = []
    try:
        for proc in procs:
            left = death + ENDS_WITHIN_S - time.time()
            try:
                _, err = proc.communicate(timeout=max(left, 0.0))
            except subprocess.TimeoutExpired:
                raise AssertionError(f"still running {ENDS_WITHIN_S} s after rank 1 died") from None
            ended.append((proc.returncode, err))
    finally:
        for proc in procs:
            proc.kill()
    assert time.time() - death < ENDS_WITHIN_S
    return ended


@pytest.mark.parametrize("launcher", ["torchrun", "direct"])
def test_a_dying_rank_ends_the_run_with_an_error_not_a_hang(tmp_path, launcher):
    """Under torchrun the agent stops the survivor; launched directly (as a survivor on
    another node is) the survivor's own collective fails. Either way: an error, not a hang
    (ENDS_WITHIN_S guards the difference)."""
    data = prepared_data(tmp_path / "data")
    config = tiny_config(data, tmp_path / "run", "train.max_steps=1000", "train.accum_steps=1")
    save_yaml(config, tmp_path / "c.yaml")
    script, died = tmp_path / "die.py", tmp_path / "died"
    script.write_text(DIE_ON_RANK_1)
    args, port = [str(script), str(tmp_path / "c.yaml"), str(died)], str(free_port())
    env = dict(os.environ, OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    pipes = dict(stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if launcher == "torchrun":
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                   "--master_addr", "127.0.0.1", "--master_port", port, *args]  # fmt: skip
        [(code, stderr)] = _ended_after_death([subprocess.Popen(command, env=env, **pipes)], died)
        assert code != 0
        assert re.search(r"rank\s*: 1 .*\n.*exitcode\s*: 17", stderr)  # the cause, named
    else:
        ranks = [
            subprocess.Popen([sys.executable, *args], **pipes,
                             env=dict(env, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE="2"))
            for r in (0, 1)
        ]  # fmt: skip
        (code_0, survivor_err), (code_1, _) = _ended_after_death(ranks, died)
        assert code_1 == 17 and code_0 > 0, survivor_err  # > 0: an error, not a signal
        assert "RuntimeError" in survivor_err
    log = (tmp_path / "run" / "train_log.jsonl").read_text()
    assert '"event": "start"' in log and '"event": "end"' not in log


def test_teardown_meets_at_a_barrier_after_success_and_not_after_an_error(monkeypatch):
    from aiayn.train import distributed

    calls: list[str] = []
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: True)
    monkeypatch.setattr(distributed.dist, "barrier", lambda: calls.append("barrier"))
    monkeypatch.setattr(distributed.dist, "destroy_process_group", lambda: calls.append("destroy"))
    env = distributed.DistEnv(rank=0, world_size=2, local_rank=0, device=torch.device("cpu"))
    distributed.teardown(env)
    assert calls == ["barrier", "destroy"]
    calls.clear()
    distributed.teardown(env, synchronize=False)  # a failed rank's peers may never arrive
    assert calls == ["destroy"]


def test_train_tears_down_without_the_barrier_when_the_run_fails(monkeypatch, tmp_path):
    from aiayn.train import distributed, trainer

    seen: list[bool] = []
    record = lambda env, synchronize=True: seen.append(synchronize)  # noqa: E731
    monkeypatch.setattr(distributed, "teardown", record)

    def fail(self):
        raise RuntimeError("loss is NaN")

    monkeypatch.setattr(trainer.Trainer, "__init__", lambda self, *a: None)
    monkeypatch.setattr(trainer.Trainer, "run", fail)
    config = tiny_config(prepared_data(tmp_path / "data"), tmp_path / "run")
    with pytest.raises(RuntimeError, match="NaN"):
        train(config)
    monkeypatch.setattr(trainer.Trainer, "run", lambda self: "result")
    assert train(config) == "result"
    assert seen == [False, True]


@pytest.mark.parametrize(("world_size", "ended"), [("2", True), ("1", False)])
def test_a_rank_of_aiayn_train_ends_without_the_interpreters_finalization(
    monkeypatch, capsys, world_size, ended
):
    """Under torchrun, `aiayn train` ends its process with the command's status once the run
    is over (gloo's threads may still take the GIL while the interpreter finalizes; see
    `end_rank_process`), its output flushed; alone, it returns as every command does."""
    from aiayn import cli

    exits: list[int] = []
    monkeypatch.setenv("WORLD_SIZE", world_size)
    monkeypatch.setattr(distributed.os, "_exit", exits.append)
    monkeypatch.setattr(cli, "_run_train", lambda args: print("trained") or 130)
    assert cli.main(["train", "base"]) == 130
    assert exits == ([130] if ended else [])
    assert capsys.readouterr().out == "trained\n"

    def refuse(args):
        raise ConfigError("bad config")

    monkeypatch.setattr(cli, "_run_train", refuse)  # a rank's named error: status 2, as alone
    assert cli.main(["train", "base"]) == 2
    assert exits == ([130, 2] if ended else [])
    assert "aiayn train: error: bad config" in capsys.readouterr().err
    exits.clear()
    cli.main(["info", "base"])  # other commands never end the process themselves
    assert exits == []


def test_a_device_that_cannot_be_used_is_named_before_anything_starts():
    with pytest.raises(ConfigError, match="train.device='gpu' is not a device"):
        distributed.setup("gpu")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="train.device='cuda' but no CUDA GPU"):
            distributed.setup("cuda")
