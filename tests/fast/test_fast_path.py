"""The fast path (`aiayn.fast`) against the core: its two entries swap every core piece over
the same parameters, each fast piece computes what its core piece computes (values and
gradients), and the whole model trains and translates the same with and without it.

Tolerances: float64 pieces agree to 1e-10 (only the summation order differs); float32
pieces to rtol 1e-5, the rounding of float32 products summed in another order (oneDNN's
against MKL's kernels, or the loss's chunks against one pass). Dropout is off (p 0) where
runs are compared: the fast path draws its masks differently by design
(tests/fast/test_compact_dropout.py checks its distribution).
"""

from __future__ import annotations

import copy
import json
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from aiayn import fast
from aiayn.checkpoint import load_checkpoint
from aiayn.cli import main
from aiayn.data.demo_corpus import demo_splits
from aiayn.decode.search import search as core_search
from aiayn.fast.dropout import FastResidual
from aiayn.fast.feedforward import FusedFeedForward
from aiayn.fast.int8 import Int8Linear
from aiayn.fast.linear import OneDnnLinear
from aiayn.fast.loss import ChunkedRealTokenLoss
from aiayn.model.attention import MultiHeadAttention
from aiayn.model.layers import PositionwiseFeedForward, Residual
from aiayn.model.transformer import Transformer
from aiayn.loss import RealTokenLoss
from aiayn.train.trainer import train
from aiayn.train.validate import real_positions
from aiayn.translate import Translator
from conftest import tiny_model_config
from tiny_run import one_thread, prepared_data, tiny_config  # noqa: F401 (autouse fixture)

pytestmark = pytest.mark.usefixtures("onednn")  # oneDNN's products wherever the CPU runs them

CORE_PIECES = (nn.Linear, nn.Dropout, Residual, PositionwiseFeedForward, MultiHeadAttention,
               RealTokenLoss)  # fmt: skip


def grads_of(module: nn.Module, out: torch.Tensor) -> list[torch.Tensor]:
    return list(torch.autograd.grad(out.sum(), [p for p in module.parameters()]))


