"""The training loop: it learns, logs, keeps K checkpoints and the best, normalises the
gradient by the update's target tokens, stops where told, and survives non-finite losses."""

from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path

import pytest
import torch

import aiayn.fast.loss as loss_module
import aiayn.train.trainer as trainer_module
from aiayn.checkpoint import Checkpoint, load_checkpoint
from aiayn.cli import main
from aiayn.config import save_yaml
from aiayn.errors import CheckpointError, ConfigError, DataError, TrainingError
from aiayn.train import distributed
from aiayn.loss import label_smoothed_loss
from aiayn.train.trainer import Trainer, train
from aiayn.model.transformer import Transformer
from aiayn.fast.loss import ChunkedRealTokenLoss
from aiayn.loss import RealTokenLoss
from aiayn.train.validate import real_positions

CHUNKED_FORWARD = ChunkedRealTokenLoss.forward  # the trainer's loss, as tests patch it
from conftest import tiny_model_config
from tiny_run import one_thread, prepared_data, tiny_config  # noqa: F401 (autouse fixture)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return prepared_data(tmp_path_factory.mktemp("data"))


def log_lines(out_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (out_dir / "train_log.jsonl").read_text().splitlines()]


def test_a_short_run_learns_logs_and_keeps_the_last_and_best_checkpoints(data, tmp_path):
    config = tiny_config(data, tmp_path, "train.max_steps=30", "train.save_every_steps=5",
                         "train.keep_last=2", "train.valid_every_steps=10", "train.warmup=5")  # fmt: skip
    result = train(config)
    assert (result.steps, result.stopped) == (30, "max_steps")
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["best", "step-000025", "step-000030"]  # keep_last=2, no temporaries
    assert result.final_checkpoint == tmp_path / "checkpoints" / "step-000030"
    log = log_lines(tmp_path)
    train_nll = [r["nll"] for r in log if r["event"] == "train"]
    assert len(train_nll) == 30 and train_nll[-1] < train_nll[0] - 1.0
    valid = [r for r in log if r["event"] == "valid"]
    assert [r["step"] for r in valid] == [10, 20, 30] and valid[-1]["nll"] < valid[0]["nll"]
    assert valid[-1]["ppl"] == pytest.approx(math.exp(valid[-1]["nll"]))
    assert result.best_valid_nll == min(r["nll"] for r in valid)
    best = load_checkpoint(result.best_checkpoint)
    assert best.meta["valid"]["nll"] == result.best_valid_nll
    assert best.config.model.vocab_size == best.tgt_vocab.size  # taken from the data


@pytest.mark.parametrize("tied", [True, False])
def test_the_gradient_is_the_mean_over_the_updates_target_tokens(
    data, tmp_path, monkeypatch, tied, onednn
):
    """Accumulated micro-batches, each a sum over its tokens; / all tokens of the update.
    The reference builds the full logits; the trainer's chunked loss (one token a chunk
    here) must give the same gradients, with the output projection tied or not."""
    monkeypatch.setattr(loss_module, "CPU_CHUNK_ELEMENTS", 1)  # -> chunks of one row
    config = tiny_config(data, tmp_path, "train.accum_steps=3", "train.update_tokens=1000",
                         f"model.tie_embeddings={str(tied).lower()}")  # fmt: skip
    trainer = Trainer(config, distributed.setup("cpu"), resume=None)
    batches = [next(trainer.data.micro_batches()) for _ in range(3)]
    trainer.batches = iter(batches)
    reference = Trainer(config, distributed.setup("cpu"), resume=None).model
    total = sum(b.n_tgt_tokens for b in batches)
    loss = 0.0
    for b in batches:
        logits = reference(b.src, b.tgt_in)  # full logits; the pad positions drop out below
        loss = loss + label_smoothed_loss(logits, b.tgt_out, 0.1, pad_id=0)[0]
    (loss / total).backward()
    seen = {}
    monkeypatch.setattr(trainer.optimizer, "step", lambda: seen.update(
        {n: p.grad.clone() for n, p in trainer.model.named_parameters()}))  # fmt: skip
    trainer.monitor = trainer_module.Monitor(tmp_path, 0, 1, enabled=False)
    trainer._update()
    for name, param in reference.named_parameters():
        torch.testing.assert_close(seen[name], param.grad, rtol=1e-4, atol=1e-7)


