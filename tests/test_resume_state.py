"""The training state alone, without a trainer: `collect_state` + `write_checkpoint` save a
`TrainingState` and `restore` loads it into fresh objects, which then take the same next
update as the originals (the trainer-level exact resume is in test_resume.py)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from aiayn.config import TrainConfig
from aiayn.data.batching import TokenBatchSampler, collate
from aiayn.data.run_data import load_run_data
from aiayn.errors import CheckpointError
from aiayn.model.transformer import Transformer
from aiayn.train.distributed import DistEnv
from aiayn.train.resume import LoopState, TrainingState, collect_state, restore, write_checkpoint
from aiayn.train.schedule import make_optimizer
from tiny_run import one_thread, prepared_data, tiny_config  # noqa: F401 (autouse fixture)

ENV = DistEnv(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return load_run_data(tiny_config(prepared_data(tmp_path_factory.mktemp("data")), "unused"))


def fresh_state(data, seed: int) -> TrainingState:
    torch.manual_seed(seed)
    model = Transformer(data.config.model)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    sampler = TokenBatchSampler(data.train.src_lengths, data.train.tgt_lengths, 200, seed=3)
    return TrainingState(model, make_optimizer(model.parameters(), TrainConfig()), scaler,
                         LoopState(accum_steps=1), sampler)  # fmt: skip


def next_batch(state: TrainingState, data):
    return collate([data.train[int(i)] for i in next(iter(state.sampler))])


def adam_step(state: TrainingState, batch) -> None:
    """One update on `batch` (the loss need not be the trainer's: any function of the model)."""
    src_pad = state.model.pad_mask(batch.src)  # (batch, src_len)
    hidden = state.model.decode(batch.tgt_in, state.model.encode(batch.src, src_pad), src_pad)
    state.model.project(hidden).logsumexp(-1).mean().backward()  # (batch, tgt_len) -> ()
    for group in state.optimizer.param_groups:
        group["lr"] = 1e-3
    state.optimizer.step()
    state.optimizer.zero_grad()
    state.loop.step += 1


def test_a_saved_state_restores_into_fresh_objects_that_then_take_the_same_update(data, tmp_path):
    saved = fresh_state(data, seed=1)
    adam_step(saved, next_batch(saved, data))
    saved.loop.tokens_seen, saved.loop.best_valid_nll = 1234, 2.5
    position = saved.sampler.state_dict()
    path = write_checkpoint(tmp_path / "ckpt", saved, data, collect_state(saved, ENV))
    expected = next_batch(saved, data)
    adam_step(saved, expected)

    loaded = fresh_state(data, seed=2)  # other weights, a sampler back at the start
    assert not torch.equal(loaded.model.src_embed.weight, saved.model.src_embed.weight)
    assert restore(loaded, [path], data, ENV) == path
    assert loaded.loop == LoopState(accum_steps=1, step=1, tokens_seen=1234, best_valid_nll=2.5)
    assert loaded.sampler.state_dict() == position
    batch = next_batch(loaded, data)  # where the saved run's data stood
    assert torch.equal(batch.src, expected.src)
    adam_step(loaded, batch)
    for (name, a), b in zip(saved.model.state_dict().items(), loaded.model.state_dict().values()):
        assert torch.equal(a, b), name  # Adam's moments came back too, or the update differs


def test_restore_refuses_a_checkpoint_of_another_architecture(data, tmp_path):
    state = fresh_state(data, seed=1)
    path = write_checkpoint(tmp_path / "ckpt", state, data, collect_state(state, ENV))
    model = dataclasses.replace(data.config.model, d_ff=48)
    other = dataclasses.replace(data, config=dataclasses.replace(data.config, model=model))
    with pytest.raises(CheckpointError, match="model.d_ff: 32 in the checkpoint, 48 now"):
        restore(fresh_state(other, seed=1), [path], other, ENV)