def close(a, b, dtype: torch.dtype) -> None:
    tol = dict(rtol=1e-10, atol=1e-12) if dtype == torch.float64 else dict(rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(a, b, **tol)


@pytest.mark.parametrize("tied", [True, False])
def test_the_training_entry_swaps_every_core_piece_and_keeps_the_parameters(tied):
    model = Transformer(tiny_model_config(p_drop=0.1, tie_embeddings=tied))
    before = [(name, p) for name, p in model.named_parameters()]
    keys = list(model.state_dict())
    objective = fast.for_training(RealTokenLoss(model, 0.1))
    assert isinstance(objective, ChunkedRealTokenLoss) and objective.model is model
    assert isinstance(model.out_proj, OneDnnLinear)
    assert (model.out_proj.weight is model.tgt_embed.weight) == tied  # the tie holds
    left = [m for m in objective.modules() if type(m) in CORE_PIECES]
    assert left == []  # every core piece swapped
    assert [(name, p) for name, p in model.named_parameters()] == before  # the same objects
    assert list(model.state_dict()) == keys  # checkpoints unchanged
    swapped = [type(m) for m in model.modules()]
    assert fast.apply(model) is model and [type(m) for m in model.modules()] == swapped


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("training", [True, False])
def test_the_fused_feed_forward_is_eq2(dtype, training):
    core = PositionwiseFeedForward(16, 40).to(dtype).train(training)
    ours = FusedFeedForward.from_core(core)
    x = torch.randn(3, 5, 16, dtype=dtype, requires_grad=True)
    with torch.set_grad_enabled(training):
        expected, got = core(x), ours(x)
    close(got, expected, dtype)
    if training:
        expected_g = torch.autograd.grad(expected.sum(), [x, *core.parameters()])
        got_g = torch.autograd.grad(got.sum(), [x, *core.parameters()])
        for a, b in zip(got_g, expected_g):
            close(a, b, dtype)


@pytest.mark.parametrize("pre_norm", [False, True])
def test_the_fast_residual_is_sec_3_1s_sublayer_connection(pre_norm):
    core = Residual(16, 0.0, pre_norm, 1e-6).double()
    ours = FastResidual.from_core(core)
    assert ours.norm is core.norm
    x = torch.randn(2, 4, 16, dtype=torch.float64, requires_grad=True)
    sublayer = nn.Linear(16, 16).double()
    expected, got = core(x, sublayer), ours(x, sublayer)
    close(got, expected, torch.float64)
    params = [x, *core.parameters(), *sublayer.parameters()]
    for a, b in zip(torch.autograd.grad(got.sum(), params), torch.autograd.grad(expected.sum(), params)):
        close(a, b, torch.float64)
    core.eval(), ours.eval()  # with dropout, evaluation is the identity in both
    core.dropout.p = ours.dropout.p = 0.5
    close(ours(x, sublayer), core(x, sublayer), torch.float64)


@pytest.mark.parametrize("cross", [False, True])
def test_the_grouped_attention_is_the_core_attention_without_the_shared_cache(cross):
    """Without the shared cache (training, the encoder, the core's cache) the swapped
    attention runs the core's forward over the same parameters, bit for bit."""
    core = MultiHeadAttention(16, 4, 4, 4, 0.0, cross, bias=True).double()
    ours = fast.attention.GroupedAttention.from_core(core)
    assert [p for p in ours.parameters()] == [p for p in core.parameters()]
    x, memory = torch.randn(2, 5, 16, dtype=torch.float64), torch.randn(2, 7, 16, dtype=torch.float64)
    pad = torch.zeros(2, 7 if cross else 5, dtype=torch.bool)
    pad[1, -2:] = True
    kwargs = dict(memory=memory) if cross else dict(causal=True)
    assert torch.equal(ours(x, key_pad_mask=pad, **kwargs), core(x, key_pad_mask=pad, **kwargs))


@pytest.mark.parametrize("activation", ["swish", "gelu"])
def test_another_activation_or_an_output_bias_keeps_its_core_piece_and_the_function(activation):
    """The fused feed-forward is eq. 2's ReLU and the chunked loss has no bias: a swish or
    gelu model keeps the core feed-forward, a model with an output bias the core loss, and
    the fast projection (oneDNN's product with the bias) computes the same logits and loss."""
    torch.manual_seed(0)
    model = Transformer(tiny_model_config(activation=activation, output_bias=True)).double()
    with torch.no_grad():
        model.output_bias.normal_()
    src, tgt = torch.randint(4, 23, (3, 7)), torch.randint(4, 23, (3, 6))
    positions, target = real_positions(tgt[:, 1:], 0, torch.device("cpu"))
    core = RealTokenLoss(model, 0.1)
    expected_logits = model(src, tgt[:, :-1])
    expected = core(src, tgt[:, :-1], positions, target)
    objective = fast.for_training(core)
    assert objective is core  # no chunked loss: its logits would lose the bias
    kinds = {type(m) for m in model.modules()}
    assert PositionwiseFeedForward in kinds and FusedFeedForward not in kinds
    assert isinstance(model.out_proj, OneDnnLinear) and model.out_proj.bias is model.output_bias
    close(model(src, tgt[:, :-1]), expected_logits, torch.float64)
    for a, b in zip(objective(src, tgt[:, :-1], positions, target), expected):
        close(a, b, torch.float64)
    relu = Transformer(tiny_model_config())
    assert isinstance(fast.for_training(RealTokenLoss(relu, 0.1)), ChunkedRealTokenLoss)


def test_int8_keeps_the_output_bias():
    """The int8 projection packs the output bias with its weight: logits within int8's
    rounding of float32's, where a bias of std 3 left out would move them by ~3."""
    torch.manual_seed(0)
    model = Transformer(tiny_model_config(activation="swish", output_bias=True)).eval()
    with torch.no_grad():
        model.output_bias.normal_(0, 3.0)
    src, tgt = torch.randint(4, 23, (3, 7)), torch.randint(4, 23, (3, 6))
    with torch.no_grad():
        expected = model(src, tgt)
        int8 = fast.for_inference(copy.deepcopy(model), int8=True).model
        got = int8(src, tgt)
    assert isinstance(int8.out_proj, Int8Linear)
    assert (got - expected).abs().mean() < 0.05


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_the_chunked_loss_is_the_cores_loss_with_its_gradients(tied, dtype):
    torch.manual_seed(0)
    model = Transformer(tiny_model_config(tie_embeddings=tied)).to(dtype)
    src, tgt = torch.randint(4, 23, (3, 7)), torch.randint(4, 23, (3, 6))
    src[0, -2:] = tgt[1, -3:] = 0  # padding on both sides
    positions, target = real_positions(tgt[:, 1:], 0, torch.device("cpu"))
    core = RealTokenLoss(model, 0.1)
    chunked = ChunkedRealTokenLoss.from_core(core)
    results = []
    for objective in (core, chunked):
        smoothed, nll = objective(src, tgt[:, :-1], positions, target)
        results.append((smoothed, nll, *torch.autograd.grad(smoothed, list(model.parameters()))))
    for a, b in zip(results[1], results[0]):
        close(a, b, dtype)


def losses(log: str) -> list[float]:
    lines = [json.loads(line) for line in open(log, encoding="utf-8")]
    return [r["loss"] for r in lines if r["event"] == "train"]


def test_training_with_and_without_the_fast_path_gives_the_same_losses(tmp_path_factory):
    """10 updates on the demo data (dropout off): the training loss of every update agrees
    to 1e-5, and the final weights to 5e-4 (the fast path computes the same gradients).
    Adam divides each update by the gradient's running RMS, so a weight whose gradient is
    near zero moves by up to the learning rate for a rounding difference in it: the
    weights' spread, measured on an Intel Xeon with AMX, was 3.2e-5 with its default
    kernels and up to 2.2e-4 with AVX2's (ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2;
    one weight of a 512-weight matrix, 2.0e-5 in an earlier run); under 1e-5 on an AVX2
    AMD EPYC."""
    data = prepared_data(tmp_path_factory.getbasetemp())
    runs = {}
    for name, fast_path in (("fast", "true"), ("reference", "false")):
        config = tiny_config(data, tmp_path_factory.mktemp(name), "train.max_steps=10",
                             "model.p_drop=0.0", f"train.fast={fast_path}")  # fmt: skip
        runs[name] = train(config)
    a, b = (losses(runs[n].out_dir / "train_log.jsonl") for n in ("fast", "reference"))
    assert len(a) == len(b) == 10
    torch.testing.assert_close(torch.tensor(a), torch.tensor(b), rtol=1e-5, atol=0)
    wa, wb = (load_checkpoint(runs[n].final_checkpoint).model.state_dict() for n in runs)
    for key in wa:
        torch.testing.assert_close(wa[key], wb[key], rtol=5e-4, atol=5e-4)


def test_a_trained_model_translates_the_demo_test_split_the_same_either_way(tmp_path_factory):
    data = prepared_data(tmp_path_factory.getbasetemp())
    config = tiny_config(data, tmp_path_factory.mktemp("translate"), "train.max_steps=40",
                         "model.p_drop=0.0")  # fmt: skip
    ckpt = train(config).final_checkpoint
    sources = [src for src, _ in demo_splits(n_train=0, n_valid=0, n_test=150, seed=3).test]
    fast_t = Translator.from_checkpoint(ckpt)
    core_t = Translator.from_checkpoint(ckpt, reference=True)
    assert isinstance(fast_t.search, fast.search.FastSearch)
    assert (fast_t.search_kind, core_t.search_kind) == ("fast path", "core")
    assert core_t.search.func is core_search and core_t.search.args == (core_t.model,)
    assert not any(type(m) in CORE_PIECES for m in fast_t.model.modules())
    assert [type(m) for m in core_t.model.modules() if type(m) in CORE_PIECES]  # the core's own
    assert fast_t.translate(sources) == core_t.translate(sources)


def test_reference_flags_run_the_core(tmp_path, monkeypatch):
    """`train --reference` is train.fast=false; int8 is part of the fast path."""
    seen = []

    def fake_train(config, resume=None, init_from=None):
        seen.append(config)
        return SimpleNamespace(interrupted=False, signal=None)

    monkeypatch.setattr("aiayn.train.trainer.train", fake_train)
    assert main(["train", "base", "--reference", "data.dir=x"]) == 0
    assert main(["train", "base", "data.dir=x"]) == 0
    assert [c.train.fast for c in seen] == [False, True]
    assert main(["translate", "--checkpoint", str(tmp_path), "--int8", "--reference"]) == 2