def test_stops_at_max_epochs_and_max_time(data, tmp_path):
    by_epochs = train(tiny_config(data, tmp_path / "e", "train.max_steps=100000",
                                  "train.max_epochs=1", "train.accum_steps=1"))  # fmt: skip
    assert by_epochs.stopped == "max_epochs" and by_epochs.epoch == 0
    n_batches = len(Trainer(tiny_config(data, tmp_path / "x"), distributed.setup("cpu"), None)
                    .data.sampler)  # fmt: skip
    assert by_epochs.steps == n_batches
    by_time = train(tiny_config(data, tmp_path / "t", "train.max_steps=100000",
                                "train.max_time_minutes=0.00001"))  # fmt: skip
    assert (by_time.stopped, by_time.steps) == ("max_time", 1)
    assert by_time.final_checkpoint.is_dir()


def test_early_stopping_on_patience(data, tmp_path):
    # lr_scale 0 never changes the weights, so the dev loss never improves after the first
    config = tiny_config(data, tmp_path, "train.lr_scale=0", "train.valid_every_steps=1",
                         "train.patience=2", "train.max_steps=100")  # fmt: skip
    result = train(config)
    assert (result.stopped, result.steps) == ("patience", 3)


def _linear_output_dtypes(config) -> set[torch.dtype]:
    """Train `config` with a forward hook on every linear map (every nn.Linear: the
    attention projections, eq. 2's w_1, w_2), recording the dtype of what each produced
    while training (not validating)."""
    seen: set[torch.dtype] = set()

    def record(module, args, output) -> None:
        if isinstance(module, torch.nn.Linear) and module.training and torch.is_grad_enabled():
            seen.add(output.dtype)

    hook = torch.nn.modules.module.register_module_forward_hook(record)
    try:
        result = train(config)
    finally:
        hook.remove()
    assert result.steps == 3 and math.isfinite(result.train_nll)
    return seen


def test_bf16_autocast_trains_on_cpu_and_fp16_needs_a_gpu(data, tmp_path):
    # Inside the model, during real training steps on the CPU: bf16 runs the linear maps in
    # bfloat16, fp32 (the paper) in float32. A trainer that dropped autocast would still
    # train, with a finite loss, and fail here.
    bf16 = tiny_config(data, tmp_path / "bf16", "train.precision=bf16", "train.max_steps=3")
    assert _linear_output_dtypes(bf16) == {torch.bfloat16}
    fp32 = tiny_config(data, tmp_path / "fp32", "train.precision=fp32", "train.max_steps=3")
    assert _linear_output_dtypes(fp32) == {torch.float32}
    with pytest.raises(ConfigError, match="fp16 needs a CUDA GPU"):
        train(tiny_config(data, tmp_path / "fp16", "train.precision=fp16"))


@pytest.mark.parametrize("native", [True, False])
def test_auto_precision_is_bf16_where_the_cpu_multiplies_it(data, tmp_path, monkeypatch, native):
    """precision: auto trains in bfloat16 on a CPU that PyTorch reports as multiplying it
    natively (AVX-512 BF16 or AMX), in float32 elsewhere, and the log says which."""
    for check in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        monkeypatch.setattr(torch.cpu, check, lambda: native, raising=False)
    config = tiny_config(data, tmp_path / "auto", "train.precision=auto", "train.max_steps=3")
    assert _linear_output_dtypes(config) == {torch.bfloat16 if native else torch.float32}
    log = (tmp_path / "auto" / "train_log.jsonl").read_text().splitlines()
    start = next(json.loads(line) for line in log if '"start"' in line)
    assert start["precision"] == ("bf16" if native else "fp32")


def test_resolve_precision_keeps_explicit_choices_and_refuses_fp16_off_a_gpu():
    from aiayn.device import resolve_precision

    for precision in ("fp32", "bf16"):
        assert resolve_precision(precision, torch.device("cpu")) == precision
    with pytest.raises(ConfigError, match="fp16 needs a CUDA GPU"):
        resolve_precision("fp16", torch.device("cpu"))


def _nan_after(calls: list[int], first_bad: int, last_bad: float = math.inf):
    """The trainer's loss forward, but NaN for its training calls first_bad..last_bad
    (0-based); the dev loss's calls (eval mode) are not counted."""

    def loss(self, *args, **kwargs):
        smoothed, nll = CHUNKED_FORWARD(self, *args, **kwargs)
        if not self.model.training:
            return smoothed, nll
        calls.append(1)
        if first_bad <= len(calls) - 1 <= last_bad:
            return smoothed * math.nan, nll * math.nan
        return smoothed, nll

    return loss


def test_a_non_finite_loss_skips_its_update(data, tmp_path, monkeypatch):
    calls: list[int] = []
    # accum_steps 2: calls 6 and 7 are update 4's micro-batches; poison one of them
    monkeypatch.setattr(ChunkedRealTokenLoss, "forward", _nan_after(calls, 6, 6))
    result = train(tiny_config(data, tmp_path, "train.max_steps=10", "train.accum_steps=2"))
    assert result.steps == 10 and len(calls) == 2 * 11  # one update more: the skipped one
    skips = [r for r in log_lines(tmp_path) if r["event"] == "skip"]
    assert [(r["step"], r["in_a_row"]) for r in skips] == [(3, 1)]
    weights = Checkpoint(result.final_checkpoint).read_weights()
    assert all(t.isfinite().all() for t in weights.values())


def test_k_bad_updates_in_a_row_stop_the_run_and_the_last_good_checkpoint_survives(
    data, tmp_path, monkeypatch
):
    calls: list[int] = []
    monkeypatch.setattr(ChunkedRealTokenLoss, "forward", _nan_after(calls, 8))
    config = tiny_config(data, tmp_path, "train.save_every_steps=1", "train.max_bad_steps=3",
                         "train.accum_steps=2", "train.max_steps=50")  # fmt: skip
    with pytest.raises(TrainingError, match=r"3 updates in a row had a non-finite loss .*"
                       r"the last good checkpoint is \S+step-000004\. Lower"):  # fmt: skip
        train(config)
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names[-1] == "step-000004"  # updates 1-4 were good
    ckpt = load_checkpoint(tmp_path / "checkpoints" / "step-000004")
    assert all(p.isfinite().all() for p in ckpt.model.parameters())
    calls.clear()  # bad from the first update: nothing saved to point to
    config = tiny_config(data, tmp_path / "early", "train.max_bad_steps=2", "train.accum_steps=2")
    monkeypatch.setattr(ChunkedRealTokenLoss, "forward", _nan_after(calls, 0))
    with pytest.raises(TrainingError, match="no checkpoint had been saved yet"):
        train(config)
    monkeypatch.setattr(ChunkedRealTokenLoss, "forward", CHUNKED_FORWARD)
    resumed = train(tiny_config(data, tmp_path, "train.max_steps=6", "train.accum_steps=2"),
                    resume=tmp_path)  # fmt: skip
    assert resumed.steps == 6


def test_a_non_finite_dev_loss_stops_the_run_and_is_never_the_best(data, tmp_path, monkeypatch):
    # Weights can stay finite while the outputs overflow: the dev loss is then NaN. It was
    # saved as `best/` ("dev NLL nan (best)"), with NaN in its checkpoint.json.
    real, calls = trainer_module.validation_loss, []

    def diverged_at_third(*args, **kwargs):
        calls.append(1)
        stats = real(*args, **kwargs)
        return {**stats, "nll": math.nan, "ppl": math.inf} if len(calls) == 3 else stats

    monkeypatch.setattr(trainer_module, "validation_loss", diverged_at_third)
    config = tiny_config(data, tmp_path, "train.valid_every_steps=1", "train.max_steps=6")
    with pytest.raises(TrainingError, match=r"the dev loss is nan after update 3: the model "
                       r"has diverged; the best model so far is \S+best \(dev NLL"):  # fmt: skip
        train(config)
    best = load_checkpoint(tmp_path / "checkpoints" / "best")
    assert best.meta["step"] == 2 and math.isfinite(best.meta["valid"]["nll"])


def test_an_out_dir_that_is_a_file_is_named(data, tmp_path):
    (tmp_path / "afile").write_text("notes")  # was "afile: File exists", from mkdir
    with pytest.raises(ConfigError, match=r"train.out_dir=\S+afile is a file"):
        train(tiny_config(data, tmp_path / "afile"))
    assert (tmp_path / "afile").read_text() == "notes"


def test_shards_with_another_vocabulary_or_ids_it_lacks_are_refused(data, tmp_path):
    # vocab.model and vocab.json copied in from another `prepare`: the same size, but the
    # shards' ids would mean other subwords, and the checkpoints would carry the wrong one.
    import shutil

    other = prepared_data(tmp_path / "other", n_train=200)
    mixed = shutil.copytree(data, tmp_path / "mixed")
    for name in ("vocab.model", "vocab.json"):
        shutil.copy(other / name, mixed / name)
    with pytest.raises(DataError, match="src shards were built with a different vocabulary"):
        train(tiny_config(mixed, tmp_path / "run"))
    assert not (tmp_path / "run").exists()
    corrupt = shutil.copytree(data, tmp_path / "corrupt")  # an id the vocabulary lacks
    tokens = bytearray((corrupt / "valid.tgt.bin").read_bytes())
    tokens[-2:] = (60000).to_bytes(2, "little")  # uint16 shards
    (corrupt / "valid.tgt.bin").write_bytes(bytes(tokens))
    with pytest.raises(DataError, match="valid.tgt.bin: token id 60000 in a 400-token"):
        train(tiny_config(corrupt, tmp_path / "run"))


def test_examples_the_run_could_not_take_later_are_refused_before_it_starts(tmp_path):
    # The valid split is never filtered: a line longer than data.max_tokens used to stop the
    # run at its first validation, hours in; a line beyond learned positions, with a traceback.
    import dataclasses

    from aiayn.data.demo_corpus import demo_splits, write_splits
    from aiayn.data.prepare import prepare
    from aiayn.data.prepare_options import PrepareOptions

    splits = demo_splits(n_train=200, n_valid=10, n_test=1, seed=3)
    long = (" ".join(["the cat sat on the mat"] * 12), " ".join(["die Katze sitzt"] * 12))
    raw = write_splits(dataclasses.replace(splits, valid=[*splits.valid, long]), tmp_path / "raw")
    data = tmp_path / "data"
    prepare(train=raw["train"], valid=raw["valid"], out=data,
            options=PrepareOptions(vocab_size=400, workers=1, quiet=True))  # fmt: skip
    with pytest.raises(DataError, match=r"valid example 10 \(line 11\) has \d+ src positions .*"
                       r"more than data.max_tokens=60"):  # fmt: skip
        train(tiny_config(data, tmp_path / "a", "data.max_tokens=60"))
    learned = ("model.positional=learned", "model.max_len=12")
    with pytest.raises(DataError, match=r"train example \d+ has \d+ \w+ positions .*max_len=12"):
        train(tiny_config(data, tmp_path / "b", *learned))
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()  # nothing started
    assert train(tiny_config(data, tmp_path / "c", "train.max_steps=1")).steps == 1


def test_resuming_with_another_architecture_is_refused(data, tmp_path):
    train(tiny_config(data, tmp_path, "train.max_steps=2"))
    with pytest.raises(CheckpointError, match="model.d_ff: 32 in the checkpoint, 64 now"):
        train(tiny_config(data, tmp_path, "train.max_steps=4", "model.d_ff=64"), resume=tmp_path)


def test_cli_train_then_resume_with_overrides(data, tmp_path, capsys):
    save_yaml(tiny_config(data, tmp_path / "run", "train.max_steps=3"), tmp_path / "c.yaml")
    assert main(["train", str(tmp_path / "c.yaml")]) == 0
    assert "training stopped (max_steps) after 3 updates" in capsys.readouterr().err
    assert main(["train", "--resume", str(tmp_path / "run"), "train.max_steps=5"]) == 0
    assert load_checkpoint(tmp_path / "run" / "checkpoints" / "step-000005").meta["step"] == 5
    assert main(["train"]) == 2
    assert "give a PRESET_OR_CONFIG, or --resume DIR" in capsys.readouterr().err


def test_train_compile_runs_the_loss_compiled(data, tmp_path, monkeypatch):
    """`train.compile` reaches the fast loss; here the loss then runs eagerly, since what
    compiling computes is pinned by the test below and tests/fast/test_chunked_loss.py."""
    flags = []

    def loss(self, *args):
        flags.append(self.compiled)
        return RealTokenLoss.forward(self, *args)

    monkeypatch.setattr(ChunkedRealTokenLoss, "forward", loss)
    train(tiny_config(data, tmp_path / "compiled", "train.compile=true", "train.max_steps=2"))
    train(tiny_config(data, tmp_path / "eager", "train.max_steps=2"))
    assert set(flags[: len(flags) // 2]) == {True} and set(flags[len(flags) // 2 :]) == {False}


def test_training_and_validation_losses_run_in_the_attention_kernel_preference(
    data, tmp_path, monkeypatch
):
    """`train.attention_kernel` reaches `kernel_preference`, around the network of every
    loss the trainer computes (the fast loss enters it): the updates' and the dev loss's (on
    a CPU the preference itself is a no-op)."""
    entered, inside, calls = [], [], []

    @contextlib.contextmanager
    def preference(name, device):
        entered.append((name, device.type))
        inside.append(True)
        yield
        inside.pop()

    hidden = loss_module.real_token_hidden

    def network(*args):
        calls.append(bool(inside))
        return hidden(*args)

    monkeypatch.setattr(loss_module, "kernel_preference", preference)
    monkeypatch.setattr(loss_module, "real_token_hidden", network)
    config = tiny_config(data, tmp_path / "run", "train.attention_kernel=math",
                         "train.max_steps=2", "train.valid_every_steps=1")  # fmt: skip
    train(config)
    assert set(entered) == {("math", "cpu")}
    assert len(calls) > 2 and all(calls)  # two updates' losses and the dev losses


def test_compiled_real_token_loss_gives_the_eager_loss_and_gradients():
    """The network compiled (one graph, dynamic shapes) computes what it computes eagerly:
    two batches of different shapes, padding in each."""
    torch.manual_seed(0)
    model = Transformer(tiny_model_config())  # no dropout: the two runs are comparable
    for batch, src_len, tgt_len in ((3, 7, 5), (2, 9, 6)):
        src = torch.randint(4, 23, (batch, src_len))
        tgt = torch.randint(4, 23, (batch, tgt_len + 1))
        src[0, -2:] = tgt[1, -2:] = 0  # padding in both
        positions, target = real_positions(tgt[:, 1:], 0, torch.device("cpu"))
        results = []
        for compiled in (False, True):
            model.zero_grad()
            loss = ChunkedRealTokenLoss(model, 0.1, compiled)
            smoothed, nll = loss(src, tgt[:, :-1], positions, target)
            smoothed.backward()
            results.append((smoothed, nll, *(p.grad for p in model.parameters())))
        torch.testing.assert_close(results[1], results[0], rtol=1e-5, atol=1e-6)
